import Foundation
import GRDB
import HeraldCore

// The job reports the HTTP API shows (``JobReports``), read through the store's own pool: WAL
// mode lets these reads run beside the runner's writes without a second connection.
extension SQLitePushStore: JobReports {
    /// Counts a job's items by outcome: a scan of the covering index `job_item_outcomes`
    /// (migration v2) over the job's range, grouped in index order, never touching item rows.
    static let outcomesSQL = """
        SELECT state, status, reason, count(*) AS n FROM job_item
        WHERE tenant = ? AND job_id = ?
        GROUP BY state, status, reason
        ORDER BY state, status, reason
        """

    /// One page of a job's failed items in index order: a range of `job_item_by_state`
    /// (`tenant, job_id, state, idx`), then one row lookup per item of the page. Without the
    /// `INDEXED BY`, SQLite (no statistics) walks the primary key from `idx` and skips every row
    /// that did not fail: the whole job for a page near the end or with few failures.
    static let failedItemsSQL = """
        SELECT * FROM job_item INDEXED BY job_item_by_state
        WHERE tenant = ? AND job_id = ? AND state = 'failed' AND idx > ?
        ORDER BY idx LIMIT ?
        """

    public func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount] {
        try await pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: Self.outcomesSQL), arguments: [tenant.rawValue, job.rawValue]
            ).map { row in
                let raw: String = row["state"]
                guard let state = JobItemState(rawValue: raw) else {
                    throw StoreError.corrupt("job item with an unknown state")
                }
                return JobOutcomeCount(state: state, status: row["status"], reason: row["reason"], count: row["n"])
            }
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
