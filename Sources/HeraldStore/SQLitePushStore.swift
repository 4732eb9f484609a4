import Foundation
import GRDB
import HeraldCore
import Synchronization

/// The embedded ``PushStore``: one SQLite file (WAL mode) through GRDB.
///
/// ```swift
/// let store = try SQLitePushStore(directory: "data")        // data/herald.sqlite
/// try await store.recordInvalidToken(record, tenant: tenant)
/// ```
public final class SQLitePushStore: PushStore {
    /// The database file's path.
    public let path: String
    /// The one connection pool to the file (a writer and WAL readers); the report queries in
    /// `SQLitePushStore+Reports.swift` read through it too.
    let pool: DatabasePool
    /// Job item outcomes waiting for the next write transaction (`SQLitePushStore+Results.swift`).
    let resultQueue = Mutex(ResultQueue())

    /// The WAL's size limit after a checkpoint (`PRAGMA journal_size_limit`): 64 MiB.
    public static let journalSizeLimitBytes = 64 * 1024 * 1024

    /// The file name used inside a data directory.
    public static let defaultFileName = "herald.sqlite"

    /// Opens (creating if needed) `directory/herald.sqlite` and brings its schema up to date.
    public convenience init(directory: String = "data") throws {
        do {
            try Self.createPrivateDirectory(directory)
        } catch {
            throw StoreError.cannotOpen("cannot create the data directory \(directory): \(error.localizedDescription)")
        }
        try self.init(path: (directory as NSString).appendingPathComponent(Self.defaultFileName))
    }

    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    public convenience init(path: String) throws {
        try self.init(path: path, migratingUpTo: nil)
    }

