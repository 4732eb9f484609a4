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

    public func invalidToken(tenant: TenantID, token: DeviceToken, topic: String, environment: APNsEnvironment)
        async throws -> InvalidTokenRecord?
    {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT * FROM invalid_token WHERE tenant = ? AND environment = ? AND token = ? AND topic = ?",
                arguments: [tenant.rawValue, environment.rawValue, token.hex, topic]
            ).map(Self.invalidTokenRecord)
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
    /// says. A payload is stored once per run of equal payloads (`job_payload`, migration v3):
    /// a template batch of 100,000 tokens stores its payload once, not 100,000 times.
    public func createJob(
        tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
        createdAt: Date, limits: JobLimits?
    ) async throws -> JobCreation {
        let created = try Self.millis(createdAt, field: "created_at")
        return try await pool.write { db in
            if let existing = try Self.fetchJob(db, tenant: tenant, id: id) {
                return .existing(existing)
            }
            if let limits { try Self.checkLimits(limits, db, tenant: tenant, adding: notifications.count) }
            try db.execute(
                sql: """
                    INSERT INTO job (tenant, id, state, environment, item_count, created_at_ms, updated_at_ms)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    tenant.rawValue, id.rawValue, JobState.accepted.rawValue, environment?.rawValue,
                    notifications.count, created, created,
                ])
            try Self.insertItems(db, tenant: tenant, job: id, notifications: notifications)
            guard let job = try Self.fetchJob(db, tenant: tenant, id: id) else {
                throw StoreError.corrupt("job \(id) vanished while it was being created")
            }
            return .created(job)
        }
    }

    /// Rows per `INSERT` of job items: 9 binds each (the tenant and job are bound once a
    /// statement), well under SQLite's 32,766 host parameters.
    static let itemsPerInsert = 128

    /// A job's items, in the caller's write transaction: multi-row `INSERT`s of
    /// ``itemsPerInsert`` rows from one prepared statement (one more for the remainder), so
    /// SQLite runs one statement per 128 items instead of one per item. A payload equal to the
    /// previous item's is stored once (`job_payload`, referenced by `payload_ref`).
    static func insertItems(
        _ db: Database, tenant: TenantID, job: JobID, notifications: [HeraldCore.Notification]
    ) throws {
        let payloadStatement = try db.makeStatement(
            sql: "INSERT INTO job_payload (tenant, job_id, id, payload) VALUES (?, ?, ?, ?)")
        func statement(rows: Int) throws -> Statement {
            // ?1 and ?2 are the tenant and job; a bare ? takes the number after the largest so far.
            let row = "(?1, ?2, ?, ?, ?, ?, ?, ?, ?, ?, X'', ?, 'pending')"
            return try db.makeStatement(
                sql: """
                    INSERT INTO job_item (tenant, job_id, idx, device_token, topic, push_type, priority, expiration,
                                          collapse_id, apns_id, payload, payload_ref, state)
                    VALUES \(Array(repeating: row, count: rows).joined(separator: ", "))
                    """)
        }
        var full: Statement? = nil
        var values: [DatabaseValue] = []
        values.reserveCapacity(2 + 9 * itemsPerInsert)
        var payloadCount = 0
        var lastPayload: [UInt8]? = nil
        var ids = NotificationIDGenerator()
        var start = 0
        while start < notifications.count {
            let end = min(start + itemsPerInsert, notifications.count)
            values.removeAll(keepingCapacity: true)
            values.append(tenant.rawValue.databaseValue)
            values.append(job.rawValue.databaseValue)
            for index in start..<end {
                let notification = notifications[index]
                // Equal to the previous one: a shared array compares by identity at once.
                if lastPayload != notification.payload {
                    payloadCount += 1
                    try payloadStatement.execute(arguments: [
                        tenant.rawValue, job.rawValue, payloadCount, Data(notification.payload),
                    ])
                    lastPayload = notification.payload
                }
                let expiration: Int64? = notification.expiration.map {
                    switch $0 {
                    case .immediately: return 0
                    case .at(let seconds): return Int64(seconds)
                    }
                }
                values.append(index.databaseValue)
                values.append(notification.deviceToken.hex.databaseValue)
                values.append(notification.topic.databaseValue)
                values.append(notification.pushType.rawValue.databaseValue)
                values.append(notification.priority.map { Int($0.rawValue) }.databaseValue)
                values.append(expiration.databaseValue)
                values.append(notification.collapseID.databaseValue)
                values.append((notification.id ?? ids.nextID()).rawValue.databaseValue)
                values.append(payloadCount.databaseValue)
            }
            let rows = end - start
            let insert = try rows == itemsPerInsert ? (full ?? statement(rows: rows)) : statement(rows: rows)
            if rows == itemsPerInsert { full = insert }
            try insert.execute(arguments: StatementArguments(values))
            start = end
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

    public func jobs(tenant: TenantID, states: Set<JobState>?, limit: Int) async throws -> [Job] {
        try await pool.read { db in
            var sql = "SELECT * FROM job WHERE tenant = ?"
            var arguments: StatementArguments = [tenant.rawValue]
            if let states {
                guard !states.isEmpty else { return [] }
                sql += " AND state IN (" + Array(repeating: "?", count: states.count).joined(separator: ", ") + ")"
                for state in states.sorted(by: { $0.rawValue < $1.rawValue }) { arguments += [state.rawValue] }
            }
            sql += " ORDER BY created_at_ms DESC, id LIMIT ?"
            arguments += [max(0, limit)]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map { try Self.job(from: $0) }
        }
    }

    @discardableResult
    public func updateJob(tenant: TenantID, id: JobID, state: JobState, at: Date) async throws -> Bool {
        let at = try Self.millis(at, field: "updated_at")
        return try await pool.write { db in
            try db.execute(
                sql: "UPDATE job SET state = ?, updated_at_ms = ? WHERE tenant = ? AND id = ?",
                arguments: [state.rawValue, at, tenant.rawValue, id.rawValue])
            return db.changesCount > 0
        }
    }

    /// The lowest-index pending items a claimant may take: a range of the partial index
    /// `job_item_pending` (`tenant, job_id, idx` of pending items only, migration v9) in `idx`
    /// order. Without the `INDEXED BY`, SQLite (no statistics) walks the primary key from the
    /// job's first item and skips every finished one: near the end of a 100,000-item job that
    /// is about 30 ms per claim instead of about 1 ms, inside the store's one write transaction.
    static let claimSQL = """
        SELECT idx FROM job_item INDEXED BY job_item_pending
        WHERE tenant = ? AND job_id = ? AND state = 'pending' AND idx >= ?
          AND (claimant = ? OR claimant IS NULL OR lease_until_ms IS NULL OR lease_until_ms <= ?)
        ORDER BY idx
        LIMIT ?
        """

    /// The due `retrying` items a claimant may take, earliest first: a range of the partial
    /// index `job_item_due` (`tenant, job_id, next_attempt_ms` of `retrying` items only).
    static let claimDueSQL = """
        SELECT idx FROM job_item INDEXED BY job_item_due
        WHERE tenant = ? AND job_id = ? AND state = 'retrying' AND next_attempt_ms <= ?
          AND (claimant = ? OR claimant IS NULL OR lease_until_ms IS NULL OR lease_until_ms <= ?)
        ORDER BY next_attempt_ms
        LIMIT ?
        """

    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date
    ) async throws -> [JobItem] {
        try await claimPendingItems(
            tenant: tenant, job: job, limit: limit, claimant: claimant, now: now, leaseUntil: leaseUntil, fromIndex: 0)
    }

    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date, fromIndex: Int
    ) async throws -> [JobItem] {
        guard limit > 0 else { return [] }
        let nowMillis = try Self.millis(now, field: "now")
        let until = try Self.millis(leaseUntil, field: "lease_until")
        return try await pool.write { db in
            var rows = try Row.fetchAll(
                db.cachedStatement(sql: Self.claimDueSQL),
                arguments: [tenant.rawValue, job.rawValue, nowMillis, claimant, nowMillis, limit])
            if rows.count < limit {
                rows += try Row.fetchAll(
                    db.cachedStatement(sql: Self.claimSQL),
                    arguments: [tenant.rawValue, job.rawValue, max(0, fromIndex), claimant, nowMillis, limit - rows.count])
            }
            let indexes: [Int] = rows.map { $0[0] }
            guard !indexes.isEmpty else { return [] }
            // One cached statement leases and reads them: the indexes as one JSON array bind
            // (integers only), the rows read in place from the statement (not copied).
            let list = "[" + indexes.map(String.init).joined(separator: ",") + "]"
            var payloads = PayloadCache()
            var claimed: [JobItem] = []
            claimed.reserveCapacity(indexes.count)
            let cursor = try Row.fetchCursor(
                db.cachedStatement(sql: Self.leaseSQL), arguments: [claimant, until, tenant.rawValue, job.rawValue, list])
            while let row = try cursor.next() {
                claimed.append(try Self.jobItem(from: row, db, payloads: &payloads))
            }
            // Due retries first, in the order they were claimed; then pending items in index order.
            let order = Dictionary(uniqueKeysWithValues: indexes.enumerated().map { ($1, $0) })
            return claimed.sorted { (order[$0.index] ?? 0) < (order[$1.index] ?? 0) }
        }
    }

    /// Leases the claimed items (a JSON array of their indexes) and reads them back.
    static let leaseSQL = """
        UPDATE job_item SET claimant = ?, lease_until_ms = ?
        WHERE tenant = ? AND job_id = ? AND idx IN (SELECT value FROM json_each(?))
        RETURNING \(jobItemColumns)
        """

    public func markOnWire(tenant: TenantID, job: JobID, indexes: [Int], claimant: String, at: Date) async throws
        -> Set<Int>
    {
        guard !indexes.isEmpty else { return [] }
        let atMillis = try Self.millis(at, field: "at")
        // One cached statement whatever the count: the indexes travel as one JSON array bind
        // (integers only, built from Swift `Int`s), and RETURNING names the rows it marked.
        let list = "[" + Set(indexes).map(String.init).joined(separator: ",") + "]"
        return try await pool.write { db in
            try Int.fetchSet(
                db.cachedStatement(sql: Self.markOnWireSQL),
                arguments: [atMillis, tenant.rawValue, job.rawValue, list, claimant])
        }
    }

    static let markOnWireSQL = """
        UPDATE job_item SET wire_at_ms = ?
        WHERE tenant = ? AND job_id = ? AND idx IN (SELECT value FROM json_each(?))
          AND state IN ('pending', 'retrying') AND claimant = ?
        RETURNING idx
        """

    public func nextAttempt(tenant: TenantID, job: JobID) async throws -> Date? {
        try await pool.read { db in
            try Int64.fetchOne(
                db,
                sql: """
                    SELECT min(next_attempt_ms) FROM job_item INDEXED BY job_item_due
                    WHERE tenant = ? AND job_id = ? AND state = 'retrying'
                    """,
                arguments: [tenant.rawValue, job.rawValue]
            ).map(Self.date)
        }
    }

    @discardableResult
    public func releaseLeases(tenant: TenantID, job: JobID, claimantBase: String, keeping: String) async throws -> Int {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE job_item INDEXED BY job_item_pending SET claimant = NULL, lease_until_ms = NULL
                    WHERE tenant = ? AND job_id = ? AND state = 'pending' AND claimant IS NOT NULL AND claimant != ?
                      AND (claimant = ? OR substr(claimant, 1, ?) = ?)
                    """,
                arguments: [
                    tenant.rawValue, job.rawValue, keeping, claimantBase, claimantBase.unicodeScalars.count + 1, claimantBase + "/",
                ])
            var released = db.changesCount
            // Retries that were on the wire when that process ended.
            try db.execute(
                sql: """
                    UPDATE job_item INDEXED BY job_item_due SET claimant = NULL, lease_until_ms = NULL
                    WHERE tenant = ? AND job_id = ? AND state = 'retrying' AND claimant IS NOT NULL AND claimant != ?
                      AND (claimant = ? OR substr(claimant, 1, ?) = ?)
                    """,
                arguments: [
                    tenant.rawValue, job.rawValue, keeping, claimantBase, claimantBase.unicodeScalars.count + 1, claimantBase + "/",
                ])
            released += db.changesCount
            return released
        }
    }

    public func items(tenant: TenantID, job: JobID, fromIndex: Int, limit: Int) async throws -> [JobItem] {
        try await pool.read { db in
            var payloads = PayloadCache()
            return try Row.fetchAll(
                db,
                sql:
                    "SELECT \(Self.jobItemColumns) FROM job_item WHERE tenant = ? AND job_id = ? AND idx >= ? ORDER BY idx LIMIT ?",
                arguments: [tenant.rawValue, job.rawValue, fromIndex, max(0, limit)]
            ).map { try Self.jobItem(from: $0, db, payloads: &payloads) }
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
        try Row.fetchOne(
            db, sql: "SELECT * FROM job WHERE tenant = ? AND id = ?", arguments: [tenant.rawValue, id.rawValue]
        )
        .map { try job(from: $0) }
    }

    private static func job(from row: Row) throws -> Job {
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

    /// The `job_item` columns in the order ``jobItem(from:_:payloads:)`` reads them, by position
    /// (reading by name costs a case-insensitive lookup per column, on the job runner's hot
    /// path). Column 9 is the shared payload's id (`payload_ref`), column 25 the item's own
    /// payload (items stored before v3; empty since).
    static let jobItemColumns = """
        job_id, idx, device_token, topic, push_type, priority, expiration, collapse_id, apns_id, payload_ref, \
        state, status, reason, message, result_apns_id, apns_timestamp_ms, finished_at_ms, claimant, lease_until_ms, \
        attempts, first_attempt_ms, next_attempt_ms, last_error, wire_at_ms, tenant, payload
        """

    /// A job item from a row of ``jobItemColumns``; its payload, when shared (`payload_ref`),
    /// read once per call through `payloads` and shared by every item that refers to it (one
    /// copy for a chunk of a template batch, not one per item).
    static func jobItem(from row: Row, _ db: Database, payloads: inout PayloadCache) throws -> JobItem {
        let stateRaw: String = row[10]
        let pushTypeRaw: String = row[4]
        guard let state = JobItemState(rawValue: stateRaw), let pushType = PushType(rawValue: pushTypeRaw) else {
            throw StoreError.corrupt("job item row with an invalid state or push type")
        }
        let tokenHex: String = row[2]
        let apnsIDRaw: String = row[8]
        let priorityRaw: Int? = row[5]
        let expirationRaw: Int64? = row[6]
        let payloadRef: Int64? = row[9]
        let payload: [UInt8]
        if let payloadRef {
            payload = try payloads.payload(db, tenant: row[24], job: row[0], id: payloadRef)
        } else {
            let own: Data = row[25]
            payload = [UInt8](own)
        }
        let notification: HeraldCore.Notification
        do {
            notification = HeraldCore.Notification(
                deviceToken: try DeviceToken(hex: tokenHex), topic: row[3], pushType: pushType,
                priority: priorityRaw.flatMap(Priority.init(rawValue:)),
                expiration: expirationRaw.map { $0 == 0 ? .immediately : .at(UInt32(clamping: $0)) },
                collapseID: row[7], id: try NotificationID(apnsIDRaw), payload: payload)
        } catch {
            throw StoreError.corrupt("job item row with an invalid device token or apns-id")
        }
        let attempts: Int = row[19]
        let firstAttempt: Int64? = row[20]
        let nextAttempt: Int64? = row[21]
        var result: JobItemResult? = nil
        if state.isFinal {
            let resultID: String? = row[14]
            let timestamp: Int64? = row[15]
            let finished: Int64? = row[16]
            result = JobItemResult(
                state: state, status: row[11], reason: row[12], message: row[13],
                apnsID: resultID.flatMap { try? NotificationID($0) }, apnsTimestamp: timestamp.map(date),
                finishedAt: date(finished ?? 0), attempts: attempts)
        }
        let lease: Int64? = row[18]
        let wire: Int64? = row[23]
        return JobItem(
            job: JobID(unchecked: row[0]), index: row[1], notification: notification, state: state,
            result: result, claimant: row[17], leaseUntil: lease.map(date), attempts: attempts,
            firstAttemptAt: firstAttempt.map(date), nextAttemptAt: nextAttempt.map(date), lastError: row[22],
            onWireAt: wire.map(date))
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
        let retrying =
            try Int.fetchOne(
                db.cachedStatement(sql: retryingCountSQL), arguments: [job.tenant.rawValue, job.id.rawValue]) ?? 0
        return try JobOutcomeCount.assemble(outcomes: outcomes, retrying: retrying, itemCount: job.itemCount, job: job.id)
    }

    /// A job's outcome counts: a range of `job_outcome_by_job`.
    static let outcomeCountsSQL = "SELECT state, status, reason, n FROM job_outcome WHERE tenant = ? AND job_id = ? AND n > 0"

    /// A job's `retrying` items: a count over the partial index `job_item_due` (only the items
    /// waiting for a retry are in it).
    static let retryingCountSQL = """
        SELECT count(*) FROM job_item INDEXED BY job_item_due WHERE tenant = ? AND job_id = ? AND state = 'retrying'
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

/// One tenant's invalid tokens, as the feedback plugin sees them.
public struct TenantInvalidTokens: InvalidTokenRecorder {
    public let tenant: TenantID
    private let store: any PushStore

    public init(tenant: TenantID, store: any PushStore) {
        self.tenant = tenant
        self.store = store
    }

    public func record(_ record: InvalidTokenRecord) async throws {
        try await store.recordInvalidToken(record, tenant: tenant)
    }

    public func invalidToken(_ token: DeviceToken, topic: String, environment: APNsEnvironment) async throws
        -> InvalidTokenRecord?
    {
        try await store.invalidToken(tenant: tenant, token: token, topic: topic, environment: environment)
    }
}

/// The shared payloads (`job_payload`) read while one statement's items are built: each is read
/// once and its bytes shared by every item that refers to it.
struct PayloadCache {
    private struct Key: Hashable {
        var tenant: String
        var job: String
        var id: Int64
    }

    private var payloads: [Key: [UInt8]] = [:]

    mutating func payload(_ db: Database, tenant: String, job: String, id: Int64) throws -> [UInt8] {
        let key = Key(tenant: tenant, job: job, id: id)
        if let payload = payloads[key] { return payload }
        guard
            let data = try Data.fetchOne(
                db.cachedStatement(sql: "SELECT payload FROM job_payload WHERE tenant = ? AND job_id = ? AND id = ?"),
                arguments: [tenant, job, id])
        else { throw StoreError.corrupt("job item refers to a payload that is not stored") }
        let payload = [UInt8](data)
        payloads[key] = payload
        return payload
    }
}
