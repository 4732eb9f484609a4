import Foundation
import GRDB
import HeraldCore

// The job reports the HTTP API shows (``JobReports``), read through the store's own pool: WAL
// mode lets these reads run beside the runner's writes without a second connection.
extension SQLitePushStore: JobReports {
    /// One page of a job's failed items in index order: a range of the partial index
    /// `job_item_failed` (`tenant, job_id, idx` of failed items only, migration v9), then one
    /// row lookup per item of the page.
    static let failedItemsSQL = """
        SELECT * FROM job_item INDEXED BY job_item_failed
        WHERE tenant = ? AND job_id = ? AND state = 'failed' AND idx > ?
        ORDER BY idx LIMIT ?
        """

    /// The counts kept in `job_outcome` with the job's retrying and pending items
    /// (``SQLitePushStore/outcomeCounts(_:job:)``): constant time, not a count of the items.
    public func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount] {
        try await pool.read { db in
            guard let stored = try Self.fetchJob(db, tenant: tenant, id: job) else { return [] }
            return try Self.outcomeCounts(db, job: stored)
        }
    }

    public func failedItems(tenant: TenantID, job: JobID, afterIndex: Int, limit: Int) async throws -> [JobItem] {
        try await pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: Self.failedItemsSQL),
                arguments: [tenant.rawValue, job.rawValue, afterIndex, max(0, limit)]
            ).map(Self.failedItem)
        }
    }

    /// SQLite's plan for a statement (the `detail` column of `EXPLAIN QUERY PLAN`, one line per
    /// step), for tests that check which index a query uses.
    func queryPlan(_ sql: String, arguments: StatementArguments) throws -> [String] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] }
        }
    }

    /// The names of the indexes declared on `table` (not the primary key's), sorted.
    func indexNames(on table: String) throws -> [String] {
        try pool.read { db in
            try String.fetchAll(
                db,
                sql:
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL ORDER BY name",
                arguments: [table])
        }
    }

    /// A failed item's row (its notification without the payload, which the report does not show).
    private static func failedItem(_ row: Row) throws -> JobItem {
        let tokenHex: String = row["device_token"]
        let pushTypeRaw: String = row["push_type"]
        let apnsIDRaw: String = row["apns_id"]
        let resultID: String? = row["result_apns_id"]
        let timestamp: Int64? = row["apns_timestamp_ms"]
        let finished: Int64? = row["finished_at_ms"]
        guard let token = try? DeviceToken(hex: tokenHex), let id = try? NotificationID(apnsIDRaw) else {
            throw StoreError.corrupt("job item row with an invalid device token or apns-id")
        }
        let notification = HeraldCore.Notification(
            deviceToken: token, topic: row["topic"], pushType: PushType(rawValue: pushTypeRaw) ?? .alert,
            collapseID: row["collapse_id"], id: id, payload: [UInt8]())
        let result = JobItemResult(
            state: .failed, status: row["status"], reason: row["reason"], message: row["message"],
            apnsID: resultID.flatMap { try? NotificationID($0) }, apnsTimestamp: timestamp.map(Self.date),
            finishedAt: Self.date(finished ?? 0), attempts: row["attempts"])
        return JobItem(
            job: JobID(unchecked: row["job_id"]), index: row["idx"], notification: notification, state: .failed,
            result: result, attempts: row["attempts"], lastError: row["last_error"])
    }
}
