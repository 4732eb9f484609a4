import HeraldCore
import HeraldStore
import Logging
import PostgresNIO
import Synchronization

/// The pool's keep-alive: every ``Configuration/interval``, a `SELECT 1` on each of the pool's
/// connections at once (each event loop's, ``BoundedPostgresClient/LoopPool``). A connection no
/// call has used for a while still carries traffic (a NAT or a firewall that drops idle flows
/// keeps it), and one the network has lost fails its query and is replaced, before a call finds
/// it.
///
/// Why not postgres-nio's own (its default: the same query every 30 s on an idle connection):
/// it arms a timer each time a connection goes back to the pool and disarms it at the
/// connection's next lease, and each timer is three tasks, a sleep and their cancellation: more
/// thread wake-ups for every query than the query's own round trip. Herald turns it off, keeps
/// the pool's connections open for good (its minimum is its size, so no idle timer is armed
/// either), and touches them all here on one timer.
struct PoolKeepAlive {
    struct Configuration {
        /// Between two rounds (postgres-nio's default keep-alive frequency).
        var interval: Duration = .seconds(30)
        /// How long each connection leased in a round is held after its query, so that the
        /// round's leases take the pool's connections side by side rather than one connection in
        /// turn, unless all have had their query first.
        var hold: Duration = .milliseconds(100)
    }

    let client: BoundedPostgresClient
    let configuration: Configuration
    let logger: Logger

    /// Runs rounds until cancelled, every ``Configuration/interval`` on `clock`.
    func run(on clock: any PushClock) async {
        await clock.repeating(every: configuration.interval) { await round() }
    }

    /// One round: as many leases as each loop's pool has connections each run `SELECT 1` and
    /// hold their connection until every lease has run it, or ``Configuration/hold`` has passed.
    /// A lease the pool cannot give (its connections busy) waits like any call, within the call
    /// timeout; a query that fails is logged, and its connection is the pool's to replace.
    func round() async {
        let leases = client.pools.flatMap { pool in Array(repeating: pool, count: pool.connections) }
        let gate = Gate(expected: leases.count)
        let client = client
        let logger = logger
        await withDiscardingTaskGroup { group in
            for pool in leases {
                group.addTask {
                    do {
                        try await client.withConnection(in: pool) { connection in
                            do {
                                _ = try await connection.query("SELECT 1", logger: logger).collect()
                            } catch {
                                gate.arrive()
                                throw error
                            }
                            gate.arrive()
                            await gate.wait()
                        }
                    } catch {
                        logger.debug(
                            "a PostgreSQL keep-alive query failed", metadata: ["herald.error": "\(PostgresPushStore.describe(error))"])
                    }
                }
            }
            group.addTask {
                try? await Task.sleep(for: configuration.hold)
                gate.open()
            }
        }
    }

    /// Opens when `expected` leases have arrived, or when told to.
    final class Gate: Sendable {
        private struct State {
            var arrived = 0
            var open = false
            var waiters: [CheckedContinuation<Void, Never>] = []
        }
        private let expected: Int
        private let state = Mutex(State())

        init(expected: Int) { self.expected = expected }

        /// A lease has run its query (or failed): the last one expected opens the gate.
        func arrive() {
            let ready = state.withLock { state in
                state.arrived += 1
                return state.arrived >= expected
            }
            if ready { open() }
        }

        func open() {
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }

        /// Returns once the gate is open (at once if it is).
        func wait() async {
            await withCheckedContinuation { continuation in
                let open = state.withLock { state -> Bool in
                    if state.open { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if open { continuation.resume() }
            }
        }
    }
}
