import Foundation
import GRDB
import HeraldCore

// The job reports the HTTP API shows (``JobReports``), read through the store's own pool: WAL
// mode lets these reads run beside the runner's writes without a second connection.
extension SQLitePushStore: JobReports {
    public func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount] {
        // `idx >= 0` makes SQLite read the job's rows in primary-key order (one sequential range)
        // instead of through the state index with a lookup per row: about twice as fast.
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT state, status, reason, count(*) AS n FROM job_item
                    WHERE tenant = ? AND job_id = ? AND idx >= 0
                    GROUP BY state, status, reason
                    ORDER BY state, status, reason
                    """,
                arguments: [tenant.rawValue, job.rawValue]
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
                db,
                sql: """
                    SELECT * FROM job_item
                    WHERE tenant = ? AND job_id = ? AND state = 'failed' AND idx > ?
                    ORDER BY idx LIMIT ?
                    """,
                arguments: [tenant.rawValue, job.rawValue, afterIndex, max(0, limit)]
            ).map(Self.failedItem)
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
            finishedAt: Self.date(finished ?? 0))
        return JobItem(
            job: JobID(unchecked: row["job_id"]), index: row["idx"], notification: notification, state: .failed,
            result: result)
    }
}
