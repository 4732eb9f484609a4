import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// A new job's items as chunk rows (migration v9.1-pg): the transaction that creates the job
// writes its items as `job_chunk` rows of up to `chunkItems` items each (one array per field),
// and an item gets its own `job_item` row only when it is first needed — when a claim leases it
// (inserted already leased: the claim writes it once instead of updating a row the POST wrote),
// or when an outcome, a deferral or a read names it. `job.materialized` counts the items that
// have their row (always a prefix of the job: items 0 ..< materialized).
//
// Why: inserting a row per item costs the server close to a second of CPU for a 100,000-item
// job (the heap, the primary key and the pending index about equally), and the 202 would wait
// for all of it. A hundred chunk rows of arrays cost a few milliseconds of the server's time,
// and the item rows are written during the run, by the claims, which write every one of them
// anyway.

extension PostgresPushStore {
    /// Items per `job_chunk` row: a claim of 500 reads one or two rows.
    static let chunkItems = 1_000

    /// Chunk rows per `INSERT` (one statement of about 1.5 MB for a template batch).
    static let chunksPerInsert = 10

    /// Payloads per `INSERT` (one array per column): bounds one statement's message.
    static let payloadsPerInsert = 10_000

    /// A job's payloads, one per run of equal payloads (v8): a template batch has one.
    struct PayloadRuns {
        /// The payload id of each item, in order.
        private(set) var refs: [Int32] = []
        /// The distinct runs' payloads, ids 1, 2, ….
        private(set) var payloads: [ByteBuffer] = []

        init(_ notifications: [HeraldCore.Notification]) {
            refs.reserveCapacity(notifications.count)
            var last: [UInt8]? = nil
            for notification in notifications {
                // Equal to the previous one: a template batch's shared array compares by identity.
                if last != notification.payload {
                    payloads.append(ByteBuffer(bytes: notification.payload))
                    last = notification.payload
                }
                refs.append(Int32(clamping: payloads.count))
            }
        }
    }

