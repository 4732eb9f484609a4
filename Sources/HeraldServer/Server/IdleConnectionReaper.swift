import Metrics
import NIOCore
import NIOHTTPTypes
import Synchronization

/// Keeps room on the API listener for callers that send requests.
///
/// Hummingbird stops accepting at `http.max_connections`; on its own that lets one caller who
/// opens thousands of sockets and sends nothing (or keeps idle keep-alive connections) fill the
/// cap, and every other tenant's new connection then waits in the backlog. Like nginx reusing
/// keep-alive connections when it runs short, the reaper closes idle connections — no request in
/// progress — when the open connections reach `threshold` (below the cap), the one idle longest
/// first. A connection with a request in progress is never closed here, so only real work counts
/// against the hard cap.
final class IdleConnectionReaper: Sendable {
    private struct Entry {
        let channel: any Channel
        var busy: Bool
        /// `NIODeadline.now().uptimeNanoseconds` of the last request start or response end.
        var lastActivity: UInt64
    }

    private struct State {
        var entries: [ObjectIdentifier: Entry] = [:]
    }

    /// Open connections above which idle ones are closed.
    let threshold: Int
    /// The listener's cap (`http.max_connections`).
    let maxConnections: Int
    /// How long a connection must have been idle before it is closed to make room (1 s).
    static let grace: UInt64 = 1_000_000_000
    private let state = Mutex(State())
    private let reaped = Atomic<Int>(0)
    private let reapedCounter = Counter(label: "herald_http_idle_connections_closed_total")

    /// The threshold leaves a sixteenth of the cap (at least one connection) free for new ones.
    init(maxConnections: Int) {
        let headroom = max(1, maxConnections / 16)
        threshold = max(1, maxConnections - headroom)
        self.maxConnections = maxConnections
    }

    /// Connections closed to make room, since start.
    var reapedCount: Int { reaped.load(ordering: .relaxed) }

    /// Open connections known to the reaper.
    var openCount: Int { state.withLock { $0.entries.count } }

    /// Open connections with a request in progress (never closed to make room).
    var busyCount: Int { state.withLock { $0.entries.values.lazy.filter(\.busy).count } }

    func opened(_ channel: any Channel) {
        let now = NIODeadline.now().uptimeNanoseconds
        let victims = state.withLock { state -> [any Channel] in
            state.entries[ObjectIdentifier(channel)] = Entry(channel: channel, busy: false, lastActivity: now)
            let excess = state.entries.count - threshold
            guard excess > 0 else { return [] }
            // The idle connections, the one idle longest first. Those idle for less than the grace
            // period (a head may be on its way) are spared unless the cap itself is reached, where
            // the listener stops accepting until one closes.
            let idle = state.entries.filter { $0.key != ObjectIdentifier(channel) && !$0.value.busy }
                .sorted { $0.value.lastActivity < $1.value.lastActivity }
            let settled = idle.prefix { now &- $0.value.lastActivity >= Self.grace }
            var chosen = Array(settled.prefix(excess))
            if chosen.isEmpty, state.entries.count >= maxConnections, let oldest = idle.first {
                chosen = [oldest]
            }
            for (key, _) in chosen { state.entries[key] = nil }
            return chosen.map(\.value.channel)
        }
        guard !victims.isEmpty else { return }
        reaped.add(victims.count, ordering: .relaxed)
        reapedCounter.increment(by: victims.count)
        for victim in victims { victim.close(promise: nil) }
    }

    /// Records a request starting (`busy`) or its response ending. Returns true when the
    /// connection, now idle, should be closed once its response is written: more connections are
    /// open than the threshold (the listener may have stopped accepting at the cap, and an idle
    /// connection would otherwise hold a slot a waiting caller needs until the idle timeout).
    @discardableResult
    func activity(_ channel: any Channel, busy: Bool) -> Bool {
        let close = state.withLock { state -> Bool in
            let key = ObjectIdentifier(channel)
            guard state.entries[key] != nil else { return false }
            if !busy, state.entries.count > threshold {
                state.entries[key] = nil
                return true
            }
            state.entries[key]?.busy = busy
            state.entries[key]?.lastActivity = NIODeadline.now().uptimeNanoseconds
            return false
        }
        if close {
            reaped.add(1, ordering: .relaxed)
            reapedCounter.increment()
        }
        return close
    }

    func closed(_ channel: any Channel) {
        _ = state.withLock { $0.entries.removeValue(forKey: ObjectIdentifier(channel)) }
    }
}

/// One connection's view for ``IdleConnectionReaper``: busy from a request head until its
/// response ends.
final class IdleConnectionTracker: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let reaper: IdleConnectionReaper
    private var registered = false

    init(reaper: IdleConnectionReaper) {
        self.reaper = reaper
    }

    func handlerAdded(context: ChannelHandlerContext) {
        registered = true
        reaper.opened(context.channel)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            reaper.activity(context.channel, busy: true)
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .end = unwrapOutboundIn(data), reaper.activity(context.channel, busy: false) else {
            context.write(data, promise: promise)
            return
        }
        // Over the threshold: this connection gives its slot back once its answer is written.
        registered = false
        let written = promise ?? context.eventLoop.makePromise(of: Void.self)
        let channel = context.channel
        written.futureResult.whenComplete { _ in channel.close(promise: nil) }
        context.write(data, promise: written)
    }

    func channelInactive(context: ChannelHandlerContext) {
        unregister(context.channel)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        unregister(context.channel)
    }

    private func unregister(_ channel: any Channel) {
        guard registered else { return }
        registered = false
        reaper.closed(channel)
    }
}
