import Foundation
import GRDB
import HeraldCore

// The instance registry (`herald_instance`, migration v7) and lease renewal. On SQLite one
// process at a time holds the store (`StoreLock`), so the registry has one live row; it is kept
// so that both backends answer `GET /admin/instances` alike and a restart finds the row of the
// process before it.

extension SQLitePushStore: InstanceRegistry {
    public func registerInstance(_ instance: InstanceRecord) async throws {
        let started = try Self.millis(instance.startedAt, field: "started_at")
        let beat = try Self.millis(instance.lastHeartbeat, field: "last_heartbeat")
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO herald_instance (id, claimant, host, pid, started_at_ms, last_heartbeat_ms)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [instance.id, instance.claimant, instance.host, instance.pid, started, beat])
        }
    }

    public func heartbeat(instance id: String, at: Date) async throws -> Bool {
        let beat = try Self.millis(at, field: "heartbeat")
        return try await pool.write { db in
            try db.execute(
                sql: "UPDATE herald_instance SET last_heartbeat_ms = max(last_heartbeat_ms, ?) WHERE id = ?",
                arguments: [beat, id])
            return db.changesCount > 0
        }
    }

    public func instances() async throws -> [InstanceRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM herald_instance ORDER BY started_at_ms, id").map { row in
                InstanceRecord(
                    id: row["id"], claimant: row["claimant"], host: row["host"], pid: row["pid"],
                    startedAt: Self.date(row["started_at_ms"]), lastHeartbeat: Self.date(row["last_heartbeat_ms"]))
            }
        }
    }

    @discardableResult
    public func removeInstance(id: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM herald_instance WHERE id = ?", arguments: [id])
            return db.changesCount > 0
        }
    }

    @discardableResult
    public func releaseLeases(heldBy claimant: String) async throws -> Int {
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE job_item INDEXED BY job_item_leased SET claimant = NULL, lease_until_ms = NULL
                    WHERE claimant = ? AND state IN ('pending', 'retrying')
                    """,
                arguments: [claimant])
            return db.changesCount
        }
    }

    public func leasedItemCounts(now: Date) async throws -> [String: Int] {
        let nowMillis = try Self.millis(now, field: "now")
        return try await pool.read { db in
            var counts: [String: Int] = [:]
            for row in try Row.fetchAll(
                db,
                sql: """
                    SELECT claimant, count(*) AS n FROM job_item INDEXED BY job_item_leased
                    WHERE claimant IS NOT NULL AND state IN ('pending', 'retrying') AND lease_until_ms > ?
                    GROUP BY claimant
                    """,
                arguments: [nowMillis])
            {
                counts[row["claimant"]] = row["n"]
            }
            return counts
        }
    }

    @discardableResult
    public func renewLeases(tenant: TenantID, job: JobID, claimant: String, leaseUntil: Date) async throws -> Int {
        let until = try Self.millis(leaseUntil, field: "lease_until")
        return try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE job_item INDEXED BY job_item_leased SET lease_until_ms = max(coalesce(lease_until_ms, 0), ?)
                    WHERE claimant = ? AND tenant = ? AND job_id = ? AND state IN ('pending', 'retrying')
                    """,
                arguments: [until, claimant, tenant.rawValue, job.rawValue])
            return db.changesCount
        }
    }
}
