import EventLoopExecutors
import HeraldCore
import HeraldStore
import Logging
import PostgresNIO
import Synchronization

/// postgres-nio's pooled clients, one an event loop, with every call bounded in time
/// (``StoreDeadline``): a query, or a transaction or a leased connection with everything its
/// closure does, that gets no answer within `limit` fails with ``StoreError/timedOut(_:)`` instead
/// of waiting for ever, and one whose connection could not be made or was lost fails with
/// ``StoreError/unavailable(_:)``.
///
/// Why bounded: after a PostgreSQL restart, postgres-nio 1.33.2 can lose a query written to a
/// connection that has just closed, and the call never returns; unbounded, the job runner would
/// stop for good (its scan, a claim or a commit group waiting) until the process restarts.
/// Bounded, the call fails like any other store failure: the job pauses and resumes at the next
/// scan, and the heartbeat and lease renewal try again at their next turn.
///
/// The connections are shared out over the event loops (``LoopPool``), and every call runs, from
/// its lease to the hand-over of its result, on the loop of the pool it leases from: its
/// statements are written, answered and their rows read there. A call made on a loop (a job's
/// writer and feeder run on their connection's) takes a connection of that loop's while one is
/// free, so it is made and answered without waking another thread. Other calls, and a call whose
/// loop's connections are all in use, go to the pool with the fewest calls under way, and wake
/// the caller's thread once, for the result.
struct BoundedPostgresClient: Sendable {
    /// One postgres-nio client an event loop, each with its share of the connections; never
    /// empty.
    let pools: [LoopPool]
    /// The longest a call waits (`storage.postgres.call_timeout`).
    let limit: Duration
    /// The calls' deadlines, on the system's clock (tests step theirs).
    let deadlines: StoreDeadline
    /// The calls that timed out or found the server unreachable (`/metrics`).
    let unanswered = UnansweredCallCounter()

    /// The connections of one event loop: a postgres-nio client whose connections all live on
    /// `loop`, and the calls under way on it (leasing or holding a connection).
    final class LoopPool: Sendable {
        let client: PostgresClient
        let loop: any EventLoop
        /// Runs the calls' tasks on ``loop``.
        let executor: EventLoopTaskExecutor
        let connections: Int
        let calls = Atomic<Int>(0)

        init(client: PostgresClient, loop: any EventLoop, connections: Int) {
            self.client = client
            self.loop = loop
            self.executor = EventLoopTaskExecutor(loop)
            self.connections = connections
        }
    }

    /// `total` connections shared out over `loops`, as evenly as they go: one pool a loop while
    /// there are connections enough, each at least one.
    static func shares(of total: Int, over loops: Int) -> [Int] {
        let pools = max(1, min(total, loops))
        return (0..<pools).map { total / pools + ($0 < total % pools ? 1 : 0) }
    }

    /// The pool a call goes to: the caller's loop's while it has a connection free, else the
    /// one with the fewest calls under way.
    func pool() -> LoopPool {
        if pools.count > 1, let local = pools.first(where: { $0.loop.inEventLoop }),
            local.calls.load(ordering: .relaxed) < local.connections
        {
            return local
        }
        var chosen = pools[0]
        var fewest = chosen.calls.load(ordering: .relaxed)
        for pool in pools.dropFirst() {
            let calls = pool.calls.load(ordering: .relaxed)
            if calls < fewest { (chosen, fewest) = (pool, calls) }
        }
        return chosen
    }

    /// ``PostgresClient/query(_:logger:file:line:)``, bounded, its rows read on the connection's
    /// loop before it returns.
    @discardableResult
    func query(
        _ query: PostgresQuery, logger: Logger? = nil, file: String = #fileID, line: Int = #line
    ) async throws -> Rows {
        let logger = logger ?? Self.silent
        return try await withConnection { connection in
            Rows(rows: try await connection.query(query, logger: logger, file: file, line: line).collect())
        }
    }

    /// A query's rows, all read: iterated as postgres-nio's row sequence is.
    struct Rows: AsyncSequence, Sendable {
        typealias Element = PostgresRow
        let rows: [PostgresRow]

        struct AsyncIterator: AsyncIteratorProtocol {
            var base: IndexingIterator<[PostgresRow]>
            mutating func next() async throws -> PostgresRow? { base.next() }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: rows.makeIterator()) }

