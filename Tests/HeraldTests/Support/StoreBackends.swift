import Foundation
import GRDB
import HeraldCore
@testable import HeraldPostgres
@testable import HeraldStore
import Logging
import Testing

/// The store backends the contract suite runs against: the embedded SQLite file and PostgreSQL.
///
/// PostgreSQL needs a server: `eval "$(scripts/postgres.sh start)"` exports
/// `HERALD_TEST_POSTGRES_URL` (`.ci/run` always does). Without it a PostgreSQL case is cancelled
/// with a comment that says so (shown as a skip in the test output), except under CI (`CI` set),
/// where a missing URL is a failure.
enum StoreBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    static let postgresURLVariable = "HERALD_TEST_POSTGRES_URL"

    /// A fresh, empty store of this backend. PostgreSQL: a schema of its own in the test database,
    /// dropped by ``OpenedStore/close()``, and `poolSize` connections (the suite opens dozens of
    /// stores at once; a case that checks calls at once asks for more).
    func open(poolSize: Int = 2) async throws -> OpenedStore {
        switch self {
        case .sqlite:
            let store = try SQLitePushStore(directory: Fixtures.temporaryDirectory("herald-store"))
            return OpenedStore(store: store, close: {})
        case .postgres:
            let configuration = try Self.postgresConfiguration(schema: Self.freshSchema(), poolSize: poolSize)
            let store = try await PostgresPushStore.open(configuration, logger: Self.logger)
            return OpenedStore(store: store, postgres: store)
        }
    }

    /// The test server's configuration with `schema`; cancels the test case (or fails it in CI)
    /// when no server is configured.
    static func postgresConfiguration(schema: String?, poolSize: Int = 4) throws -> PostgresPushStore.Configuration {
        guard let url = ProcessInfo.processInfo.environment[postgresURLVariable], !url.isEmpty else {
            if ProcessInfo.processInfo.environment["CI"] != nil {
                Issue.record("\(postgresURLVariable) is not set under CI: .ci/run must start scripts/postgres.sh")
            }
            try Test.cancel(
                "PostgreSQL case skipped: \(postgresURLVariable) is not set (eval \"$(scripts/postgres.sh start)\")")
        }
        return try PostgresPushStore.Configuration(url: url, schema: schema, poolSize: poolSize)
    }

    static func freshSchema() -> String {
        "herald_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
    }

    static let logger: Logger = {
        var logger = Logger(label: "herald.test.postgres")
        logger.logLevel = .warning
        return logger
    }()
}

/// A store for one test, and how to dispose of it.
struct OpenedStore: Sendable {
    let store: any ServerStore
    private let closer: @Sendable () async -> Void

    init(store: any ServerStore, close: @escaping @Sendable () async -> Void) {
        self.store = store
        self.closer = close
    }

    init(store: any ServerStore, postgres: PostgresPushStore) {
        self.store = store
        self.closer = {
            try? await postgres.dropSchemaForTests()
            await postgres.close()
        }
    }

    func close() async { await closer() }
}

extension StoreBackend {
    /// Runs `body` with a fresh store of this backend and disposes of it afterwards, whether
    /// `body` threw or not.
    func withStore(poolSize: Int = 2, _ body: (any PushStore & JobReports) async throws -> Void) async throws {
        let opened = try await open(poolSize: poolSize)
        do {
            try await body(opened.store)
        } catch {
            await opened.close()
            throw error
        }
        await opened.close()
    }

    /// ``withStore(_:)`` with the whole of what `herald serve` needs of a store (outbox,
    /// retention, instance registry).
    func withServerStore(_ body: (any ServerStore) async throws -> Void) async throws {
        let opened = try await open()
        do {
            try await body(opened.store)
        } catch {
            await opened.close()
            throw error
        }
        await opened.close()
    }
}

/// What a backend stores of a job's payloads: its `job_payload` rows and the payload bytes its
/// items hold themselves (the store's own tables: how "stored once" is checked on both).
func storedPayloads(_ store: any PushStore, tenant: TenantID, job: JobID) async throws -> (rows: Int, itemBytes: Int) {
    if let sqlite = store as? SQLitePushStore {
        let rows = try await sqlite.pool.read { db in
            try Int.fetchOne(
                db, sql: "SELECT count(*) FROM job_payload WHERE tenant = ? AND job_id = ?",
                arguments: [tenant.rawValue, job.rawValue]) ?? -1
        }
        // v10: the chunk rows hold each item's fields and a payload id, nothing more.
        return (rows, try sqlite.chunkBytesBeyondFields(tenant: tenant, job: job))
    }
    guard let postgres = store as? PostgresPushStore else { throw StoreError.invalidArgument("an unknown store backend") }
    let rows = try await postgres.client.query(
        """
        SELECT (SELECT count(*) FROM job_payload WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)),
               (SELECT coalesce(sum(length(payload)), 0) FROM job_item
                WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue))::bigint
        """, logger: StoreBackend.logger
    ).collect()
    guard let row = rows.first else { throw StoreError.corrupt("no row") }
    let cells = row.makeRandomAccess()
    return (try cells[0].decode(Int.self), try cells[1].decode(Int.self))
}
