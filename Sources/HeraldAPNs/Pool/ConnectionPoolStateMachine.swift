import HeraldCore
import NIOCore

/// The decisions of one connection pool (one tenant × endpoint × credential), as a plain value.
///
/// It knows the pool's connections and how many requests each carries, and the bounded queue
/// of requests waiting for a stream. It never touches a socket: the shell (``ConnectionPool``)
/// feeds it events under a lock and runs the returned actions after releasing the lock.
/// `Request` is opaque to it, so tests use plain integers.
///
/// - A request goes to the ready connection with spare streams that carries the fewest requests.
/// - When every connection is full it waits in a queue of at most `maxQueued`; beyond that the
///   submit fails at once (`queueFull`), so memory stays bounded.
/// - Connections open lazily, up to `maxConnections`: when every connection is full, and (with
///   `openNextAt`) when every open one carries that many requests, so that sustained sends
///   spread over the pool's connections instead of filling one. After failures, new
///   connections wait for an exponential backoff with jitter (from the injected random source).
struct ConnectionPoolStateMachine<Request> {
    typealias ConnectionID = Int

    struct Configuration {
        var maxConnections: Int = 2
        var maxQueued: Int = 10_000
        var backoff: Backoff = Backoff()
        /// Consecutive failed connects (none of the pool's connections alive) after which the
        /// waiting requests fail at once with `connectionFailed` instead of waiting for their
        /// deadline: the endpoint refuses us. Below it, a connection that closed before it was
        /// ready is tried again after its backoff and the waiters keep their place (one such
        /// close is seen under load, e.g. a reset during the handshake; failing every waiter
        /// for it would turn one bad connect into as many failed sends).
        var failWaitersAfterFailures: Int = 2
        /// Another connection opens (up to `maxConnections`) once every open, ready connection
        /// carries at least this many requests and none is still connecting. nil: only when
        /// every connection is full (a stream limit of 1,000 is then one connection for nearly
        /// any load, and its one event loop the bound).
        var openNextAt: Int? = nil
    }

    enum ConnectionState: Equatable {
        /// Connecting: TCP, TLS, HTTP/2 preface, waiting for the peer's SETTINGS.
        case connecting
        /// Ready; `maxStreams` is the peer's current SETTINGS_MAX_CONCURRENT_STREAMS.
        case active(maxStreams: Int)
        /// GOAWAY received or drain asked: finishing its streams, takes no new ones.
        case draining
        /// Waiting out a backoff before connecting.
        case backingOff(until: NIODeadline)
    }

    struct Connection: Equatable {
        let id: ConnectionID
        var state: ConnectionState
        /// Requests handed to the connection and not finished yet.
        var inFlight: Int = 0
        /// True once any request on it got an answer: the endpoint works.
        var answered = false
        /// True once its failure counted toward the backoff.
        var countedFailure = false
        var everReady = false

        var spare: Int {
            if case .active(let max) = state { return max - inFlight }
            return 0
        }
    }

    struct Waiter {
        var request: Request
        var deadline: NIODeadline
    }

    enum Lifecycle: Equatable {
        case running
        /// No new submits; the queue and the streams in flight finish, then connections close.
        case draining
        /// Everything failed or closed at once.
        case closed
    }

    /// Why the pool fails a request without sending it.
    enum Failure: Equatable {
        case queueFull
        case timedOut
        case poolClosed
        case connectionFailed
    }

    enum ConnectAction: Equatable {
        case connect(ConnectionID)
        case connectAfter(ConnectionID, TimeAmount)
    }

    /// The answer to a submit or a requeue (the hot path: no allocation).
    enum SubmitAction {
        case execute(Request, ConnectionID)
        /// Run it there, and open another connection (``Configuration/openNextAt``).
        case executeAndConnect(Request, ConnectionID, ConnectAction)
        case enqueued(ConnectAction?)
        case fail(Request, Failure)
    }

    /// The answer to a finished request (the hot path).
    enum FinishAction {
        case none
        case execute(Request, ConnectionID)
        case actions([Action])
    }

