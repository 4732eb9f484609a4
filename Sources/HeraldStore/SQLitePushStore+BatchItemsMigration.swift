import Foundation
import GRDB
import HeraldCore

// Migration v10-sqlite-batch-items: the item shape of `ItemChunks.swift`. Jobs stored before it are
// rewritten into that shape in the migration's transaction, one job and one chunk at a time
// (memory bounded by a chunk, whatever the store holds): each item's notification goes into
// its chunk; an item that left `pending`, or holds anything more than its notification
// (attempts, a wire mark, an error), keeps a `job_item` row with every column it had; the
// leases become one `job_claim` row per claimant and job (the latest of its items' leases);
// items that kept their own payload (stored before v3) get a `job_payload` row each run.

extension SQLitePushStore {
    static func migrateToBatchItems(_ db: Database) throws {
        try db.execute(
            sql: """
                ALTER TABLE job_item RENAME TO job_item_v9;
                ALTER TABLE job ADD COLUMN item_key INTEGER;

                CREATE TABLE job_chunk (
                    id INTEGER PRIMARY KEY,
                    count INTEGER NOT NULL,
                    items BLOB NOT NULL
                );
                CREATE TABLE job_settled (
                    id INTEGER PRIMARY KEY,
                    bits BLOB NOT NULL
                );
                CREATE TABLE job_sent (
                    id INTEGER PRIMARY KEY,
                    items BLOB NOT NULL
                );
                CREATE TABLE job_item (
                    job_key INTEGER NOT NULL,
                    idx INTEGER NOT NULL,
                    state TEXT NOT NULL,
                    status INTEGER,
                    reason TEXT,
                    message TEXT,
                    result_apns_id BLOB,
                    apns_timestamp_ms INTEGER,
                    finished_at_ms INTEGER,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    first_attempt_ms INTEGER,
                    next_attempt_ms INTEGER,
                    last_error TEXT,
                    wire_at_ms INTEGER,
                    PRIMARY KEY (job_key, idx)
                ) WITHOUT ROWID;
                CREATE TABLE job_claim (
                    job_key INTEGER NOT NULL,
                    claimant TEXT NOT NULL,
                    lease_until_ms INTEGER NOT NULL,
                    items BLOB NOT NULL,
                    PRIMARY KEY (job_key, claimant)
                );
                CREATE INDEX job_claim_by_claimant ON job_claim (claimant);
                """)
        let jobs = try Row.fetchAll(
            db, sql: "SELECT tenant, id, item_count FROM job ORDER BY created_at_ms, tenant, id")
        var key: Int64 = 0
        for job in jobs {
            key += 1
            let tenantRaw: String = job[0]
            let idRaw: String = job[1]
            let count: Int = job[2]
            try db.execute(
                sql: "UPDATE job SET item_key = ? WHERE tenant = ? AND id = ?", arguments: [key, tenantRaw, idRaw])
            try convertJob(db, tenant: tenantRaw, job: idRaw, key: key, count: count)
        }
        try db.execute(
            sql: """
                DROP TABLE job_item_v9;
                CREATE UNIQUE INDEX job_by_item_key ON job (item_key);
                CREATE INDEX job_item_due ON job_item (job_key, next_attempt_ms) WHERE state = 'retrying';
                CREATE INDEX job_item_failed ON job_item (job_key, idx) WHERE state = 'failed';
                """)
    }

