import HeraldCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// The HTTP/2 connections of one tenant to one APNs endpoint with one credential.
///
/// A thin shell around ``ConnectionPoolStateMachine``: every event is applied under a lock and
/// the resulting actions (connect, write, fail, close) run after the lock is released. Pools
/// share nothing with each other except the event loops: each has its own connections, queue
/// and limits, so one tenant's stalled endpoint cannot hold up another tenant's sends.
final class ConnectionPool: APNsConnectionDelegate, Sendable {
    struct Configuration: Sendable {
        var maxConnections: Int = 2
        var maxQueued: Int = 10_000
        var backoff = Backoff()
        /// See ``ConnectionPoolStateMachine/Configuration/openNextAt``.
        var openNextAt: Int? = nil
        var connection = APNsConnection.Configuration()
    }

    private typealias Machine = ConnectionPoolStateMachine<APNsRequest>

    private struct State {
        var machine: Machine
        var connections: [Int: APNsConnection] = [:]
        var lastConnectError: (any Error)?
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
        var closed = false
    }

    /// What to do once the lock is released.
    private enum Effect {
        case execute(APNsRequest, APNsConnection)
        case executeMany([APNsRequest], APNsConnection)
        case fail([APNsRequest], APNsTransportError)
        case start(APNsConnection)
        case startAfter(Int, TimeAmount)
        case drain(APNsConnection)
        case close(APNsConnection)
        case closed([CheckedContinuation<Void, Never>])
        indirect case multiple([Effect])
    }

    let endpoint: APNsEndpoint
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    /// Where a connection opens whenever none of the pool's connections runs there (the
    /// transport's home loop, where its busiest senders run; the others take the group's next),
    /// and where the pool's timers run. One loop chosen per pool, not two: with two calls of
    /// `group.next()` a pool, every tenant's first connection would land on the same loop of two.
    private let homeLoop: any EventLoop
    private let configuration: Configuration
    private let logger: Logger
    private let state: Mutex<State>
    private let housekeeping: Mutex<RepeatedTask?>