    /// Opens the database at `path` and applies the migrations up to and including
    /// `lastMigration` (all of them when nil): tests use it to make a file of an older schema.
    init(path: String, migratingUpTo lastMigration: String?) throws {
        self.path = path
        try Self.createPrivateFile(path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.label = "herald.store"
        // WAL with synchronous=NORMAL: a commit is safe against a crash of the process (kill -9);
        // only a power loss or OS crash can lose the last commits. FULL would sync the WAL at
        // every commit, one per job item outcome.
        // journal_size_limit: after a checkpoint resets it, the WAL file is truncated to at most
        // this size instead of keeping the size of the largest transaction ever written.
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA journal_size_limit = \(Self.journalSizeLimitBytes)")
        }
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            if let lastMigration {
                try Self.migrator.migrate(pool, upTo: lastMigration)
            } else {
                try Self.migrator.migrate(pool)
            }
        } catch let error as DatabaseError {
            throw StoreError.cannotOpen("cannot open the store at \(path): \(error.message ?? error.description)")
        }
    }

    /// Creates `directory` (and missing parents) readable by its owner only (0700). An existing
    /// directory is left as it is.
    public static func createPrivateDirectory(_ directory: String) throws {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// Creates the database file empty with mode 0600 when it does not exist yet, so SQLite never
    /// creates it with the process's umask; SQLite gives its `-wal` and `-shm` files the same mode.
    static func createPrivateFile(_ path: String) throws {
        let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        if fd >= 0 {
            close(fd)
            return
        }
        let code = errno
        guard code == EEXIST else {
            throw StoreError.cannotOpen("cannot create the store at \(path): \(String(cString: strerror(code)))")
        }
    }

    /// The migrations applied to the file, in order.
    public func appliedMigrations() throws -> [String] {
        try pool.read { db in try Self.migrator.appliedMigrations(db) }
    }

    /// SQLite's journal mode for the file (`wal`).
    public func journalMode() throws -> String {
        try pool.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "" }
    }

    /// SQLite's synchronous setting on the store's writer connection (1: `NORMAL`).
    public func synchronousMode() async throws -> Int {
        try await pool.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    // MARK: Invalid device tokens

    public func recordInvalidToken(_ record: InvalidTokenRecord, tenant: TenantID) async throws {
        let arguments: StatementArguments = [
            tenant.rawValue, record.environment.rawValue, record.token.hex, record.topic, record.reason.wireValue,
            record.apnsTimestamp.map(Self.clampedMillis),
            try Self.millis(record.recordedAt, field: "recorded_at"),
            try record.registeredAt.map { try Self.millis($0, field: "registered_at") },
        ]
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO invalid_token
                        (tenant, environment, token, topic, reason, apns_timestamp_ms, recorded_at_ms, registered_at_ms)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (tenant, environment, token, topic) DO UPDATE SET
                        reason = excluded.reason,
                        apns_timestamp_ms = CASE
                            WHEN excluded.apns_timestamp_ms IS NULL THEN invalid_token.apns_timestamp_ms
                            WHEN invalid_token.apns_timestamp_ms IS NULL THEN excluded.apns_timestamp_ms
                            ELSE max(invalid_token.apns_timestamp_ms, excluded.apns_timestamp_ms) END,
                        recorded_at_ms = max(invalid_token.recorded_at_ms, excluded.recorded_at_ms),
                        registered_at_ms = coalesce(invalid_token.registered_at_ms, excluded.registered_at_ms)
                    """,
                arguments: arguments)
        }
    }

    /// The lookups in one read (one snapshot), each by the primary key.
    public func invalidTokens(tenant: TenantID, lookups: [InvalidTokenLookup]) async throws -> [InvalidTokenRecord?] {
        try await pool.read { db in
            let statement = try db.cachedStatement(
                sql: "SELECT * FROM invalid_token WHERE tenant = ? AND environment = ? AND token = ? AND topic = ?")
            return try lookups.map { lookup in
                try Row.readFirst(
                    statement, arguments: [tenant.rawValue, lookup.environment.rawValue, lookup.token.hex, lookup.topic],
                    Self.invalidTokenRecord)
            }
        }
    }

    public func invalidTokens(tenant: TenantID, limit: Int) async throws -> [InvalidTokenRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM invalid_token WHERE tenant = ? ORDER BY recorded_at_ms DESC, token, topic LIMIT ?",
                arguments: [tenant.rawValue, max(0, limit)]
            ).map(Self.invalidTokenRecord)
        }
    }

    @discardableResult
    public func registerToken(tenant: TenantID, token: DeviceToken, topic: String?, registeredAt: Date) async throws
        -> Int
    {
        let at = try Self.millis(registeredAt, field: "registered_at")
        return try await pool.write { db in
            if let topic {
                try db.execute(
                    sql: """
                        UPDATE invalid_token SET registered_at_ms = max(coalesce(registered_at_ms, 0), ?)
                        WHERE tenant = ? AND token = ? AND topic = ?
                        """,
                    arguments: [at, tenant.rawValue, token.hex, topic])
            } else {
                try db.execute(
                    sql: """
                        UPDATE invalid_token SET registered_at_ms = max(coalesce(registered_at_ms, 0), ?)
                        WHERE tenant = ? AND token = ?
                        """,
                    arguments: [at, tenant.rawValue, token.hex])
            }
            return db.changesCount
        }
    }

    @discardableResult
    public func removeInvalidToken(tenant: TenantID, token: DeviceToken, topic: String?) async throws -> Int {
        try await pool.write { db in
            if let topic {
                try db.execute(
                    sql: "DELETE FROM invalid_token WHERE tenant = ? AND token = ? AND topic = ?",
                    arguments: [tenant.rawValue, token.hex, topic])
            } else {
                try db.execute(
                    sql: "DELETE FROM invalid_token WHERE tenant = ? AND token = ?",
                    arguments: [tenant.rawValue, token.hex])
            }
            return db.changesCount
        }
    }

    // MARK: Jobs

    /// Stores the job as ``PushStore/createJob(tenant:id:environment:notifications:createdAt:limits:)``
    /// says: the job row with its integer key (`item_key`), its payloads once per run of equal
    /// ones (`job_payload`), its items as chunk rows (migration v10, `ItemChunks.swift`): a
    /// 100,000-token batch writes ~400 rows, not 100,000.
    public func createJob(
        tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
        createdAt: Date, limits: JobLimits?
    ) async throws -> JobCreation {
        let created = try Self.millis(createdAt, field: "created_at")
        guard notifications.count <= ItemChunks.maxItems else {
            throw StoreError.invalidArgument("a job holds at most \(ItemChunks.maxItems) items")
        }
        return try await pool.write { db in
            if let existing = try Self.fetchJob(db, tenant: tenant, id: id) {
                return .existing(existing)
            }
            if let limits { try Self.checkLimits(limits, db, tenant: tenant, adding: notifications.count) }
            // The next key (`job_by_item_key`): a deleted job's key is reused only once its rows are gone.
            let key = (try Int64.fetchOne(db, sql: "SELECT max(item_key) FROM job") ?? 0) + 1
            guard key < Int64(Int32.max) else { throw StoreError.corrupt("the store ran out of job keys") }
            try db.execute(
                sql: """
                    INSERT INTO job (tenant, id, state, environment, item_count, created_at_ms, updated_at_ms, item_key)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    tenant.rawValue, id.rawValue, JobState.accepted.rawValue, environment?.rawValue,
                    notifications.count, created, created, key,
                ])
            try Self.insertItems(db, tenant: tenant, job: id, key: key, notifications: notifications)
            guard let job = try Self.fetchJob(db, tenant: tenant, id: id) else {
                throw StoreError.corrupt("job \(id) vanished while it was being created")
            }
            return .created(job)
        }
    }

    /// Unfinished jobs (accepted or running) of the tenant and their items, from `job_by_state`.
    static func unfinishedUsage(_ db: Database, tenant: TenantID) throws -> (jobs: Int, items: Int) {
        let row = try Row.fetchOne(
            db,
            sql: """
                SELECT count(*) AS jobs, coalesce(sum(item_count), 0) AS items FROM job
                WHERE tenant = ? AND state IN ('accepted', 'running')
                """,
            arguments: [tenant.rawValue])
        return (row?["jobs"] ?? 0, row?["items"] ?? 0)
    }

    private static func checkLimits(_ limits: JobLimits, _ db: Database, tenant: TenantID, adding items: Int) throws {
        let usage = try unfinishedUsage(db, tenant: tenant)
        if usage.jobs >= limits.maxActiveJobs {
            throw StoreError.quotaExceeded(
                "the tenant has \(usage.jobs) unfinished jobs; jobs.max_active_jobs_per_tenant allows \(limits.maxActiveJobs). "
                    + "Wait for one to finish")
        }
        let (total, overflow) = usage.items.addingReportingOverflow(items)
        if overflow || total > limits.maxPendingItems {
            throw StoreError.quotaExceeded(
                "the tenant's unfinished jobs hold \(usage.items) items and this batch \(items); "
                    + "jobs.max_pending_items_per_tenant allows \(limits.maxPendingItems)")
        }
    }

    public func job(tenant: TenantID, id: JobID) async throws -> Job? {
        try await pool.read { db in try Self.fetchJob(db, tenant: tenant, id: id) }
    }

    public func jobs(tenant: TenantID, states: Set<JobState>?, limit: Int, after: JobListPosition?) async throws -> [Job] {
        try await pool.read { db in
            var sql = "SELECT * FROM job WHERE tenant = ?"
            var arguments: StatementArguments = [tenant.rawValue]
            if let states {
                guard !states.isEmpty else { return [] }
                sql += " AND state IN (" + Array(repeating: "?", count: states.count).joined(separator: ", ") + ")"
                for state in states.sorted(by: { $0.rawValue < $1.rawValue }) { arguments += [state.rawValue] }
            }
            if let after {
                // After it in the listing's order: older, or as old with a greater id.
                sql += " AND (created_at_ms < ? OR (created_at_ms = ? AND id > ?))"
                arguments += [after.createdAtMillis, after.createdAtMillis, after.id.rawValue]
            }
            sql += " ORDER BY created_at_ms DESC, id LIMIT ?"
            arguments += [max(0, limit)]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map { try Self.job(from: $0) }
        }
    }

    public func unfinishedJobs(perTenant: Int) async throws -> [Job] {
        guard perTenant > 0 else { return [] }
        return try await pool.read { db in
            // `job_by_updated` (state first) finds the unfinished jobs without reading the rest.
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT * FROM (
                            SELECT *, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY created_at_ms, id) AS place
                            FROM job WHERE state IN ('accepted', 'running'))
                        WHERE place <= ? ORDER BY created_at_ms, id
                        """),
                arguments: [perTenant]
            ).map { try Self.job(from: $0) }
        }
    }

    @discardableResult
    public func updateJob(tenant: TenantID, id: JobID, state: JobState, at: Date) async throws -> Bool {
        let at = try Self.millis(at, field: "updated_at")
        return try await pool.write { db in
            // A final state is kept: a cancel and the runner's finish race, and the first wins.
            try db.execute(
                sql: "UPDATE job SET state = ?, updated_at_ms = ? WHERE tenant = ? AND id = ? AND state IN ('accepted', 'running')",
                arguments: [state.rawValue, at, tenant.rawValue, id.rawValue])
            return db.changesCount > 0
        }
    }

    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date
    ) async throws -> [JobItem] {
        try await claimPendingItems(
            tenant: tenant, job: job, limit: limit, claimant: claimant, now: now, leaseUntil: leaseUntil, fromIndex: 0)
    }

    /// A write transaction as GRDB's `write` makes one (`BEGIN IMMEDIATE`, the updates,
    /// `COMMIT`; on any error a rollback and the first error thrown), with `BEGIN` and `COMMIT`
    /// as cached statements: `write` prepares both from their SQL text each time, ~5% of the
    /// writer's CPU in a batch, which makes a claim and a commit group every few milliseconds.
    /// The job runner's two transactions use it.
    func writeTransaction<T: Sendable>(_ updates: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await pool.writeWithoutTransaction { db in
            try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
            do {
                let result = try updates(db)
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
                return result
            } catch {
                // GRDB's rollback does nothing when SQLite already ended the transaction.
                try? db.rollback()
                throw error
            }
        }
    }

    /// Pending items are searched from the hint only (`StoreContractTests` checks it).
    public var claimsFromIndexStrictly: Bool { true }

    /// Claims as ``PushStore`` says: due retries from the partial index `job_item_due`, then the
    /// pending items from the chunks' settled bits (`job_settled`) from `fromIndex`; one lease
    /// row per claimant and job (`job_claim`) holds them.
    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date, fromIndex: Int
    ) async throws -> [JobItem] {
        guard limit > 0 else { return [] }
        let nowMillis = try Self.millis(now, field: "now")
        let until = try Self.millis(leaseUntil, field: "lease_until")
        let limit = min(limit, ItemChunks.maxItems)
        return try await writeTransaction { db in
            // A finished or cancelled job's items are not claimed (a cancel stops the claims of
            // every runner, whether or not it heard of the cancel).
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job), !ref.isFinal else { return [] }
            return try Self.claim(
                db, job: ref, limit: limit, claimant: claimant, now: nowMillis, until: until, fromIndex: fromIndex)
        }
    }

    public func markOnWire(tenant: TenantID, job: JobID, indexes: [Int], claimant: String, at: Date) async throws
        -> Set<Int>
    {
        guard !indexes.isEmpty else { return [] }
        let atMillis = try Self.millis(at, field: "at")
        let wanted = Set(indexes)
        return try await pool.write { db in
            // A cancelled job's items claimed before the cancel are not sent: none is leased now.
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job), !ref.isFinal else { return [] }
            return try Self.markOnWire(db, job: ref, indexes: wanted, claimant: claimant, at: atMillis)
        }
    }

    public func leasedItems(tenant: TenantID, job: JobID, indexes: [Int], claimant: String) async throws -> Set<Int> {
        guard !indexes.isEmpty else { return [] }
        let wanted = Set(indexes)
        return try await pool.read { db in
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job), !ref.isFinal else { return [] }
            var settled = SettledBits(key: ref.key)
            var leased = Set<Int>()
            for index in try Self.heldIndexes(db, job: ref, among: wanted, claimant: claimant) {
                // A settled item without an outcome is `retrying`; the others have one.
                if try !settled.isSet(db, index) || Self.itemRow(db, key: ref.key, index: index)?.state == .retrying {
                    leased.insert(index)
                }
            }
            return leased
        }
    }

    public func nextAttempt(tenant: TenantID, job: JobID) async throws -> Date? {
        try await pool.read { db in
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job) else { return nil }
            return try Int64.fetchOne(
                db,
                sql: """
                    SELECT min(next_attempt_ms) FROM job_item INDEXED BY job_item_due
                    WHERE job_key = ? AND state = 'retrying'
                    """,
                arguments: [ref.key]
            ).map(Self.date)
        }
    }

    @discardableResult
    public func releaseLeases(tenant: TenantID, job: JobID, claimantBase: String, keeping: String) async throws -> Int {
        let prefix = Array((claimantBase + "/").utf8)
        return try await pool.write { db in
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job) else { return 0 }
            var settled = SettledBits(key: ref.key)
            var released = 0
            for claim in try Self.claimRows(db, key: ref.key)
            where claim.claimant != keeping
                && (claim.claimant == claimantBase || claim.claimant.utf8.starts(with: prefix))
            {
                released += try Self.liveEntries(db, key: ref.key, claim.entries, settled: &settled).count
                try db.cachedStatement(sql: "DELETE FROM job_claim WHERE job_key = ? AND claimant = ?").execute(
                    arguments: [ref.key, claim.claimant])
            }
            return released
        }
    }

    public func items(tenant: TenantID, job: JobID, fromIndex: Int, limit: Int) async throws -> [JobItem] {
        try await pool.read { db in
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job) else { return [] }
            return try Self.readItems(db, job: ref, fromIndex: fromIndex, limit: limit)
        }
    }

    public func progress(tenant: TenantID, job: JobID) async throws -> JobProgress? {
        try await pool.read { db in
            guard let stored = try Self.fetchJob(db, tenant: tenant, id: job) else { return nil }
            var progress = JobProgress(pending: 0, sent: 0, failed: 0)
            for count in try Self.outcomeCounts(db, job: stored) {
                try progress.add(state: count.state.rawValue, count: count.count)
            }
            return progress
        }
    }

    // MARK: Rows

    /// The date as milliseconds since 1970, the store's time unit.
    /// - Throws: ``StoreError/invalidArgument(_:)`` naming `field` for a date out of the range
    ///   the store keeps (years 0001 to 9999), NaN or infinite: never a trap, whatever the caller sent.
    static func millis(_ date: Date, field: String) throws(StoreError) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard value.isFinite, (minMillis...maxMillis).contains(value), let millis = Int64(exactly: value) else {
            throw StoreError.invalidArgument("\(field) is out of range (years 0001 to 9999)")
        }
        return millis
    }

    /// The date as milliseconds since 1970, clamped to the range the store keeps: for dates from
    /// APNs (a timestamp), whose outcome must be recorded whatever APNs sent.
    static func clampedMillis(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard !value.isNaN else { return 0 }
        return Int64(exactly: min(max(value, minMillis), maxMillis)) ?? 0
    }

    /// 0001-01-01 and 9999-12-31 in milliseconds since 1970.
    static let minMillis: Double = -62_135_596_800_000
    static let maxMillis: Double = 253_402_300_799_000

    static func date(_ millis: Int64) -> Date {
        Date(timeIntervalSince1970: Double(millis) / 1000)
    }

    static func fetchJob(_ db: Database, tenant: TenantID, id: JobID) throws -> Job? {
        try Row.readFirst(
            db.cachedStatement(sql: "SELECT * FROM job WHERE tenant = ? AND id = ?"), arguments: [tenant.rawValue, id.rawValue],
            job(from:))
    }

    static func job(from row: Row) throws -> Job {
        let tenantRaw: String = row["tenant"]
        let stateRaw: String = row["state"]
        let environmentRaw: String? = row["environment"]
        guard let tenant = try? TenantID(tenantRaw), let state = JobState(rawValue: stateRaw) else {
            throw StoreError.corrupt("job row with an invalid tenant or state")
        }
        return Job(
            id: JobID(unchecked: row["id"]), tenant: tenant, state: state,
            environment: environmentRaw.flatMap(APNsEnvironment.init(rawValue:)), itemCount: row["item_count"],
            createdAt: date(row["created_at_ms"]), updatedAt: date(row["updated_at_ms"]))
    }

    /// A job's item counts by (state, status, reason), as ``JobReports/outcomes(tenant:job:)``
    /// answers: outcomes from `job_outcome` (migration v9), the `retrying` items from the
    /// partial index `job_item_due`, and the rest of the job's items pending. A few row reads,
    /// whatever the job's size.
    static func outcomeCounts(_ db: Database, job: Job) throws -> [JobOutcomeCount] {
        let outcomes = try Row.fetchAll(
            db.cachedStatement(sql: outcomeCountsSQL),
            arguments: [job.tenant.rawValue, job.id.rawValue]
        ).map { row -> JobOutcomeCount in
            let raw: String = row[0]
            guard let state = JobItemState(rawValue: raw) else {
                throw StoreError.corrupt("job outcome count with an unknown state")
            }
            return JobOutcomeCount(state: state, status: row[1], reason: row[2], count: row[3])
        }
        guard let ref = try jobRef(db, tenant: job.tenant, id: job.id) else { return [] }
        let retrying = try Int.fetchOne(db.cachedStatement(sql: retryingCountSQL), arguments: [ref.key]) ?? 0
        return try JobOutcomeCount.assemble(outcomes: outcomes, retrying: retrying, itemCount: job.itemCount, job: job.id)
    }

    /// A job's outcome counts: a range of `job_outcome_by_job`.
    static let outcomeCountsSQL = "SELECT state, status, reason, n FROM job_outcome WHERE tenant = ? AND job_id = ? AND n > 0"

    /// A job's `retrying` items: a count over the partial index `job_item_due` (only the items
    /// waiting for a retry are in it).
    static let retryingCountSQL = """
        SELECT count(*) FROM job_item INDEXED BY job_item_due WHERE job_key = ? AND state = 'retrying'
        """

    private static func invalidTokenRecord(_ row: Row) throws -> InvalidTokenRecord {
        let environmentRaw: String = row["environment"]
        let tokenHex: String = row["token"]
        let reason: String = row["reason"]
        let apnsTimestamp: Int64? = row["apns_timestamp_ms"]
        let registered: Int64? = row["registered_at_ms"]
        guard let environment = APNsEnvironment(rawValue: environmentRaw), let token = try? DeviceToken(hex: tokenHex)
        else {
            throw StoreError.corrupt("invalid-token row with an invalid environment or token")
        }
        return InvalidTokenRecord(
            token: token, topic: row["topic"], environment: environment, reason: APNsReason(wireValue: reason),
            apnsTimestamp: apnsTimestamp.map(date), recordedAt: date(row["recorded_at_ms"]),
            registeredAt: registered.map(date))
    }
}

/// The shared payloads (`job_payload`) of one job read while one statement's items are built:
/// each is read once and its bytes shared by every item that refers to it. The payload asked for
/// last is kept at hand: a chunk's items that share a payload are stored in a run.
struct PayloadCache {
    let tenant: String
    let job: String
    private var payloads: [Int64: [UInt8]] = [:]
    private var last: (id: Int64, payload: [UInt8])? = nil

    init(tenant: TenantID, job: JobID) {
        self.tenant = tenant.rawValue
        self.job = job.rawValue
    }

    mutating func payload(_ db: Database, id: Int64) throws -> [UInt8] {
        if let last, last.id == id { return last.payload }
        let payload: [UInt8]
        if let known = payloads[id] {
            payload = known
        } else {
            guard
                let data = try Data.fetchOne(
                    db.cachedStatement(sql: "SELECT payload FROM job_payload WHERE tenant = ? AND job_id = ? AND id = ?"),
                    arguments: [tenant, job, id])
            else { throw StoreError.corrupt("job item refers to a payload that is not stored") }
            payload = [UInt8](data)
            payloads[id] = payload
        }
        last = (id, payload)
        return payload
    }
}