    enum Action {
        case execute([Request], ConnectionID)
        case fail([Request], Failure)
        case connect(ConnectionID)
        case connectAfter(ConnectionID, TimeAmount)
        /// Finish the open streams, then close.
        case drainConnection(ConnectionID)
        /// Close at once.
        case closeConnection(ConnectionID)
        /// Every connection is gone after `drain()` or `close()`.
        case poolClosed
    }

    let configuration: Configuration
    private(set) var connections: [Connection] = []
    private(set) var waiters = CircularBuffer<Waiter>()
    private(set) var lifecycle: Lifecycle = .running
    private(set) var consecutiveFailures = 0
    /// New connections wait until then (backoff).
    private(set) var reconnectNotBefore: NIODeadline?
    private var nextConnectionID: ConnectionID = 0
    private var random: SplitMix64
    private var announcedClosed = false

    init(configuration: Configuration, random: SplitMix64 = SplitMix64()) {
        self.configuration = configuration
        self.random = random
    }

    // MARK: Hot path

    /// A new request. It runs on the connection with spare streams that carries the fewest
    /// requests, or waits.
    ///
    /// `local` is the connection on the caller's own event loop, if any: it gets the request
    /// while it carries at most twice (plus one) the least loaded connection's requests (no
    /// thread switch, a shared flush), so load still spreads over the connections.
    mutating func submit(_ request: Request, deadline: NIODeadline, now: NIODeadline, local: ConnectionID? = nil) -> SubmitAction {
        guard lifecycle == .running else { return .fail(request, .poolClosed) }
        if let index = bestConnection(local: local) {
            connections[index].inFlight += 1
            if let openNextAt = configuration.openNextAt, let connect = openNextIfBusy(at: openNextAt, now: now) {
                return .executeAndConnect(request, connections[index].id, connect)
            }
            return .execute(request, connections[index].id)
        }
        guard waiters.count < configuration.maxQueued else { return .fail(request, .queueFull) }
        waiters.append(Waiter(request: request, deadline: deadline))
        return .enqueued(makeConnectionIfNeeded(now: now))
    }

    /// A request handed back unprocessed (GOAWAY above last-stream-id, REFUSED_STREAM, a
    /// connection that closed before writing it). It goes first in line; it was accepted
    /// before, so the queue bound does not apply.
    mutating func requeue(_ request: Request, deadline: NIODeadline, now: NIODeadline) -> SubmitAction {
        guard lifecycle != .closed else { return .fail(request, .poolClosed) }
        guard deadline > now else { return .fail(request, .timedOut) }
        if let index = bestConnection() {
            connections[index].inFlight += 1
            return .execute(request, connections[index].id)
        }
        waiters.prepend(Waiter(request: request, deadline: deadline))
        return .enqueued(makeConnectionIfNeeded(now: now))
    }

    /// Takes the first waiting request that matches out of the queue (its caller cancelled it),
    /// freeing its place. Nil when it is not queued (already on a connection, or gone).
    mutating func removeWaiter(where matches: (Request) -> Bool) -> Request? {
        guard let index = waiters.firstIndex(where: { matches($0.request) }) else { return nil }
        return waiters.remove(at: index).request
    }

    /// A request on `id` is done (`answered`: APNs answered it). Frees a stream for a waiter.
    mutating func requestFinished(on id: ConnectionID, answered: Bool, now: NIODeadline) -> FinishAction {
        guard let index = index(of: id) else { return .none }
        connections[index].inFlight = Swift.max(0, connections[index].inFlight - 1)
        if answered, !connections[index].answered {
            connections[index].answered = true
            consecutiveFailures = 0
            reconnectNotBefore = nil
        }
        if !waiters.isEmpty, connections[index].spare > 0, let waiter = waiters.popFirst() {
            connections[index].inFlight += 1
            return .execute(waiter.request, id)
        }
        if lifecycle != .running {
            let actions = progressShutdown()
            return actions.isEmpty ? .none : .actions(actions)
        }
        return .none
    }

    // MARK: Connection events

    /// The connection finished its handshake and got the peer's first SETTINGS.
    mutating func connectionReady(_ id: ConnectionID, maxStreams: Int, now: NIODeadline) -> [Action] {
        guard let index = index(of: id) else { return [.closeConnection(id)] }
        if lifecycle == .closed { return [.closeConnection(id)] }
        connections[index].state = .active(maxStreams: maxStreams)
        connections[index].everReady = true
        var actions = dispatchWaiters(to: index)
        if lifecycle == .draining { actions += progressShutdown() }
        return actions
    }

