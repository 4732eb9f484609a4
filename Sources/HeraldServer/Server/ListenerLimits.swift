import HeraldConfig
import HummingbirdCore
import Metrics
import NIOCore
import Synchronization

/// The API listener's limits from `http:` in Hummingbird's terms (see ``BodyTimeoutHandler``).
enum ListenerLimits {
    /// HTTP/1 with Hummingbird's idle timeout (a connection with no whole request in progress),
    /// `Expect: 100-continue` answered (``ExpectContinueHandler``), ``BodyTimeoutHandler`` on every connection, and idle connections closed to make room near
    /// the connection cap (``IdleConnectionReaper``).
    static func server(_ http: HeraldConfig.ServerConfiguration.HTTPSettings, reaper: IdleConnectionReaper) -> HTTPServerBuilder {
        let bodyTimeout = timeAmount(seconds: http.bodyTimeout)
        return .http1(
            configuration: HTTP1Channel.Configuration(
                additionalChannelHandlers: [
                    ExpectContinueHandler(), BodyTimeoutHandler(timeout: bodyTimeout), IdleConnectionTracker(reaper: reaper),
                ],
                idleTimeout: timeAmount(seconds: http.idleTimeout)))
    }

    /// At most `http.maxConnections` open connections: the server stops accepting at the cap.
    static func connectionCap(_ http: HeraldConfig.ServerConfiguration.HTTPSettings, gate: ListenerGate) -> any AvailableConnectionsDelegate {
        ConnectionCap(maxConnections: http.maxConnections, gate: gate)
    }

    /// The parser keeps these within 100 ms ... 1 h, so the conversion cannot overflow.
    static func timeAmount(seconds: Double) -> TimeAmount {
        .nanoseconds(Int64((seconds * 1e9).rounded()))
    }
}

/// What the listener's connection cap has done: how many connections it let in and whether it
/// has stopped accepting (new connections then wait in the kernel's backlog until one closes).
final class ListenerGate: Sendable {
    private let accepted = Atomic<Int>(0)
    private let paused = Atomic<Bool>(false)
    private let pauses = Counter(label: "herald_http_accept_paused_total")

    /// Connections accepted since start.
    var acceptedCount: Int { accepted.load(ordering: .relaxed) }

    /// True while the listener accepts nothing because `http.max_connections` are open.
    var isPaused: Bool { paused.load(ordering: .acquiring) }

    fileprivate func opened() {
        accepted.add(1, ordering: .relaxed)
    }

    fileprivate func stop() {
        guard !paused.exchange(true, ordering: .acquiringAndReleasing) else { return }
        pauses.increment()
    }

    fileprivate func resume() {
        paused.store(false, ordering: .releasing)
    }
}

/// Hummingbird's connection cap, reporting to a ``ListenerGate``: the listener reads no new
/// connection while `maxConnections` are open.
private struct ConnectionCap: AvailableConnectionsDelegate {
    let maxConnections: Int
    let gate: ListenerGate
    var open = 0

    mutating func connectionOpened() {
        open += 1
        gate.opened()
    }

    mutating func connectionClosed() {
        open -= 1
        if open < maxConnections { gate.resume() }
    }

    func isAcceptingNewConnections() -> Bool {
        guard open < maxConnections else {
            gate.stop()
            return false
        }
        return true
    }
}