        /// Every row (read already).
        func collect() async throws -> [PostgresRow] { rows }
    }

    /// ``PostgresClient/execute(_:logger:file:line:)``, bounded: a statement prepared once on
    /// each connection, so that the server plans it from its cached plan instead of for every
    /// call. Its rows are read on the connection's loop before it returns.
    func execute<Statement: PostgresPreparedStatement>(
        _ statement: Statement, logger: Logger? = nil, file: String = #fileID, line: Int = #line
    ) async throws -> [Statement.Row] where Statement.Row: Sendable {
        let logger = logger ?? Self.silent
        return try await withConnection { connection in
            try await connection.rows(statement, logger: logger, file: file, line: line)
        }
    }

    /// ``PostgresClient/withConnection(_:)``, bounded (the lease and the closure together); the
    /// closure runs on the connection's loop.
    /// - Parameter pool: the pool to lease from (nil: ``pool()``'s choice).
    func withConnection<Result: Sendable>(
        in pool: LoopPool? = nil, _ closure: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let pool = pool ?? self.pool()
        return try await bounded(on: pool.executor) {
            try await Self.counted(in: pool) {
                try await pool.client.withConnection { connection in try await closure(connection) }
            }
        }
    }

    /// ``PostgresClient/withTransaction(logger:file:line:isolation:_:)``, bounded (BEGIN, the
    /// closure and COMMIT together). A transaction cut off by the bound is rolled back by the
    /// server when its connection goes, or by postgres-nio when its closure's query fails.
    /// - Parameter onConnectionLoop: whether the transaction runs on the connection's loop (the
    ///   default). False for a closure with much to encode or decode (a whole batch's insert):
    ///   the loop also serves other connections (APNs' among them), which would wait behind it.
    func withTransaction<Result: Sendable>(
        logger: Logger, file: String = #file, line: Int = #line, onConnectionLoop: Bool = true,
        _ closure: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let pool = self.pool()
        // The closure is called from one of its own: postgres-nio's parameter is a caller-isolated
        // (nonsending) closure returning `sending`, which a `@Sendable` one cannot be passed as.
        return try await bounded(on: onConnectionLoop ? pool.executor : nil) {
            try await Self.counted(in: pool) {
                try await pool.client.withConnection { connection in
                    try await connection.withTransaction(logger: logger, file: file, line: line) { connection in
                        try await closure(connection)
                    }
                }
            }
        }
    }

    /// `body`, counted as a call under way on `pool` until it returns (a call cut off by its
    /// bound and never answered stays counted: its connection is still held).
    private static func counted<Result: Sendable>(
        in pool: LoopPool, _ body: () async throws -> Result
    ) async throws -> Result {
        pool.calls.wrappingAdd(1, ordering: .relaxed)
        defer { pool.calls.wrappingSubtract(1, ordering: .relaxed) }
        return try await body()
    }

    /// A logger that logs nothing, for a call given none.
    private static let silent = Logger(label: "herald.postgres.silent", factory: { _ in SwiftLogNoOpLogHandler() })

    /// `operation` bounded by ``limit``, its task run on `executor` (nil: the global executor).
    private func bounded<Result: Sendable>(
        on executor: EventLoopTaskExecutor?, _ operation: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let limit = self.limit
        do {
            return try await deadlines.run(
                limit: limit, on: executor,
                timeout: { StoreError.timedOut("PostgreSQL did not answer within \(Self.describe(limit)) (storage.postgres.call_timeout)") },
                operation)
        } catch {
            let failure = Self.unreachable(error) ?? error
            unanswered.count(failure)
            throw failure
        }
    }

    /// A failure that says the server could not be reached or went away during the call, as
    /// ``StoreError/unavailable(_:)``: the API answers it with 503 `store_unavailable` (try
    /// again) instead of an internal error. Nil for every other failure (a statement's own error,
    /// a quota refusal), which the caller sees as it was.
    static func unreachable(_ error: any Error) -> StoreError? {
        if let error = error as? PostgresTransactionError {
            // BEGIN or COMMIT lost with the connection, or the closure's query: the first cause.
            for cause in [error.beginError, error.closureError, error.commitError].compactMap({ $0 }) {
                if let mapped = unreachable(cause) { return mapped }
            }
            return nil
        }
        guard let error = error as? PSQLError else { return nil }
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown:
            return .unavailable("the connection to PostgreSQL failed (\(error.code))")
        case .server:
            // Class 08 (connection exception), the server shutting down or starting (57P01–57P03),
            // or out of connection slots (53300).
            guard let state = error.serverInfo?[.sqlState],
                state.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300"].contains(state)
            else { return nil }
            return .unavailable("PostgreSQL refused the call (SQLSTATE \(state))")
        default:
            return nil
        }
    }

    static func describe(_ duration: Duration) -> String {
        let milliseconds = Int((duration.secondsValue * 1000).rounded())
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }
}

extension PostgresConnection {
    /// ``execute(_:logger:file:line:)`` with its rows read: a statement prepared once on this
    /// connection.
    func rows<Statement: PostgresPreparedStatement>(
        _ statement: Statement, logger: Logger, file: String = #fileID, line: Int = #line
    ) async throws -> [Statement.Row] {
        var rows: [Statement.Row] = []
        for try await row in try await execute(statement, logger: logger, file: file, line: line) { rows.append(row) }
        return rows
    }
}
