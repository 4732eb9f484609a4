import HTTP2Engine
import NIOCore

/// The life of one HTTP/2 connection to APNs, as a plain value.
///
/// The channel handler feeds it events (the peer's SETTINGS, streams opening and closing,
/// GOAWAY, PING acks, timer ticks) and runs the actions it returns. Time comes in with the
/// events, so tests drive it without a network or a clock.
///
/// ```
/// starting ──SETTINGS──► active(maxStreams, openStreams) ──GOAWAY / drain──► draining(lastStreamID)
///     │                        │                                                  │ last stream closed
///     └────────────────────────┴──────────── close / channel closed ─────────────►┴──► closed
/// ```
struct APNsConnectionStateMachine {
    struct Configuration {
        /// Used when the peer's SETTINGS name no MAX_CONCURRENT_STREAMS (unlimited): Herald still caps it.
        var streamCeiling: Int = 1000
        /// PING the peer when nothing was received for this long. `nil`: never.
        var pingInterval: TimeAmount? = .seconds(60)
        /// Close the connection when a PING gets no ACK within this time.
        var pingTimeout: TimeAmount = .seconds(10)
        /// Close the connection when no stream was open for this long. `nil`: never.
        var idleTimeout: TimeAmount? = .seconds(600)
        /// TLS, ALPN and the peer's first SETTINGS must be done within this time.
        var startTimeout: TimeAmount = .seconds(10)
    }

    enum State: Equatable {
        /// TCP, TLS and the HTTP/2 preface: waiting for the peer's first SETTINGS.
        case starting(since: NIODeadline)
        /// Streams may be opened while `openStreams < maxStreams`.
        case active(maxStreams: Int, openStreams: Int)
        /// No new streams; the open ones (all at or below `lastStreamID`) may finish.
        case draining(lastStreamID: HTTP2StreamNumber, openStreams: Int)
        case closed
    }

    /// Why a stream could not be opened. The request was never written: it can go elsewhere.
    enum Refusal: Equatable {
        case notReady
        case noSpareStream
        case draining
        case closed
    }

    enum OpenStreamAction: Equatable {
        case open(HTTP2StreamNumber)
        case refuse(Refusal)
    }

    enum SettingsAction: Equatable {
        case none
        /// The connection is ready for its first streams.
        case ready(maxStreams: Int)
        case maxStreamsChanged(Int)
    }

    enum StreamClosedAction: Equatable {
        case none
        /// Draining and the last stream is done: close the channel.
        case closeConnection
    }

    enum GoAwayAction: Equatable {
        /// Hand the streams above `lastStreamID` back for a retry elsewhere (never processed);
        /// then close at once when `closeNow`, else when the last stream below finishes.
        case drain(refuseAbove: HTTP2StreamNumber, closeNow: Bool)
        case none
    }

    enum DrainAction: Equatable {
        case none
        /// Tell the owner no new streams come here; close once `closeNow` or the last stream closes.
        case draining(closeNow: Bool)
        case closeConnection
    }

    enum CloseAction: Equatable {
        case none
        case closeChannel
    }

    enum TickAction: Equatable {
        case none
        case sendPing(UInt64)
        /// Idle for too long: close gracefully (no stream is open).
        case closeIdle
        /// The peer did not answer a PING in time.
        case closePingTimedOut
        /// TLS, ALPN or the first SETTINGS did not arrive in time.
        case closeStartTimedOut
    }

    private(set) var state: State
    let configuration: Configuration
    /// The next stream ID a request will use (client streams are odd).
    private(set) var nextStreamID: HTTP2StreamNumber = 1
    /// The last time a frame came in (or the connection started).
    private(set) var lastActivity: NIODeadline
    /// When the last stream closed, or the connection became ready without streams.
    private var idleSince: NIODeadline?
    private var outstandingPing: (data: UInt64, sentAt: NIODeadline)?
    private var pingCounter: UInt64 = 0
    /// True once the connection reached `active` at least once.
    private(set) var wasReady = false

    /// The highest stream ID a client may use.
    static let maximumStreamID = HTTP2StreamNumber.max

    init(configuration: Configuration = Configuration(), now: NIODeadline) {
        self.configuration = configuration
        self.state = .starting(since: now)
        self.lastActivity = now
    }

    /// The number of streams that may still be opened now.
    var spareStreams: Int {
        if case .active(let max, let open) = state { return Swift.max(0, max - open) }
        return 0
    }

    var openStreams: Int {
        switch state {
        case .active(_, let open), .draining(_, let open): return open
        case .starting, .closed: return 0
        }
    }

    var isClosed: Bool { state == .closed }

    // MARK: Events

    /// The peer's SETTINGS arrived; `maxConcurrentStreams` is nil when the frame did not carry it.
    mutating func settingsReceived(maxConcurrentStreams: Int?, now: NIODeadline) -> SettingsAction {
        lastActivity = now
        switch state {
        case .starting:
            // Absent means unlimited (RFC 9113 6.5.2); Herald still keeps a ceiling.
            let max = Swift.min(maxConcurrentStreams ?? configuration.streamCeiling, configuration.streamCeiling)
            state = .active(maxStreams: max, openStreams: 0)
            wasReady = true
            idleSince = now
            return .ready(maxStreams: max)
        case .active(let oldMax, let open):
            guard let value = maxConcurrentStreams else { return .none }
            let max = Swift.min(value, configuration.streamCeiling)
            guard max != oldMax else { return .none }
            state = .active(maxStreams: max, openStreams: open)
            return .maxStreamsChanged(max)
        case .draining, .closed:
            return .none
        }
    }