    /// Writes the job's payloads and chunk rows on the transaction's connection. Items without
    /// an apns-id get one here, so every resend of an item uses the same.
    static func insertItems(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, notifications: [HeraldCore.Notification],
        logger: Logger
    ) async throws {
        let runs = PayloadRuns(notifications)
        var start = 0
        while start < runs.payloads.count {
            let end = min(start + payloadsPerInsert, runs.payloads.count)
            var binds = PostgresBindings(capacity: 4)
            binds.append(tenant.rawValue)
            binds.append(job.rawValue)
            binds.append((start..<end).map { Int32(clamping: $0 + 1) })
            binds.append(Array(runs.payloads[start..<end]))
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO job_payload (tenant, job_id, id, payload)
                        SELECT $1, $2, t.id, t.payload FROM unnest($3::int[], $4::bytea[]) AS t(id, payload)
                        """, binds: binds), logger: logger)
            start = end
        }
        // A batch item is admitted here: an item without an apns-id gets its one for every
        // attempt, stored with it.
        var ids = NotificationIDGenerator()
        start = 0
        let perStatement = chunkItems * chunksPerInsert
        while start < notifications.count {
            let end = min(start + perStatement, notifications.count)
            try await connection.query(
                insertChunks(
                    tenant: tenant, job: job, notifications: notifications[start..<end], refs: runs.refs[start..<end],
                    ids: &ids),
                logger: logger)
            start = end
        }
    }

    /// Bits of `job_chunk.nulls`: which optional fields an item lacks (arrays hold no NULL
    /// element as postgres-nio encodes them).
    enum MissingField: Int16 {
        case topic = 1
        case priority = 2
        case expiration = 4
        case collapseID = 8
    }

    /// One `INSERT` of up to ``chunksPerInsert`` chunk rows, each field an array bind.
    private static func insertChunks(
        tenant: TenantID, job: JobID, notifications: ArraySlice<HeraldCore.Notification>, refs: ArraySlice<Int32>,
        ids: inout NotificationIDGenerator
    ) -> PostgresQuery {
        var binds = PostgresBindings(capacity: 2 + 11 * chunksPerInsert)
        binds.append(tenant.rawValue)
        binds.append(job.rawValue)
        var values: [String] = []
        var start = notifications.startIndex
        while start < notifications.endIndex {
            let end = min(start + chunkItems, notifications.endIndex)
            let count = end - start
            var tokens: [String] = []
            var topics: [String] = []
            var pushTypes: [String] = []
            var priorities: [Int32] = []
            var expirations: [Int64] = []
            var collapseIDs: [String] = []
            var apnsIDs: [String] = []
            var nulls: [Int16] = []
            tokens.reserveCapacity(count)
            topics.reserveCapacity(count)
            pushTypes.reserveCapacity(count)
            priorities.reserveCapacity(count)
            expirations.reserveCapacity(count)
            collapseIDs.reserveCapacity(count)
            apnsIDs.reserveCapacity(count)
            nulls.reserveCapacity(count)
            for notification in notifications[start..<end] {
                var missing: Int16 = 0
                tokens.append(notification.deviceToken.hex)
                if let topic = notification.topic { topics.append(topic) } else {
                    topics.append("")
                    missing |= MissingField.topic.rawValue
                }
                pushTypes.append(notification.pushType.rawValue)
                if let priority = notification.priority { priorities.append(Int32(priority.rawValue)) } else {
                    priorities.append(0)
                    missing |= MissingField.priority.rawValue
                }
                switch notification.expiration {
                case nil:
                    expirations.append(0)
                    missing |= MissingField.expiration.rawValue
                case .immediately?: expirations.append(0)
                case .at(let seconds)?: expirations.append(Int64(seconds))
                }
                if let collapseID = notification.collapseID { collapseIDs.append(collapseID) } else {
                    collapseIDs.append("")
                    missing |= MissingField.collapseID.rawValue
                }
                apnsIDs.append((notification.id ?? ids.nextID()).rawValue)
                nulls.append(missing)
            }
            let first = binds.count + 1
            values.append(
                "($1, $2, " + (first..<first + 11).map { "$\($0)" }.joined(separator: ", ") + ")")
            binds.append(Int32(clamping: start))
            binds.append(Int32(clamping: count))
            binds.append(tokens)
            binds.append(topics)
            binds.append(pushTypes)
            binds.append(priorities)
            binds.append(expirations)
            binds.append(collapseIDs)
            binds.append(apnsIDs)
            binds.append(Array(refs[start..<end]))
            binds.append(nulls)
            start = end
        }
        return PostgresQuery(
            unsafeSQL: """
                INSERT INTO job_chunk (tenant, job_id, first_idx, count, tokens, topics, push_types, priorities,
                                       expirations, collapse_ids, apns_ids, payload_refs, nulls)
                VALUES \(values.joined(separator: ", "))
                """, binds: binds)
    }

    /// Which items ``materialize(_:tenant:job:target:logger:)`` gives their rows.
    enum MaterializeTarget {
        /// A claim's share: the next `count` items without a row from `from` on, leased to
        /// `claimant` until `leaseUntil` (Unix milliseconds); items without a row below `from`
        /// get theirs unleased.
        case claim(count: Int, from: Int, claimant: String, leaseUntil: Int64)
        /// Every item below this index, unleased.
        case upTo(Int)
    }

    /// Gives items of the job their `job_item` rows, from `job.materialized` on, and returns the
    /// leased ones (the ``jobItemColumns(prefix:payload:)``). Holds the job's row
    /// (`FOR NO KEY UPDATE`) until the transaction ends: instances materializing at once take
    /// turns, each after the other's items.
    static func materialize(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, target: MaterializeTarget, logger: Logger
    ) async throws -> [PostgresRow] {
        let rows = try await connection.query(
            """
            SELECT materialized, item_count FROM job WHERE tenant = \(tenant.rawValue) AND id = \(job.rawValue)
            FOR NO KEY UPDATE
            """, logger: logger
        ).collect()
        guard let row = rows.first else { return [] }
        let cells = row.makeRandomAccess()
        let start = try cells[0].decode(Int.self)
        let itemCount = try cells[1].decode(Int.self)
        let end: Int
        let leasedFrom: Int
        var claimant: String? = nil
        var leaseUntil: Int64? = nil
        switch target {
        case .claim(let count, let from, let holder, let until):
            leasedFrom = max(start, from)
            end = min(itemCount, leasedFrom + max(0, min(count, itemCount)))
            (claimant, leaseUntil) = (holder, until)
        case .upTo(let index):
            end = min(itemCount, index)
            leasedFrom = end
        }
        guard start < end else { return [] }
        let (a, b, leased) = (Int32(clamping: start), Int32(clamping: end), Int32(clamping: leasedFrom))
        return try await connection.query(
            """
            WITH moved AS (
                UPDATE job SET materialized = \(b) WHERE tenant = \(tenant.rawValue) AND id = \(job.rawValue)
            ), made AS (
                INSERT INTO job_item (tenant, job_id, idx, device_token, topic, push_type, priority, expiration,
                                      collapse_id, apns_id, payload, payload_ref, state, claimant, lease_until_ms)
                SELECT c.tenant, c.job_id, t.idx, t.token, CASE WHEN t.nulls & 1 = 0 THEN t.topic END, t.push_type,
                       CASE WHEN t.nulls & 2 = 0 THEN t.priority END, CASE WHEN t.nulls & 4 = 0 THEN t.expiration END,
                       CASE WHEN t.nulls & 8 = 0 THEN t.collapse_id END, t.apns_id, ''::bytea, t.payload_ref, 'pending',
                       CASE WHEN t.idx >= \(leased) THEN \(claimant)::text END,
                       CASE WHEN t.idx >= \(leased) THEN \(leaseUntil)::bigint END
                FROM job_chunk c
                CROSS JOIN LATERAL (
                    SELECT c.first_idx + u.n::int - 1 AS idx, u.*
                    FROM unnest(c.tokens, c.topics, c.push_types, c.priorities, c.expirations, c.collapse_ids,
                                c.apns_ids, c.payload_refs, c.nulls)
                         WITH ORDINALITY AS u(token, topic, push_type, priority, expiration, collapse_id, apns_id,
                                              payload_ref, nulls, n)
                ) AS t
                WHERE c.tenant = \(tenant.rawValue) AND c.job_id = \(job.rawValue)
                  AND c.first_idx < \(b) AND c.first_idx + c.count > \(a) AND t.idx >= \(a) AND t.idx < \(b)
                RETURNING *
            )
            SELECT \(unescaped: jobItemColumns(prefix: "made.")) FROM made WHERE made.claimant IS NOT NULL
            """, logger: logger
        ).collect()
    }

    /// The index after `index` (an index is a caller's value: `Int.max` stays, never traps).
    static func after(_ index: Int) -> Int { index == .max ? .max : index + 1 }

    struct MaterializedKey: Hashable, Sendable {
        var tenant: String
        var job: String
    }

    /// Jobs remembered in ``materializedFloors`` at most (then it starts again, empty). A job id
    /// made again after the retention sweep deleted it is forgotten when this store creates it;
    /// made again through another instance, only the job runner's writes (of items it claimed,
    /// which have rows) reach this store before a claim raises the floor anyway.
    static let materializedFloorLimit = 4_096

    /// Remembers that the job's items below `index` have their rows.
    func noteMaterialized(tenant: TenantID, job: JobID, upTo index: Int) {
        let key = MaterializedKey(tenant: tenant.rawValue, job: job.rawValue)
        materializedFloors.withLock { floors in
            if floors[key] == nil, floors.count >= Self.materializedFloorLimit { floors.removeAll() }
            floors[key] = max(floors[key] ?? 0, index)
        }
    }

    /// True when the job's items below `index` are known to have their rows.
    func knownMaterialized(tenant: TenantID, job: JobID, upTo index: Int) -> Bool {
        let key = MaterializedKey(tenant: tenant.rawValue, job: job.rawValue)
        return materializedFloors.withLock { $0[key].map { index <= $0 } ?? false }
    }

    /// Gives every item below `index` its row (unleased), in a transaction of its own, unless
    /// it has one: before a deferral or a read names items a claim has not reached.
    func materialize(tenant: TenantID, job: JobID, upTo index: Int) async throws {
        try await Self.materialize(client, needs: [(tenant, job, index)], logger: logger)
    }

    /// For each job, gives its items below the index their rows if they have none, each job in a
    /// transaction of its own; one read when none needs it (the job runner records outcomes and
    /// defers only items it claimed: tests and tools need not).
    static func materialize(
        _ client: BoundedPostgresClient, needs: [(tenant: TenantID, job: JobID, upTo: Int)], logger: Logger
    ) async throws {
        guard !needs.isEmpty else { return }
        let rows = try await client.query(
            """
            SELECT w.tenant, w.job_id, w.up_to FROM unnest(\(needs.map(\.tenant.rawValue)), \(needs.map(\.job.rawValue)),
                                                  \(needs.map { Int64($0.upTo) })) AS w(tenant, job_id, up_to)
            JOIN job ON job.tenant = w.tenant AND job.id = w.job_id
            WHERE job.materialized < least(job.item_count, w.up_to)
            """, logger: logger
        ).collect()
        for row in rows {
            let cells = row.makeRandomAccess()
            guard let tenant = try? TenantID(try cells[0].decode(String.self)),
                let job = try? JobID(try cells[1].decode(String.self))
            else { throw StoreError.corrupt("job row with an invalid tenant or id") }
            let upTo = try cells[2].decode(Int.self)
            _ = try await client.withTransaction(logger: logger) { connection in
                try await materialize(connection, tenant: tenant, job: job, target: .upTo(upTo), logger: logger)
            }
        }
    }
}
