import Foundation
import GRDB
import HeraldCore

// Retention and WAL upkeep. Finished and cancelled jobs are deleted with their items and
// payloads once they are older than `jobs.retention` (their report is readable until then);
// the deletes go in transactions of a bounded number of items, so that a sweep of big jobs
// never holds the store's one writer for long nor makes one huge WAL commit.

extension SQLitePushStore: StoreUpkeep {
    /// Deletes finished and cancelled jobs whose last change is before `cutoff`, with their items
    /// and payloads, at most `itemsPerTransaction` items per write transaction and at most
    /// `maxItems` items in all.
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
            // One transaction: up to `step` items of the oldest expired job; the job row (and by
            // cascade its payloads) once it has no item left.
            let (deletedItems, deletedJob, found) = try await pool.write { db -> (Int, Bool, Bool) in
                guard
                    let row = try Row.fetchOne(
                        db,
                        sql: """
                            SELECT tenant, id FROM job INDEXED BY job_by_updated
                            WHERE state IN ('finished', 'cancelled') AND updated_at_ms < ?
                            ORDER BY updated_at_ms LIMIT 1
                            """,
                        arguments: [cutoffMillis])
                else { return (0, false, false) }
                let tenant: String = row["tenant"]
                let id: String = row["id"]
                try db.execute(
                    sql: """
                        DELETE FROM job_item WHERE tenant = ? AND job_id = ? AND idx IN (
                            SELECT idx FROM job_item WHERE tenant = ? AND job_id = ? ORDER BY idx LIMIT ?)
                        """,
                    arguments: [tenant, id, tenant, id, step])
                let items = db.changesCount
                guard items < step else { return (items, false, true) }
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