    init(
        endpoint: APNsEndpoint, sslContext: NIOSSLContext, configuration: Configuration, group: any EventLoopGroup,
        homeLoop: (any EventLoop)? = nil, logger: Logger, random: SplitMix64 = SplitMix64()
    ) {
        self.endpoint = endpoint
        self.sslContext = sslContext
        self.group = group
        self.homeLoop = homeLoop ?? group.next()
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "herald.endpoint"] = "\(endpoint)"
        self.logger = logger
        let machineConfiguration = Machine.Configuration(
            maxConnections: max(1, configuration.maxConnections), maxQueued: max(0, configuration.maxQueued),
            backoff: configuration.backoff, openNextAt: configuration.openNextAt.map { max(1, $0) })
        self.state = Mutex(State(machine: Machine(configuration: machineConfiguration, random: random)))
        self.housekeeping = Mutex(nil)
        let interval = configuration.connection.housekeepingInterval
        let task = self.homeLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [weak self] task in
            guard let self else {
                task.cancel()
                return
            }
            self.tick()
        }
        housekeeping.withLock { $0 = task }
    }

    // MARK: Sending

    /// Runs the request: on a connection now, or after a wait in the queue, or fails it at once
    /// (queue full, pool closed). The outcome goes to the request's completion.
    func submit(_ request: APNsRequest) {
        // A cancellable request is held by the queue until a connection takes it (which then
        // registers its own way to let go); a cancel in between finds it gone from the queue and
        // the connection sees the mark.
        if request.isCancellable, !request.setCancelHandler({ [weak self] in self?.cancel(request) }) {
            request.complete(.failure(.cancelled(mayHaveBeenProcessed: false)))
            return
        }
        let now = NIODeadline.now()
        let currentLoop = MultiThreadedEventLoopGroup.currentEventLoop
        let effect: Effect? = state.withLock { state in
            var local: Int? = nil
            if let currentLoop {
                for (id, connection) in state.connections where connection.eventLoop === currentLoop {
                    local = id
                    break
                }
            }
            switch state.machine.submit(request, deadline: request.deadline, now: now, local: local) {
            case .execute(let request, let id):
                guard let connection = state.connections[id] else { return .fail([request], .connectionClosed(mayHaveBeenProcessed: false)) }
                return .execute(request, connection)
            case .executeAndConnect(let request, let id, let connect):
                // Rare (a connection opens): the array is made only then.
                let start = makeConnectEffect(connect, in: &state)
                guard let connection = state.connections[id] else {
                    return .multiple([.fail([request], .connectionClosed(mayHaveBeenProcessed: false)), start])
                }
                return .multiple([.execute(request, connection), start])
            case .enqueued(let connect):
                guard let connect else { return nil }
                return makeConnectEffect(connect, in: &state)
            case .fail(let request, let failure):
                return .fail([request], Self.error(for: failure, lastError: state.lastConnectError))
            }
        }
        if let effect { run(effect) }
    }

    /// The caller cancelled a queued request: it leaves the queue (its place is free at once) and
    /// fails with `cancelled`. Does nothing when a connection took it meanwhile.
    func cancel(_ request: APNsRequest) {
        let removed = state.withLock { state in
            state.machine.removeWaiter(where: { $0 === request })
        }
        removed?.complete(.failure(.cancelled(mayHaveBeenProcessed: false)))
    }

    // MARK: Shutdown

    /// Takes no new requests, lets the queued and in-flight ones finish, then closes every
    /// connection. Returns when all are closed.
    func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let effects: [Effect] = state.withLock { state in
                if state.closed { return [.closed([continuation])] }
                state.closeWaiters.append(continuation)
                return resolve(state.machine.drain(), in: &state)
            }
            run(effects)
        }
    }

    /// Fails the queue and closes every connection at once (in-flight requests fail).
    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let effects: [Effect] = state.withLock { state in
                if state.closed { return [.closed([continuation])] }
                state.closeWaiters.append(continuation)
                return resolve(state.machine.close(), in: &state)
            }
            run(effects)
        }
    }

    /// For tests and metrics: connections and queue length.
    var snapshot: (connections: [ConnectionPoolStateMachine<APNsRequest>.Connection], queued: Int) {
        state.withLock { ($0.machine.connections, $0.machine.waiters.count) }
    }

    // MARK: APNsConnectionDelegate

    func connectionReady(_ id: Int, maxStreams: Int) {
        let now = NIODeadline.now()
        let effects = state.withLock { state in
            resolve(state.machine.connectionReady(id, maxStreams: maxStreams, now: now), in: &state)
        }
        run(effects)
    }

    func connectionMaxStreamsChanged(_ id: Int, maxStreams: Int) {
        let effects = state.withLock { state in
            resolve(state.machine.maxStreamsChanged(id, maxStreams: maxStreams), in: &state)
        }
        run(effects)
    }

    func connectionDraining(_ id: Int) {
        let now = NIODeadline.now()
        let effects = state.withLock { state in
            resolve(state.machine.connectionDraining(id, now: now), in: &state)
        }
        run(effects)
    }

    func connectionRequestFinished(_ id: Int, answered: Bool, now: NIODeadline) {
        let effect: Effect? = state.withLock { state in
            switch state.machine.requestFinished(on: id, answered: answered, now: now) {
            case .none:
                return nil
            case .execute(let request, let id):
                guard let connection = state.connections[id] else { return .fail([request], .connectionClosed(mayHaveBeenProcessed: false)) }
                return .execute(request, connection)
            case .actions(let actions):
                let effects = resolve(actions, in: &state)
                return effects.isEmpty ? nil : .multiple(effects)
            }
        }
        if let effect { run(effect) }
    }

    func connectionHandBack(_ request: APNsRequest, from id: Int) {
        let now = NIODeadline.now()
        let cancelled = request.isCancellable && !request.setCancelHandler({ [weak self] in self?.cancel(request) })
        let effects: [Effect] = state.withLock { state in
            var effects: [Effect] = []
            switch state.machine.requestFinished(on: id, answered: false, now: now) {
            case .none: break
            case .execute(let other, let otherID):
                if let connection = state.connections[otherID] {
                    effects.append(.execute(other, connection))
                } else {
                    effects.append(.fail([other], .connectionClosed(mayHaveBeenProcessed: false)))
                }
            case .actions(let actions):
                effects += resolve(actions, in: &state)
            }
            if cancelled {
                effects.append(.fail([request], .cancelled(mayHaveBeenProcessed: false)))
                return effects
            }
            let requeued = state.machine.requeue(request, deadline: request.deadline, now: now)
            switch requeued {
            case .execute(let request, let targetID), .executeAndConnect(let request, let targetID, _):
                if let connection = state.connections[targetID] {
                    effects.append(.execute(request, connection))
                } else {
                    effects.append(.fail([request], .connectionClosed(mayHaveBeenProcessed: false)))
                }
                if case .executeAndConnect(_, _, let connect) = requeued { effects.append(makeConnectEffect(connect, in: &state)) }
            case .enqueued(let connect):
                if let connect { effects.append(makeConnectEffect(connect, in: &state)) }
            case .fail(let request, let failure):
                effects.append(.fail([request], Self.error(for: failure, lastError: state.lastConnectError)))
            }
            return effects
        }
        run(effects)
    }

    func connectionClosed(_ id: Int, failed: Bool, error: (any Error)?) {
        let now = NIODeadline.now()
        let effects = state.withLock { state in
            state.connections[id] = nil
            if let error { state.lastConnectError = error }
            return resolve(state.machine.connectionClosed(id, failed: failed, now: now), in: &state)
        }
        if let proxy = (error as? ProxyError) ?? ((error as? APNsTransportError)?.underlying as? ProxyError) {
            // Every failed tunnel, once per connection attempt (attempts back off): the proxy's
            // address and what it did, never its credentials.
            logger.warning(
                "outbound proxy failed",
                metadata: [
                    "herald.connection": "\(id)", "herald.proxy": "\(proxy.proxy)", "herald.proxy-failure": "\(proxy.kind.rawValue)",
                    "herald.error": "\(proxy.detail)",
                ])
        } else if failed {
            logger.debug("APNs connection closed", metadata: ["herald.connection": "\(id)"])
        }
        run(effects)
    }

    // MARK: Internals

    private func tick() {
        let now = NIODeadline.now()
        let effects = state.withLock { state in
            resolve(state.machine.tick(now: now), in: &state)
        }
        run(effects)
    }

    private func backoffElapsed(_ id: Int) {
        let now = NIODeadline.now()
        let effects = state.withLock { state in
            resolve(state.machine.backoffElapsed(id, now: now), in: &state)
        }
        run(effects)
    }

    private func makeConnection(id: Int, in state: inout State) -> APNsConnection {
        let connection = APNsConnection(
            id: id, endpoint: endpoint, sslContext: sslContext, configuration: configuration.connection,
            eventLoop: loopForNewConnection(id: id, in: state), delegate: self, logger: logger)
        state.connections[id] = connection
        return connection
    }

    /// The home loop, or else a loop none of the pool's other connections runs on (so that its
    /// connections' reads and writes run on as many threads as it has connections), or else the
    /// group's next.
    private func loopForNewConnection(id: Int, in state: State) -> any EventLoop {
        func taken(_ loop: any EventLoop) -> Bool {
            state.connections.contains { $0.key != id && $0.value.eventLoop === loop }
        }
        if !taken(homeLoop) { return homeLoop }
        for loop in group.makeIterator() where !taken(loop) { return loop }
        return group.next()
    }

    private func makeConnectEffect(_ connect: Machine.ConnectAction, in state: inout State) -> Effect {
        switch connect {
        case .connect(let id):
            return .start(makeConnection(id: id, in: &state))
        case .connectAfter(let id, let delay):
            return .startAfter(id, delay)
        }
    }

    private func resolve(_ actions: [Machine.Action], in state: inout State) -> [Effect] {
        var effects: [Effect] = []
        effects.reserveCapacity(actions.count)
        for action in actions {
            switch action {
            case .execute(let requests, let id):
                if let connection = state.connections[id] {
                    effects.append(.executeMany(requests, connection))
                } else {
                    effects.append(.fail(requests, .connectionClosed(mayHaveBeenProcessed: false)))
                }
            case .fail(let requests, let failure):
                effects.append(.fail(requests, Self.error(for: failure, lastError: state.lastConnectError)))
            case .connect(let id):
                effects.append(.start(makeConnection(id: id, in: &state)))
            case .connectAfter(let id, let delay):
                effects.append(.startAfter(id, delay))
            case .drainConnection(let id):
                if let connection = state.connections[id] { effects.append(.drain(connection)) }
            case .closeConnection(let id):
                if let connection = state.connections[id] { effects.append(.close(connection)) }
            case .poolClosed:
                state.closed = true
                let waiters = state.closeWaiters
                state.closeWaiters = []
                effects.append(.closed(waiters))
            }
        }
        return effects
    }

    private static func error(for failure: Machine.Failure, lastError: (any Error)?) -> APNsTransportError {
        switch failure {
        case .queueFull: return .queueFull
        case .timedOut: return .timedOut(mayHaveBeenProcessed: false)
        case .poolClosed: return .poolClosed
        case .connectionFailed: return .connectionFailed(lastError)
        }
    }

    private func run(_ effects: [Effect]) {
        for effect in effects { run(effect) }
    }

    private func run(_ effect: Effect) {
        switch effect {
        case .execute(let request, let connection):
            connection.execute(request)
        case .executeMany(let requests, let connection):
            connection.execute(requests)
        case .fail(let requests, let error):
            for request in requests { request.complete(.failure(error)) }
        case .start(let connection):
            logger.debug("APNs connecting", metadata: ["herald.connection": "\(connection.id)"])
            connection.start()
        case .startAfter(let id, let delay):
            logger.debug("APNs reconnect backing off", metadata: ["herald.connection": "\(id)", "herald.delay-ms": "\(delay.nanoseconds / 1_000_000)"])
            homeLoop.scheduleTask(in: delay) { [weak self] in
                self?.backoffElapsed(id)
            }
        case .drain(let connection):
            connection.drain()
        case .close(let connection):
            connection.close()
        case .closed(let waiters):
            housekeeping.withLock { task in
                task?.cancel()
                task = nil
            }
            for waiter in waiters { waiter.resume() }
        case .multiple(let effects):
            run(effects)
        }
    }
}