    /// The peer changed SETTINGS_MAX_CONCURRENT_STREAMS.
    mutating func maxStreamsChanged(_ id: ConnectionID, maxStreams: Int) -> [Action] {
        guard let index = index(of: id), case .active = connections[index].state else { return [] }
        connections[index].state = .active(maxStreams: maxStreams)
        return dispatchWaiters(to: index)
    }

    /// The connection takes no new streams (GOAWAY, idle, start of a close).
    mutating func connectionDraining(_ id: ConnectionID, now: NIODeadline) -> [Action] {
        guard let index = index(of: id) else { return [] }
        connections[index].state = .draining
        if !connections[index].answered, !connections[index].countedFailure {
            connections[index].countedFailure = true
            recordFailure(now: now)
        }
        var actions: [Action] = []
        if !waiters.isEmpty, lifecycle != .closed, let connect = makeConnectionIfNeeded(now: now) {
            actions.append(connect.action)
        }
        if lifecycle != .running { actions += progressShutdown() }
        return actions
    }

    /// The connection is gone (`failed`: by an error, not by a graceful close).
    mutating func connectionClosed(_ id: ConnectionID, failed: Bool, now: NIODeadline) -> [Action] {
        guard let index = index(of: id) else { return [] }
        let connection = connections.remove(at: index)
        if (failed || !connection.everReady), !connection.countedFailure {
            recordFailure(now: now)
        }
        var actions: [Action] = []
        if !connection.everReady, !waiters.isEmpty {
            let othersAlive = connections.contains { other in
                switch other.state {
                case .active, .connecting: return true
                case .draining, .backingOff: return false
                }
            }
            if !othersAlive, consecutiveFailures >= configuration.failWaitersAfterFailures {
                // The endpoint refuses us: callers learn it now instead of at their deadline.
                var failed: [Request] = []
                failed.reserveCapacity(waiters.count)
                while let waiter = waiters.popFirst() { failed.append(waiter.request) }
                actions.append(.fail(failed, .connectionFailed))
            }
        }
        if !waiters.isEmpty, lifecycle != .closed, let connect = makeConnectionIfNeeded(now: now) {
            actions.append(connect.action)
        }
        if lifecycle != .running { actions += progressShutdown() }
        return actions
    }

    /// A backoff timer ran out.
    mutating func backoffElapsed(_ id: ConnectionID, now: NIODeadline) -> [Action] {
        guard let index = index(of: id), case .backingOff = connections[index].state else { return [] }
        if lifecycle == .closed || (lifecycle == .draining && waiters.isEmpty) {
            connections.remove(at: index)
            return progressShutdown()
        }
        connections[index].state = .connecting
        return [.connect(id)]
    }

    /// A periodic tick: fail the waiters whose deadline passed.
    mutating func tick(now: NIODeadline) -> [Action] {
        var actions: [Action] = []
        if !waiters.isEmpty {
            var expired: [Request] = []
            var kept = CircularBuffer<Waiter>(initialCapacity: waiters.count)
            while let waiter = waiters.popFirst() {
                if waiter.deadline <= now { expired.append(waiter.request) } else { kept.append(waiter) }
            }
            waiters = kept
            if !expired.isEmpty { actions.append(.fail(expired, .timedOut)) }
        }
        if lifecycle != .running { actions += progressShutdown() }
        return actions
    }

    // MARK: Shutdown

    /// Stop taking new requests; let the queue and the streams in flight finish, then close.
    mutating func drain() -> [Action] {
        guard lifecycle == .running else { return lifecycle == .draining ? progressShutdown() : [] }
        lifecycle = .draining
        return progressShutdown()
    }

    /// Fail the queue and close every connection now.
    mutating func close() -> [Action] {
        guard lifecycle != .closed else { return [] }
        lifecycle = .closed
        var actions: [Action] = []
        if !waiters.isEmpty {
            var failed: [Request] = []
            while let waiter = waiters.popFirst() { failed.append(waiter.request) }
            actions.append(.fail(failed, .poolClosed))
        }
        connections.removeAll { connection in
            if case .backingOff = connection.state { return true }
            return false
        }
        for connection in connections { actions.append(.closeConnection(connection.id)) }
        actions += progressShutdown()
        return actions
    }

