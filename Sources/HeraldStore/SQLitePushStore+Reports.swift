import Foundation
import GRDB
import HeraldCore

// The job reports the HTTP API shows (``JobReports``), read through the store's own pool: WAL
// mode lets these reads run beside the runner's writes without a second connection.
extension SQLitePushStore: JobReports {
    /// One page of a job's failed items in index order: a range of the partial index
    /// `job_item_failed` (`job_key, idx` of failed items only), then their notifications from
    /// the chunks that hold them.
    static let failedItemsSQL = """
        SELECT \(itemRowColumns) FROM job_item INDEXED BY job_item_failed
        WHERE job_key = ? AND state = 'failed' AND idx > ?
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
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job) else { return [] }
            let rows = try Row.fetchAll(
                db.cachedStatement(sql: Self.failedItemsSQL), arguments: [ref.key, max(-1, afterIndex), max(0, limit)]
            ).map { try Self.itemRow($0) }
            // The report shows the notification without its payload. Asked for last first: each
            // is taken off the end (moved, not copied), in the rows' order.
            var notes = try Self.notifications(db, job: ref, indexes: rows.reversed().map { $0.0 }, payloads: false)
            return try rows.map { index, row in
                guard let notification = notes.popLast() else { throw StoreError.corrupt("job \(job) lacks item \(index)") }
                return Self.item(job: job, index: index, notification: notification, row: row, sent: nil, lease: nil)
            }
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
}

extension SQLitePushStore {
    /// The bytes of the job's chunk rows beyond what their notifications' fields take (each
    /// chunk decoded and encoded again): a payload copied into the items would show here. For
    /// tests of "a payload is stored once".
    func chunkBytesBeyondFields(tenant: TenantID, job: JobID) throws -> Int {
        try pool.read { db in
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job) else { return 0 }
            let ids = ItemChunks.rowIDs(key: ref.key)
            var extra = 0
            for row in try Row.fetchAll(
                db, sql: "SELECT count, items FROM job_chunk WHERE id BETWEEN ? AND ? ORDER BY id",
                arguments: [ids.lowerBound, ids.upperBound])
            {
                let count: Int = row[0]
                let blob: Data = row[1]
                let items = try ItemChunks.decode(blob, count: count)
                guard items.count == count else { throw StoreError.corrupt("a chunk with fewer items than its count") }
                var encoder = ItemChunks.Encoder()
                for (_, item) in items {
                    guard let id = item.notification.id else { throw StoreError.corrupt("a chunk item without an apns-id") }
                    try encoder.append(item.notification, id: id, payloadRef: item.payloadRef)
                }
                extra += blob.count - encoder.bytes.count
            }
            return extra
        }
    }
}
