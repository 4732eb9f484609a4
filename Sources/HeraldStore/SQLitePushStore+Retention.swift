import Foundation
import GRDB
import HeraldCore

// Retention and WAL upkeep. Finished and cancelled jobs are deleted with their items and
// payloads once they are older than `jobs.retention` (their report is readable until then);
// the deletes go in transactions of a bounded number of items, so that a sweep of big jobs
// never holds the store's one writer for long nor makes one huge WAL commit.

extension SQLitePushStore: StoreUpkeep {
    /// Deletes finished and cancelled jobs whose last change is before `cutoff`, with their items
    /// and payloads, at most `itemsPerTransaction` items per write transaction (whole chunks of
    /// ``ItemChunks/size`` items: at least one) and at most `maxItems` items in all (the last
    /// transaction may pass it by less than a chunk).
    public func deleteExpiredJobs(before cutoff: Date, itemsPerTransaction: Int, maxItems: Int)
        async throws -> RetentionSweep
    {
        let cutoffMillis = try Self.millis(cutoff, field: "cutoff")
        let step = max(1, itemsPerTransaction)
        var sweep = RetentionSweep()
        while true {
            guard sweep.items < maxItems else {
                sweep.complete = false
                return sweep
            }
            // One transaction: the oldest expired job's first chunks, up to `step` items (at least
            // one chunk of ``ItemChunks/size``) with what is kept of their items; once no chunk is
            // left, the job row (and by cascade its payloads and outcome counts) and its leases.
            let (deletedItems, deletedJob, found) = try await pool.write { db -> (Int, Bool, Bool) in
                guard
                    let row = try Row.fetchOne(
                        db,
                        sql: """
                            SELECT tenant, id, item_key FROM job INDEXED BY job_by_updated
                            WHERE state IN ('finished', 'cancelled') AND updated_at_ms < ?
                            ORDER BY updated_at_ms LIMIT 1
                            """,
                        arguments: [cutoffMillis])
                else { return (0, false, false) }
                let tenant: String = row[0]
                let id: String = row[1]
                let key: Int64? = row[2]
                var items = 0
                if let key {
                    let ids = ItemChunks.rowIDs(key: key)
                    var last: Int64? = nil
                    for chunk in try Row.fetchAll(
                        db, sql: "SELECT id, count FROM job_chunk WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?",
                        arguments: [ids.lowerBound, ids.upperBound, max(1, step / ItemChunks.size)])
                    {
                        let count: Int = chunk[1]
                        items += count
                        last = chunk[0]
                        if items >= step { break }
                    }
                    if let last {
                        let end = Int(last - ids.lowerBound) + ItemChunks.size  // the first index after them
                        try db.execute(
                            sql: "DELETE FROM job_chunk WHERE id BETWEEN ? AND ?", arguments: [ids.lowerBound, last])
                        try db.execute(
                            sql: "DELETE FROM job_settled WHERE id BETWEEN ? AND ?", arguments: [ids.lowerBound, last])
                        try db.execute(
                            sql: "DELETE FROM job_sent WHERE id BETWEEN ? AND ?", arguments: [ids.lowerBound, last | 0xff])
                        try db.execute(
                            sql: "DELETE FROM job_item WHERE job_key = ? AND idx < ?", arguments: [key, end])
                        // The job row goes in a transaction of its own, once no chunk is left.
                        return (items, false, true)
                    }
                    try db.execute(sql: "DELETE FROM job_item WHERE job_key = ?", arguments: [key])
                    try db.execute(sql: "DELETE FROM job_claim WHERE job_key = ?", arguments: [key])
                }
                try db.execute(sql: "DELETE FROM job WHERE tenant = ? AND id = ?", arguments: [tenant, id])
                return (items, true, true)
            }
            guard found else { return sweep }
            sweep.items += deletedItems
            if deletedJob { sweep.jobs += 1 }
        }
    }

    /// Copies the WAL into the database and truncates it (`PRAGMA wal_checkpoint(TRUNCATE)`).
    /// With readers in the middle of a read it checkpoints what it can and leaves the rest for
    /// the next time.
    /// - Returns: the WAL's size in frames before, and how many were checkpointed.
    @discardableResult
    public func checkpoint() async throws -> (walFrames: Int, checkpointed: Int) {
        try await pool.writeWithoutTransaction { db in
            let row = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            return (row?[1] ?? 0, row?[2] ?? 0)
        }
    }

    /// The WAL file's size in bytes now (0 when there is none).
    public func walSize() -> Int {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path + "-wal")
        return (attributes?[.size] as? NSNumber)?.intValue ?? 0
    }

    /// SQLite's `journal_size_limit` on the store's writer connection, in bytes.
    public func journalSizeLimit() async throws -> Int {
        try await pool.write { db in try Int.fetchOne(db, sql: "PRAGMA journal_size_limit") ?? -1 }
    }
}

extension SQLitePushStore {
    /// Checkpoints the WAL (``checkpoint()``).
    public func compact() async throws {
        try await checkpoint()
    }
}