    /// Rewrites one job's v9 item rows into the v10 shape.
    private static func convertJob(_ db: Database, tenant: String, job: String, key: Int64, count: Int) throws {
        guard count <= ItemChunks.maxItems else { throw StoreError.corrupt("job \(job) has too many items to migrate") }
        var nextPayload = (try Int64.fetchOne(
            db, sql: "SELECT max(id) FROM job_payload WHERE tenant = ? AND job_id = ?", arguments: [tenant, job]) ?? 0)
        var lastOwnPayload: (data: Data, id: Int64)? = nil
        var claims: [String: (lease: Int64, entries: [UInt32])] = [:]
        var first = 0
        while first < count {
            let end = min(first + ItemChunks.size, count)
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT idx, device_token, topic, push_type, priority, expiration, collapse_id, apns_id, payload,
                           payload_ref, state, status, reason, message, result_apns_id, apns_timestamp_ms,
                           finished_at_ms, claimant, lease_until_ms, attempts, first_attempt_ms, next_attempt_ms,
                           last_error, wire_at_ms
                    FROM job_item_v9 WHERE tenant = ? AND job_id = ? AND idx >= ? AND idx < ? ORDER BY idx
                    """,
                arguments: [tenant, job, first, end])
            guard rows.count == end - first else { throw StoreError.corrupt("job \(job) lacks items from \(first)") }
            var encoder = ItemChunks.Encoder(capacity: rows.count * 64)
            var bits = [UInt8](repeating: 0, count: ItemChunks.settledBytes)
            for (position, row) in rows.enumerated() {
                let index: Int = row[0]
                guard index == first + position else { throw StoreError.corrupt("job \(job) lacks item \(first + position)") }
                let tokenHex: String = row[1]
                let pushTypeRaw: String = row[3]
                let apnsIDRaw: String = row[7]
                let priorityRaw: Int? = row[4]
                let expirationRaw: Int64? = row[5]
                guard let token = try? DeviceToken(hex: tokenHex), let pushType = PushType(rawValue: pushTypeRaw),
                    let apnsID = try? NotificationID(apnsIDRaw)
                else { throw StoreError.corrupt("job \(job) item \(index) has an invalid token, push type or apns-id") }
                var payloadRef: Int64? = row[9]
                if payloadRef == nil {
                    // Its own payload (before v3): one `job_payload` row per run of equal ones.
                    let own: Data = row[8]
                    if let last = lastOwnPayload, last.data == own {
                        payloadRef = last.id
                    } else {
                        nextPayload += 1
                        try db.execute(
                            sql: "INSERT INTO job_payload (tenant, job_id, id, payload) VALUES (?, ?, ?, ?)",
                            arguments: [tenant, job, nextPayload, own])
                        lastOwnPayload = (own, nextPayload)
                        payloadRef = nextPayload
                    }
                }
                let notification = HeraldCore.Notification(
                    deviceToken: token, topic: row[2], pushType: pushType,
                    priority: priorityRaw.flatMap(Priority.init(rawValue:)),
                    expiration: expirationRaw.map { $0 == 0 ? .immediately : .at(UInt32(clamping: $0)) },
                    collapseID: row[6], id: apnsID, payload: [])
                try encoder.append(notification, id: apnsID, payloadRef: payloadRef ?? 0)

                let stateRaw: String = row[10]
                guard let state = JobItemState(rawValue: stateRaw) else {
                    throw StoreError.corrupt("job \(job) item \(index) has an unknown state")
                }
                let attempts: Int = row[19]
                let firstAttempt: Int64? = row[20]
                let next: Int64? = row[21]
                let lastError: String? = row[22]
                let wire: Int64? = row[23]
                if state != .pending { ItemChunks.set(&bits, position) }
                if state != .pending || attempts != 0 || firstAttempt != nil || next != nil || lastError != nil || wire != nil {
                    let resultRaw: String? = row[14]
                    let status: Int? = row[11]
                    let reason: String? = row[12]
                    let message: String? = row[13]
                    let timestamp: Int64? = row[15]
                    let finished: Int64? = row[16]
                    let resultID = resultRaw.flatMap { try? NotificationID($0) }.map { Data($0.words.bytes) }
                    try db.execute(
                        sql: """
                            INSERT INTO job_item (job_key, idx, state, status, reason, message, result_apns_id,
                                apns_timestamp_ms, finished_at_ms, attempts, first_attempt_ms, next_attempt_ms,
                                last_error, wire_at_ms)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            key, index, stateRaw, status, reason, message, resultID, timestamp, finished, attempts, firstAttempt,
                            next, lastError, wire,
                        ])
                }
                let claimant: String? = row[17]
                if let claimant, state == .pending || state == .retrying {
                    let lease: Int64 = row[18] ?? 0
                    var claim = claims[claimant] ?? (lease: lease, entries: [])
                    claim.lease = max(claim.lease, lease)
                    claim.entries.append(try ItemChunks.claimEntry(index, retry: state == .retrying))
                    claims[claimant] = claim
                }
            }
            try db.execute(
                sql: "INSERT INTO job_chunk (id, count, items) VALUES (?, ?, ?)",
                arguments: [ItemChunks.rowID(key: key, first: first), end - first, Data(encoder.bytes)])
            if bits.contains(where: { $0 != 0 }) {
                try db.execute(
                    sql: "INSERT INTO job_settled (id, bits) VALUES (?, ?)",
                    arguments: [ItemChunks.rowID(key: key, first: first), Data(bits)])
            }
            first = end
        }
        for (claimant, claim) in claims {
            try db.execute(
                sql: "INSERT INTO job_claim (job_key, claimant, lease_until_ms, items) VALUES (?, ?, ?, ?)",
                arguments: [key, claimant, claim.lease, ItemChunks.blob(claim.entries)])
        }
    }
}