    // MARK: Helpers

    private func index(of id: ConnectionID) -> Int? {
        connections.firstIndex { $0.id == id }
    }

    /// The ready connection with spare streams that carries the fewest requests (the first of
    /// equals), or `local` while it carries at most twice that plus one. By requests, not by
    /// spare streams: a connection just opened on a token credential allows one stream until
    /// its first request is answered, and would never get that request beside one with 900
    /// spare.
    private func bestConnection(local: ConnectionID? = nil) -> Int? {
        var least: Int? = nil
        var localIndex: Int? = nil
        for index in connections.indices where connections[index].spare > 0 {
            if let current = least {
                if connections[index].inFlight < connections[current].inFlight { least = index }
            } else {
                least = index
            }
            if let local, connections[index].id == local { localIndex = index }
        }
        if let localIndex, let least, connections[localIndex].inFlight <= 2 * connections[least].inFlight + 1 {
            return localIndex
        }
        return least
    }

    /// Another connection when every open one is ready and carries at least `threshold`
    /// requests (draining ones aside), up to the limit; none while one is connecting or backing
    /// off (one at a time). Called by ``submit(_:deadline:now:local:)`` only, so the pool runs.
    private mutating func openNextIfBusy(at threshold: Int, now: NIODeadline) -> ConnectAction? {
        for connection in connections {
            switch connection.state {
            case .connecting, .backingOff: return nil
            case .draining: continue
            case .active: if connection.inFlight < threshold { return nil }
            }
        }
        return makeConnectionIfNeeded(now: now)
    }

    private mutating func dispatchWaiters(to index: Int) -> [Action] {
        var spare = connections[index].spare
        guard spare > 0, !waiters.isEmpty else { return [] }
        var requests: [Request] = []
        requests.reserveCapacity(Swift.min(spare, waiters.count))
        while spare > 0, let waiter = waiters.popFirst() {
            requests.append(waiter.request)
            spare -= 1
        }
        connections[index].inFlight += requests.count
        return [.execute(requests, connections[index].id)]
    }

    /// Opens one more connection when below the limit (after the backoff, if one runs).
    private mutating func makeConnectionIfNeeded(now: NIODeadline) -> ConnectAction? {
        let counted = connections.reduce(0) { count, connection in
            connection.state == .draining ? count : count + 1
        }
        guard counted < configuration.maxConnections else { return nil }
        let id = nextConnectionID
        nextConnectionID += 1
        if let notBefore = reconnectNotBefore, notBefore > now {
            connections.append(Connection(id: id, state: .backingOff(until: notBefore)))
            return .connectAfter(id, notBefore - now)
        }
        connections.append(Connection(id: id, state: .connecting))
        return .connect(id)
    }

    private mutating func recordFailure(now: NIODeadline) {
        consecutiveFailures += 1
        let delay = configuration.backoff.delay(afterFailures: consecutiveFailures, using: &random)
        reconnectNotBefore = now + delay
    }

    /// While draining or closed: once the queue is empty, drain the connections; once none
    /// is left, say so (once).
    private mutating func progressShutdown() -> [Action] {
        var actions: [Action] = []
        if lifecycle == .draining, waiters.isEmpty {
            var remaining: [Connection] = []
            for var connection in connections {
                switch connection.state {
                case .active:
                    connection.state = .draining
                    actions.append(.drainConnection(connection.id))
                    remaining.append(connection)
                case .connecting:
                    actions.append(.closeConnection(connection.id))
                    connection.state = .draining
                    remaining.append(connection)
                case .draining:
                    remaining.append(connection)
                case .backingOff:
                    break
                }
            }
            connections = remaining
        }
        if lifecycle != .running, connections.isEmpty, !announcedClosed {
            announcedClosed = true
            actions.append(.poolClosed)
        }
        return actions
    }
}

extension ConnectionPoolStateMachine.ConnectAction {
    var action: ConnectionPoolStateMachine.Action {
        switch self {
        case .connect(let id): return .connect(id)
        case .connectAfter(let id, let delay): return .connectAfter(id, delay)
        }
    }
}