    /// A request wants a stream. On `.open`, write HEADERS on the returned stream ID now.
    mutating func openStream(now: NIODeadline) -> OpenStreamAction {
        switch state {
        case .starting:
            return .refuse(.notReady)
        case .draining:
            return .refuse(.draining)
        case .closed:
            return .refuse(.closed)
        case .active(let max, let open):
            guard open < max else { return .refuse(.noSpareStream) }
            let id = nextStreamID
            if id >= Self.maximumStreamID {
                // Stream IDs are spent: this connection can only drain.
                state = .draining(lastStreamID: id, openStreams: open)
                return .refuse(.draining)
            }
            nextStreamID = id + 2
            state = .active(maxStreams: max, openStreams: open + 1)
            idleSince = nil
            return .open(id)
        }
    }

    /// A stream we opened is finished (answered, reset, refused, timed out).
    mutating func streamClosed(now: NIODeadline) -> StreamClosedAction {
        switch state {
        case .active(let max, let open):
            let remaining = Swift.max(0, open - 1)
            state = .active(maxStreams: max, openStreams: remaining)
            if remaining == 0 { idleSince = now }
            return .none
        case .draining(let last, let open):
            let remaining = Swift.max(0, open - 1)
            if remaining == 0 {
                state = .closed
                return .closeConnection
            }
            state = .draining(lastStreamID: last, openStreams: remaining)
            return .none
        case .starting, .closed:
            return .none
        }
    }

    /// Any frame came in: the connection is alive.
    mutating func frameReceived(now: NIODeadline) {
        lastActivity = now
    }

    /// The peer sent GOAWAY. `streamsAbove` is how many of our open streams have an ID above
    /// `lastStreamID`: the peer never processed them.
    mutating func goAwayReceived(lastStreamID: HTTP2StreamNumber, streamsAbove: Int, now: NIODeadline) -> GoAwayAction {
        lastActivity = now
        switch state {
        case .starting:
            state = .closed
            return .drain(refuseAbove: lastStreamID, closeNow: true)
        case .active(_, let open):
            let remaining = Swift.max(0, open - streamsAbove)
            if remaining == 0 {
                state = .closed
                return .drain(refuseAbove: lastStreamID, closeNow: true)
            }
            state = .draining(lastStreamID: lastStreamID, openStreams: remaining)
            return .drain(refuseAbove: lastStreamID, closeNow: false)
        case .draining(let oldLast, let open):
            // A second GOAWAY may only lower the last stream ID.
            let last = Swift.min(oldLast, lastStreamID)
            let remaining = Swift.max(0, open - streamsAbove)
            if remaining == 0 {
                state = .closed
                return .drain(refuseAbove: last, closeNow: true)
            }
            state = .draining(lastStreamID: last, openStreams: remaining)
            return .drain(refuseAbove: last, closeNow: false)
        case .closed:
            return .none
        }
    }

    /// The owner wants the connection to finish its streams and close (pool drain, idle, rotation).
    mutating func drainRequested() -> DrainAction {
        switch state {
        case .starting:
            state = .closed
            return .closeConnection
        case .active(_, let open):
            if open == 0 {
                state = .closed
                return .draining(closeNow: true)
            }
            let last = nextStreamID - 2
            state = .draining(lastStreamID: last, openStreams: open)
            return .draining(closeNow: false)
        case .draining:
            return .none
        case .closed:
            return .none
        }
    }

    /// The owner wants the connection closed at once; open streams fail.
    mutating func closeRequested() -> CloseAction {
        switch state {
        case .closed:
            return .none
        case .starting, .active, .draining:
            state = .closed
            return .closeChannel
        }
    }

    /// The channel is gone. Open streams got no answer.
    mutating func channelClosed() {
        state = .closed
        outstandingPing = nil
    }

    /// A PING ACK came back.
    mutating func pingAckReceived(data: UInt64, now: NIODeadline) {
        lastActivity = now
        if let ping = outstandingPing, ping.data == data {
            outstandingPing = nil
        }
    }

    /// A timer fired: maybe PING, maybe close an idle or unresponsive connection.
    mutating func tick(now: NIODeadline) -> TickAction {
        switch state {
        case .closed:
            return .none
        case .starting(let since):
            if now - since >= configuration.startTimeout {
                state = .closed
                return .closeStartTimedOut
            }
            return .none
        case .active, .draining:
            if let ping = outstandingPing {
                if now - ping.sentAt >= configuration.pingTimeout {
                    state = .closed
                    outstandingPing = nil
                    return .closePingTimedOut
                }
            }
            if case .active(_, 0) = state, let idleTimeout = configuration.idleTimeout, let since = idleSince,
                now - since >= idleTimeout
            {
                state = .closed
                return .closeIdle
            }
            if outstandingPing == nil, let interval = configuration.pingInterval, now - lastActivity >= interval {
                pingCounter &+= 1
                outstandingPing = (pingCounter, now)
                return .sendPing(pingCounter)
            }
            return .none
        }
    }
}
