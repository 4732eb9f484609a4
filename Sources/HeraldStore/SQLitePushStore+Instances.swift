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
            var released = 0
            for row in try Row.fetchAll(
                db, sql: "SELECT job_key, items FROM job_claim WHERE claimant = ?", arguments: [claimant])
            {
                let key: Int64 = row[0]
                var settled = SettledBits(key: key)
                released += try Self.liveEntries(db, key: key, try ItemChunks.entries(row[1]), settled: &settled).count
            }
            try db.execute(sql: "DELETE FROM job_claim WHERE claimant = ?", arguments: [claimant])
            return released
        }
    }

    /// The items without an outcome each claimant holds under a lease that has not ended.
    public func leasedItemCounts(now: Date) async throws -> [String: Int] {
        let nowMillis = try Self.millis(now, field: "now")
        return try await pool.read { db in
            var counts: [String: Int] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT job_key, claimant, items FROM job_claim WHERE lease_until_ms > ?", arguments: [nowMillis])
            {
                let key: Int64 = row[0]
                var settled = SettledBits(key: key)
                let live = try Self.liveEntries(db, key: key, try ItemChunks.entries(row[2]), settled: &settled).count
                if live > 0 { counts[row[1], default: 0] += live }
            }
            return counts
        }
    }

    /// Extends the claimant's lease row of the job (never shortens it), keeping only the items
    /// still without an outcome in it.
    @discardableResult
    public func renewLeases(tenant: TenantID, job: JobID, claimant: String, leaseUntil: Date) async throws -> Int {
        let until = try Self.millis(leaseUntil, field: "lease_until")
        return try await pool.write { db in
            guard let ref = try Self.jobRef(db, tenant: tenant, id: job),
                var claim = try Self.claimRows(db, key: ref.key).first(where: { $0.claimant == claimant })
            else { return 0 }
            var settled = SettledBits(key: ref.key)
            claim.entries = try Self.liveEntries(db, key: ref.key, claim.entries, settled: &settled)
            claim.leaseUntil = max(claim.leaseUntil, until)
            try Self.writeClaim(db, key: ref.key, claim)
            return claim.entries.count
        }
    }
}
