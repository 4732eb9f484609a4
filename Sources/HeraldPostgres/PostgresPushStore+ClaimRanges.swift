import Foundation
import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// A job's items as the store keeps them while it runs (migration v12.1-pg-claim-ranges). Its
// notifications are the chunk rows the POST wrote (`job_chunk`). Below the job's frontier
// (`job.materialized`: every item under it has been claimed once) an item is one of:
// - in a claim range (`job_claim_range`): leased, with the rest of the range, to the claimant
//   that took it from the frontier, one row for a claim of hundreds;
// - a plain success (200, nothing else to say) in a `job_sent` row: the indexes, attempts,
//   finish times and apns-ids of one commit group within one block of 1,024 indexes;
// - its own `job_item` row, for anything else: another outcome, a retry, an on-the-wire mark,
//   an item of an expired range taken over. Wherever an item has a row, the row decides.
// Ranges do not overlap: the ranges over an index span are the last one starting at or before
// the span and those starting inside it, two reads of the primary key however many the job has.
// Above the frontier an item has neither (unless a deferral or a mark named it). Each change of
// a job's items runs in a transaction that first takes the job's advisory item lock: takeovers
// exclusively; claims, outcome groups, retries and marks shared (instances write theirs at
// once), claims behind a claim lock of their own as well (one moves the frontier at a time). A range taken over and an outcome for one of its items never
// cross: the later one sees the row the earlier wrote. Only a range's claimant writes plain
// successes of the items without a row.
//
// Why: a row per item written at its claim and again at its outcome cost the server more CPU
// a batch notification than Herald's own; a claim range and a success record cost it once a
// group. A group of plain successes is one call of `herald_record_sent` (``recordSentFunction``):
// six round trips, each statement parsed and planned again, cost more than the writes.

extension PostgresPushStore {
    /// Indexes per `job_sent` block: a lookup reads the blocks its indexes fall in.
    static let sentBlockShift = 10

    // MARK: Locking a job

    /// The first key of the advisory lock of a job's items ("HItm" in ASCII); the second hashes
    /// the schema, tenant and job.
    static let itemLockNamespace: Int32 = 0x4849_746d

    /// The first key of the advisory lock of a job's claims ("HClm"): one claim of a job at a
    /// time moves its frontier.
    static let claimLockNamespace: Int32 = 0x4843_6c6d

    /// What ``claimFunction`` answered: the job's frontier and item count, the claimable rows
    /// picked (locked), the claimant's own ranges leased again, and whether another claimant's
    /// expired ranges are to be taken over first (then the rows and ranges are still to be read).
    struct ClaimOpening {
        var frontier: Int
        var itemCount: Int
        var takeOver: Bool
        /// The whole claim was the frontier's, and the call claimed it (its rows carry the range's slices).
        var rangeClaimed: Bool
        var picked: [Int32]
        var ownRanges: [(first: Int32, end: Int32)]
    }

    /// The column of ``claimFunction``'s rows where a slice's columns begin (`o_first`).
    static let claimSliceColumn = 6

    /// Opens a claim in the caller's transaction (``claimFunction`` without its range); nil when
    /// the job is gone, finished or cancelled.
    static func openClaim(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, claimant: String, now: Int64, from: Int32,
        limit: Int, leaseUntil: Int64, logger: Logger
    ) async throws -> ClaimOpening? {
        let rows = try await connection.prepared(
            ClaimText.self, tenant.rawValue, job.rawValue, claimant, now, from, Int64(limit), leaseUntil, false, logger: logger)
        guard let row = rows.first else { throw StoreError.corrupt("herald_claim answered no row") }
        return try claimOpening(row)
    }

    /// The opening of a claim in a row of ``claimFunction``; nil when the job is gone, finished
    /// or cancelled.
    static func claimOpening(_ row: PostgresRow) throws -> ClaimOpening? {
        let cells = row.makeRandomAccess()
        let state = try cells[0].decode(Int32.self)
        guard state != 0 else { return nil }
        let firsts = try cells[4].decode(PostgresArray<Int32>.self).elements
        let ends = try cells[5].decode(PostgresArray<Int32>.self).elements
        guard firsts.count == ends.count else { throw StoreError.corrupt("herald_claim answered ranges of two lengths") }
        return ClaimOpening(
            frontier: try cells[1].decode(Int.self), itemCount: try cells[2].decode(Int.self), takeOver: state == 2,
            rangeClaimed: state == 3, picked: try cells[3].decode(PostgresArray<Int32>.self).elements,
            ownRanges: Array(zip(firsts, ends).map { (first: $0, end: $1) }))
    }

    /// Locks the job's items until the transaction ends (`exclusive`: against every other change
    /// of them; otherwise against claims and takeovers only), with an advisory lock, which
    /// writes nothing (a row lock shared by several would write the row each time), and returns
    /// the job's frontier and item count, read after the lock; nil when the job is gone or,
    /// with `runnable`, finished or cancelled.
    static func lockJob(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, runnable: Bool, exclusive: Bool = true,
        logger: Logger
    ) async throws -> (frontier: Int, count: Int)? {
        let key = tenant.rawValue + "/" + job.rawValue
        if exclusive {
            _ = try await connection.prepared(ExclusiveLockText.self, itemLockNamespace, key, logger: logger)
        } else {
            _ = try await connection.prepared(SharedLockText.self, itemLockNamespace, key, logger: logger)
        }
        // A statement of its own: its snapshot is taken after the lock (the frontier a claim
        // moved before is seen).
        let rows = try await connection.prepared(JobFrontierText.self, tenant.rawValue, job.rawValue, logger: logger)
        guard let row = rows.first else { return nil }
        let cells = row.makeRandomAccess()
        if runnable, try !cells[2].decode(Bool.self) { return nil }
        return (try cells[0].decode(Int.self), try cells[1].decode(Int.self))
    }

    // MARK: Item rows on demand

    /// A chunk's apns-ids in the bounds `s.lo ... s.hi`, as `uuid[]`: kept so since migration
    /// `v15.3-pg-ids-as-bytes`, as text in the chunks of jobs posted before it.
    static let chunkAPNsIDs = "coalesce(c.apns_uuids[s.lo:s.hi], c.apns_ids[s.lo:s.hi]::uuid[])"

    /// A chunk's device tokens in the bounds `s.lo ... s.hi`, as `bytea[]`: kept so since
    /// migration `v15.3-pg-ids-as-bytes`, as hex text in the chunks of jobs posted before it
    /// (converted in order; such a chunk is not written any more).
    static let chunkTokens = """
        coalesce(c.token_bytes[s.lo:s.hi],
                 ARRAY(SELECT decode(v.hex, 'hex') FROM unnest(c.tokens[s.lo:s.hi]) WITH ORDINALITY AS v(hex, n) ORDER BY v.n))
        """

    /// The chunk columns of one item, as `t.…` of ``chunkItems(where:)``.
    static let chunkItemColumns = """
        t.idx, t.token, CASE WHEN t.nulls & 1 = 0 THEN t.topic END, t.push_type,
        CASE WHEN t.nulls & 2 = 0 THEN t.priority END, CASE WHEN t.nulls & 4 = 0 THEN t.expiration END,
        CASE WHEN t.nulls & 8 = 0 THEN t.collapse_id END, t.apns_id, t.payload_ref
        """

    /// The job's chunk items (`c`, `t`) between two bounds (`$3` inclusive, `$4` exclusive): of
    /// each chunk, only the slice of its arrays within the bounds is unnested. The chunks are
    /// read from the last one starting at or before `$3` (chunks do not overlap), so that a read
    /// does not grow with the job's chunks.
    static let chunkItemsFrom = """
        job_chunk c
        CROSS JOIN LATERAL (SELECT greatest($3 - c.first_idx + 1, 1) AS lo, least($4 - c.first_idx, c.count) AS hi) AS s
        CROSS JOIN LATERAL (
            SELECT c.first_idx + s.lo + u.n::int - 2 AS idx, u.*
            FROM unnest(\(chunkTokens), c.topics[s.lo:s.hi], c.push_types[s.lo:s.hi], c.priorities[s.lo:s.hi],
                        c.expirations[s.lo:s.hi], c.collapse_ids[s.lo:s.hi], \(chunkAPNsIDs),
                        c.payload_refs[s.lo:s.hi], c.nulls[s.lo:s.hi])
                 WITH ORDINALITY AS u(token, topic, push_type, priority, expiration, collapse_id, apns_id,
                                      payload_ref, nulls, n)
        ) AS t
        WHERE c.tenant = $1 AND c.job_id = $2 AND c.first_idx < $4 AND c.first_idx + c.count > $3
          AND c.first_idx >= coalesce(
              (SELECT f.first_idx FROM job_chunk f WHERE f.tenant = $1 AND f.job_id = $2 AND f.first_idx <= $3
               ORDER BY f.first_idx DESC LIMIT 1), $3)
          AND t.idx >= $3 AND t.idx < $4
        """

    /// Of the items in `low ..< high`, those with a row and those a plain success record holds.
    static func settledIndexes(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, low: Int, high: Int, logger: Logger
    ) async throws -> (rowed: Set<Int>, sent: Set<Int>) {
        guard low < high else { return ([], []) }
        let (a, b) = (Int32(clamping: low), Int32(clamping: high))
        let (firstBlock, lastBlock) = (Int32(clamping: low >> sentBlockShift), Int32(clamping: (high - 1) >> sentBlockShift))
        var rowed = Set<Int>()
        var sent = Set<Int>()
        for row in try await connection.query(
            """
            SELECT idx, true FROM job_item
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND idx >= \(a) AND idx < \(b)
            UNION ALL
            SELECT x, false FROM job_sent s, unnest(s.idxs) AS x
            WHERE s.tenant = \(tenant.rawValue) AND s.job_id = \(job.rawValue) AND s.block BETWEEN \(firstBlock) AND \(lastBlock)
              AND x >= \(a) AND x < \(b)
            """, logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            let index = try cells[0].decode(Int.self)
            if try cells[1].decode(Bool.self) { rowed.insert(index) } else { sent.insert(index) }
        }
        return (rowed, sent)
    }

    /// Inserts `job_item` rows for the items at `indexes` from their chunks, pending, each leased
    /// as `leases` says (claimant and Unix milliseconds; none: unleased); an item that has a row
    /// keeps it. - Returns: how many rows were made.
    @discardableResult
    static func insertRows(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, indexes: [Int],
        leases: [Int: (claimant: String, until: Int64)] = [:], logger: Logger
    ) async throws -> Int {
        guard let low = indexes.min(), let high = indexes.max() else { return 0 }
        var claimants: [String] = []
        var until: [Int64] = []
        var leased: [Bool] = []
        for index in indexes {
            let lease = leases[index]
            claimants.append(lease?.claimant ?? "")
            until.append(lease?.until ?? 0)
            leased.append(lease != nil)
        }
        var binds = PostgresBindings(capacity: 8)
        binds.append(tenant.rawValue)
        binds.append(job.rawValue)
        binds.append(Int32(clamping: low))
        binds.append(Int32(clamping: min(high, Int(Int32.max) - 1) + 1))
        binds.append(indexes.map { Int32(clamping: $0) })
        binds.append(claimants)
        binds.append(until)
        binds.append(leased)
        return try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    INSERT INTO job_item (tenant, job_id, idx, device_token, topic, push_type, priority, expiration,
                                          collapse_id, apns_id, payload, payload_ref, state, claimant, lease_until_ms)
                    SELECT c.tenant, c.job_id, t.idx, encode(t.token, 'hex'), CASE WHEN t.nulls & 1 = 0 THEN t.topic END, t.push_type,
                           CASE WHEN t.nulls & 2 = 0 THEN t.priority END, CASE WHEN t.nulls & 4 = 0 THEN t.expiration END,
                           CASE WHEN t.nulls & 8 = 0 THEN t.collapse_id END, t.apns_id::text, ''::bytea, t.payload_ref, 'pending',
                           CASE WHEN ($8::bool[])[array_position($5::int[], t.idx)] THEN ($6::text[])[array_position($5::int[], t.idx)] END,
                           CASE WHEN ($8::bool[])[array_position($5::int[], t.idx)] THEN ($7::bigint[])[array_position($5::int[], t.idx)] END
                    FROM \(chunkItemsFrom)
                      AND t.idx = ANY($5::int[])
                    ON CONFLICT (tenant, job_id, idx) DO NOTHING
                    RETURNING 1
                    """, binds: binds), logger: logger
        ).collect().count
    }

    /// Gives the named items their `job_item` rows where they have none and are not plain
    /// successes: pending, leased as their claim range is (or not at all). In the caller's
    /// transaction, which holds the job.
    static func ensureRows(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, indexes: [Int], logger: Logger
    ) async throws {
        guard let low = indexes.min(), let high = indexes.max() else { return }
        let end = high == Int.max ? high : high + 1
        let settled = try await settledIndexes(connection, tenant: tenant, job: job, low: low, high: end, logger: logger)
        let missing = Set(indexes).subtracting(settled.rowed).subtracting(settled.sent)
        guard !missing.isEmpty else { return }
        var leases: [Int: (claimant: String, until: Int64)] = [:]
        for row in try await connection.query(
            """
            SELECT first_idx, end_idx, claimant, lease_until_ms FROM job_claim_range
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)
              AND first_idx <= \(Int32(clamping: high)) AND end_idx > \(Int32(clamping: low))
              AND first_idx >= coalesce(
                  (SELECT max(first_idx) FROM job_claim_range WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)
                     AND first_idx <= \(Int32(clamping: low))), \(Int32(clamping: low)))
            """, logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            let (first, rangeEnd) = (try cells[0].decode(Int.self), try cells[1].decode(Int.self))
            let lease = (try cells[2].decode(String.self), try cells[3].decode(Int64.self))
            for index in missing where first <= index && index < rangeEnd { leases[index] = lease }
        }
        try await insertRows(connection, tenant: tenant, job: job, indexes: missing.sorted(), leases: leases, logger: logger)
    }

    /// Which claim ranges ``takeOverRanges(_:tenant:job:_:logger:)`` ends.
    enum RangeOwners {
        /// Every other claimant's whose lease ran out by this time (Unix milliseconds).
        case expired(except: String, now: Int64)
        /// Those of this claimant and of its earlier instances (`base` or `base/…`) but one.
        case instances(base: String, keeping: String)
        /// Those of one claimant.
        case claimant(String)
    }

    /// Ends the chosen claim ranges of the job: their items still without a row or an outcome
    /// get rows, unleased, so that any claimant takes them next. In the caller's transaction,
    /// which holds the job.
    /// - Returns: how many items the ranges still held.
    @discardableResult
    static func takeOverRanges(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, _ owners: RangeOwners, logger: Logger
    ) async throws -> Int {
        let ranges: [PostgresRow]
        switch owners {
        case .expired(let claimant, let now):
            ranges = try await connection.query(
                """
                DELETE FROM job_claim_range WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)
                  AND claimant <> \(claimant) AND lease_until_ms <= \(now)
                RETURNING first_idx, end_idx
                """, logger: logger
            ).collect()
        case .instances(let base, let keeping):
            ranges = try await connection.query(
                """
                DELETE FROM job_claim_range WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)
                  AND claimant <> \(keeping)
                  AND (claimant = \(base) OR left(claimant, \(base.unicodeScalars.count + 1)::int) = \(base + "/"))
                RETURNING first_idx, end_idx
                """, logger: logger
            ).collect()
        case .claimant(let claimant):
            ranges = try await connection.query(
                """
                DELETE FROM job_claim_range WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)
                  AND claimant = \(claimant)
                RETURNING first_idx, end_idx
                """, logger: logger
            ).collect()
        }
        var held = 0
        for range in ranges {
            let cells = range.makeRandomAccess()
            let (first, end) = (try cells[0].decode(Int.self), try cells[1].decode(Int.self))
            let settled = try await settledIndexes(connection, tenant: tenant, job: job, low: first, high: end, logger: logger)
            let open = (first..<max(first, end)).filter { !settled.rowed.contains($0) && !settled.sent.contains($0) }
            held += try await insertRows(connection, tenant: tenant, job: job, indexes: open, logger: logger)
        }
        return held
    }

    // MARK: Claiming from the frontier

    /// Leases the next items from the frontier (from `from` when that is higher: the items
    /// between get rows, unleased) as one claim range, and appends them to `items`, pending and
    /// leased. In the caller's transaction, which holds the job.
    static func claimRange(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, frontier: Int, itemCount: Int, count: Int,
        from: Int, claimant: String, leaseUntil: Int64, into items: inout [JobItem], logger: Logger
    ) async throws {
        let first = max(frontier, min(from, itemCount))
        if frontier < first {
            try await ensureRows(
                connection, tenant: tenant, job: job, indexes: Array(frontier..<first), logger: logger)
        }
        let end = min(itemCount, first + max(0, min(count, itemCount)))
        let (a, b) = (Int32(clamping: first), Int32(clamping: end))
        guard first < end else {
            if frontier < end {
                _ = try await connection.prepared(FrontierMoveText.self, b, tenant.rawValue, job.rawValue, logger: logger)
            }
            return
        }
        // The frontier moved, the range leased and its items read, in one statement. Items of
        // the range with a row of their own (a deferral or a mark named them before any claim)
        // are claimed through their rows, not here.
        let until = date(leaseUntil)
        // In descending index order: taken off the end, each moved, in ascending order.
        var notes = try await chunkItemsWithoutRows(
            connection, tenant: tenant, job: job, low: a, end: b, claim: (claimant, leaseUntil), logger: logger)
        while let (index, note) = notes.popLast() {
            items.append(
                JobItem(job: job, index: index, notification: note, state: .pending, result: nil, claimant: claimant, leaseUntil: until))
        }
    }

    /// The claimant's own claim ranges from `from` on, leased again until `leaseUntil`, in index
    /// order. In the caller's transaction, which holds the job.
    static func ownRanges(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, claimant: String, from: Int32, leaseUntil: Int64,
        logger: Logger
    ) async throws -> [(first: Int32, end: Int32)] {
        try await connection.prepared(
            OwnRangesText.self, leaseUntil, tenant.rawValue, job.rawValue, claimant, from, logger: logger
        ).map { row in
            let cells = row.makeRandomAccess()
            return (first: try cells[0].decode(Int32.self), end: try cells[1].decode(Int32.self))
        }.sorted { $0.first < $1.first }
    }

    /// Of the claimant's own claim `ranges` (leased again, in index order), the items from `from`
    /// on still without a row or an outcome, at most `limit`, appended to `items` in index order
    /// (a run resuming its job gets back what it had not finished); a range with nothing left is
    /// deleted. In the caller's transaction, which holds the job.
    static func reclaimOwnRanges(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, claimant: String, ranges: [(first: Int32, end: Int32)],
        from: Int, limit: Int, leaseUntil: Int64, into items: inout [JobItem], logger: Logger
    ) async throws {
        guard limit > 0 else { return }
        var open: [Int] = []
        for (first, end) in ranges where open.count < limit {
            let low = max(Int(first), from)
            let settled = try await settledIndexes(connection, tenant: tenant, job: job, low: low, high: Int(end), logger: logger)
            let left = (low..<max(low, Int(end))).filter { !settled.rowed.contains($0) && !settled.sent.contains($0) }
            if left.isEmpty, low == Int(first) {
                // Every item of the range is decided: the range has nothing left to lease.
                try await connection.query(
                    """
                    DELETE FROM job_claim_range WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND first_idx = \(first)
                    """, logger: logger)
            }
            open += left.prefix(limit - open.count)
        }
        var rows: [PostgresRow] = []
        if let low = open.first, let high = open.last {
            var binds = PostgresBindings(capacity: 5)
            binds.append(tenant.rawValue)
            binds.append(job.rawValue)
            binds.append(Int32(clamping: low))
            binds.append(Int32(clamping: high + 1))
            binds.append(open.map { Int32(clamping: $0) })
            rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(chunkItemColumns) FROM \(chunkItemsFrom) AND t.idx = ANY($5::int[]) ORDER BY t.idx",
                    binds: binds), logger: logger
            ).collect()
        }
        let until = date(leaseUntil)
        // In descending index order: taken off the end, each moved, in ascending order.
        var notes = try await chunkItems(connection, tenant: tenant, job: job, rows: rows, logger: logger)
        while let (index, note) = notes.popLast() {
            items.append(
                JobItem(job: job, index: index, notification: note, state: .pending, result: nil, claimant: claimant, leaseUntil: until))
        }
    }

    /// The job's items in `low ..< end` without a `job_item` row, in descending index order,
    /// from the slices of their chunks' arrays (one row a chunk, its arrays cut to the bounds,
    /// with the indexes of its items that have a row, left out, and its payloads). With `claim`
    /// the same statement first leases `low ..< end` as a claim range to its claimant until its
    /// time (Unix milliseconds) and moves the job's frontier to `end` (``ClaimRangeText``).
    static func chunkItemsWithoutRows(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, low: Int32, end: Int32,
        claim: (claimant: String, until: Int64)? = nil, logger: Logger
    ) async throws -> [(Int, HeraldCore.Notification)] {
        let rows =
            if let claim {
                try await connection.prepared(
                    ClaimRangeText.self, tenant.rawValue, job.rawValue, low, end, claim.claimant, claim.until, logger: logger)
            } else {
                try await connection.prepared(ChunkSlicesText.self, tenant.rawValue, job.rawValue, low, end, logger: logger)
            }
        return try sliceItems(rows, from: 0, job: job)
    }

    /// The items without a row in the chunk slices of `rows` (``chunkSlices``' columns from
    /// `column` on), with their payloads, in descending index order.
    static func sliceItems(_ rows: [PostgresRow], from column: Int, job: JobID) throws -> [(Int, HeraldCore.Notification)] {
        var notes: [(Int, HeraldCore.Notification)] = []
        // The rows are in index order: read from the last, each slice from its end, so that the
        // notifications come out in descending index order, each built once with its payload.
        for row in rows.reversed() {
            let cells = row.makeRandomAccess()
            // The array in the slice's `offset`th column.
            func array<Element: PostgresArrayElement>(_ offset: Int) throws -> [Element] {
                try cells[column + offset].decode(PostgresArray<Element>.self).elements
            }
            let first: Int
            let tokens: [TokenBytes], topics: [String], pushTypes: [String], collapseIDs: [String], apnsIDs: [UUID]
            let priorities: [Int32], expirations: [Int64], refs: [Int32], nulls: [Int16], rowed: [Int32]
            let payloadIDs: [Int32], payloadBytes: [PayloadBytes]
            do {
                first = try cells[column].decode(Int.self)
                (tokens, topics, pushTypes) = (try array(1), try array(2), try array(3))
                (priorities, expirations, collapseIDs, apnsIDs) = (try array(4), try array(5), try array(6), try array(7))
                (refs, nulls, rowed) = (try array(8), try array(9), try array(10))
                (payloadIDs, payloadBytes) = (try array(11), try array(12))
            } catch {
                throw StoreError.corrupt("job chunk of job \(job) unreadable")
            }
            let count = tokens.count
            guard [topics.count, pushTypes.count, priorities.count, expirations.count, collapseIDs.count, apnsIDs.count,
                   refs.count, nulls.count].allSatisfy({ $0 == count }), payloadIDs.count == payloadBytes.count
            else { throw StoreError.corrupt("job chunk of job \(job) with arrays of different lengths") }
            // A slice's row carries the payloads its items refer to; the one used last is kept at
            // hand (items that share a payload are stored in a run).
            var payloads: [Int32: [UInt8]] = [:]
            for (id, bytes) in zip(payloadIDs, payloadBytes) where payloads[id] == nil { payloads[id] = bytes.bytes }
            var last: (ref: Int32, payload: [UInt8])? = nil
            // The rowed indexes come in no order; they are few, if any.
            let skipped = Set(rowed.lazy.map { Int($0) - first })
            notes.reserveCapacity(notes.count + count)
            for k in (0..<count).reversed() where skipped.isEmpty || !skipped.contains(k) {
                let payload: [UInt8]
                if let last, last.ref == refs[k] {
                    payload = last.payload
                } else {
                    guard let found = payloads[refs[k]] else {
                        throw StoreError.corrupt("job \(job) lacks the payload of item \(first + k)")
                    }
                    payload = found
                    last = (refs[k], found)
                }
                let missing = nulls[k]
                func has(_ field: MissingField) -> Bool { missing & field.rawValue == 0 }
                notes.append((
                    first + k,
                    try chunkNotification(
                        token: tokens[k].token, topic: has(.topic) ? topics[k] : nil, pushType: pushTypes[k],
                        priority: has(.priority) ? Int(priorities[k]) : nil,
                        expiration: has(.expiration) ? expirations[k] : nil,
                        collapseID: has(.collapseID) ? collapseIDs[k] : nil, apnsID: NotificationID(words: apnsIDs[k].words),
                        payload: payload)
                ))
            }
        }
        return notes
    }

    /// One chunk item's notification, with `payload` (empty when it is to be attached later:
    /// ``withPayloads``).
    static func chunkNotification(
        token: DeviceToken, topic: String?, pushType: String, priority: Int?, expiration: Int64?, collapseID: String?,
        apnsID: NotificationID, payload: [UInt8] = []
    ) throws -> HeraldCore.Notification {
        guard let pushType = PushType(rawValue: pushType) else {
            throw StoreError.corrupt("job chunk with an invalid push type")
        }
        return HeraldCore.Notification(
            deviceToken: token, topic: topic, pushType: pushType, priority: priority.flatMap(Priority.init(rawValue:)),
            expiration: expiration.map { $0 == 0 ? .immediately : .at(UInt32(clamping: $0)) },
            collapseID: collapseID, id: apnsID, payload: payload)
    }

    /// Notifications from ``chunkItemColumns`` rows, their payloads read once each, in the
    /// reverse order of the rows.
    static func chunkItems(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, rows: [PostgresRow], logger: Logger
    ) async throws -> [(Int, HeraldCore.Notification)] {
        var decoded: [(Int, HeraldCore.Notification, Int32)] = []
        decoded.reserveCapacity(rows.count)
        for row in rows {
            let cells = row.makeRandomAccess()
            let notification: HeraldCore.Notification
            do {
                notification = try chunkNotification(
                    token: try cells[1].decode(TokenBytes.self).token, topic: try cells[2].decode(String?.self),
                    pushType: try cells[3].decode(String.self), priority: try cells[4].decode(Int?.self),
                    expiration: try cells[5].decode(Int64?.self), collapseID: try cells[6].decode(String?.self),
                    apnsID: NotificationID(words: try cells[7].decode(UUID.self).words))
            } catch let error as StoreError {
                throw error
            } catch {
                throw StoreError.corrupt("job chunk of job \(job) unreadable")
            }
            decoded.append((try cells[0].decode(Int.self), notification, try cells[8].decode(Int32.self)))
        }
        return try await withPayloads(connection, tenant: tenant, job: job, decoded, logger: logger)
    }

    /// The notifications with their payloads (`job_payload`), each payload read once, in the
    /// reverse order of `decoded`.
    static func withPayloads(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, _ decoded: consuming [(Int, HeraldCore.Notification, Int32)],
        logger: Logger
    ) async throws -> [(Int, HeraldCore.Notification)] {
        let refs = PostgresArray(Array(Set(decoded.map(\.2))))
        var payloads: [Int32: [UInt8]] = [:]
        if !refs.isEmpty {
            for row in try await connection.prepared(PayloadsText.self, tenant.rawValue, job.rawValue, refs, logger: logger) {
                let cells = row.makeRandomAccess()
                payloads[try cells[0].decode(Int32.self)] = Array(buffer: try cells[1].decode(ByteBuffer.self))
            }
        }
        return try attach(payloads, to: decoded, job: job)
    }

    /// The notifications of `decoded` with their payloads from `payloads` (by reference), in
    /// the reverse order of `decoded`; a payload missing is a corrupt job.
    static func attach(
        _ payloads: [Int32: [UInt8]], to decoded: consuming [(Int, HeraldCore.Notification, Int32)], job: JobID
    ) throws -> [(Int, HeraldCore.Notification)] {
        var decoded = decoded
        // Each notification moved, not copied (a copy retains every string and array it holds):
        // taken off the end, so the result is in the reverse order.
        var notes: [(Int, HeraldCore.Notification)] = []
        notes.reserveCapacity(decoded.count)
        while let (index, notification, ref) = decoded.popLast() {
            guard let payload = payloads[ref] else { throw StoreError.corrupt("job \(job) lacks the payload of item \(index)") }
            var filled = notification
            filled.payload = payload
            notes.append((index, filled))
        }
        return notes
    }

    // MARK: Plain successes

    /// The plain success records of items in `low ..< high`: attempts, finish time, apns-id.
    /// A record's apns-ids are text or `uuid` (``recordSentUUIDsFunction``): it is read whole and
    /// its indexes outside the bounds are skipped.
    static func sentRecords(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, low: Int, high: Int, logger: Logger
    ) async throws -> [Int: (attempts: Int, finished: Int64, apnsID: NotificationID?)] {
        guard low < high else { return [:] }
        let (a, b) = (Int32(clamping: low >> sentBlockShift), Int32(clamping: (high - 1) >> sentBlockShift))
        var records: [Int: (attempts: Int, finished: Int64, apnsID: NotificationID?)] = [:]
        for row in try await connection.query(
            """
            SELECT s.idxs, s.attempts, s.finished_ms, s.apns_ids, s.apns_uuids FROM job_sent s
            WHERE s.tenant = \(tenant.rawValue) AND s.job_id = \(job.rawValue) AND s.block BETWEEN \(a) AND \(b)
              AND s.idxs[1] < \(Int32(clamping: high)) AND s.idxs[cardinality(s.idxs)] >= \(Int32(clamping: low))
            ORDER BY s.block, s.id
            """, logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            let indexes = try cells[0].decode(PostgresArray<Int32>.self).elements
            let attempts = try cells[1].decode(PostgresArray<Int32>.self).elements
            let finished = try cells[2].decode(PostgresArray<Int64>.self).elements
            let texts = try cells[3].decode(PostgresArray<String>?.self)?.elements
            let uuids = try cells[4].decode(PostgresArray<UUID>?.self)?.elements
            guard attempts.count == indexes.count, finished.count == indexes.count,
                (texts?.count ?? uuids?.count) == indexes.count, (texts == nil) != (uuids == nil)
            else { throw StoreError.corrupt("a job_sent record of job \(job) with arrays of different lengths, or its apns-ids in both forms or neither") }
            for k in indexes.indices {
                let index = Int(indexes[k])
                // The first record of an index is its outcome (a later one is never written).
                guard low <= index, index < high, records[index] == nil else { continue }
                // Text: '' stands for none.
                let apnsID = uuids.map { NotificationID(words: $0[k].words) } ?? texts.flatMap { try? NotificationID($0[k]) }
                records[index] = (Int(attempts[k]), finished[k], apnsID)
            }
        }
        return records
    }

    /// Writes plain successes of one job as `job_sent` rows (one a block) and counts them in
    /// `job_outcome`, in one statement.
    static func insertSent(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, _ writes: [ResultWrite], logger: Logger
    ) async throws {
        guard !writes.isEmpty else { return }
        var blocks = PostgresArray<Int32>(capacity: writes.count)
        var indexes = PostgresArray<Int32>(capacity: writes.count)
        var attempts = PostgresArray<Int32>(capacity: writes.count)
        var finished = PostgresArray<Int64>(capacity: writes.count)
        var apnsIDs = PostgresArray<String>(capacity: writes.count)
        for write in writes.sorted(by: { $0.index < $1.index }) {
            blocks.append(Int32(clamping: write.index >> sentBlockShift))
            indexes.append(Int32(clamping: write.index))
            attempts.append(count(write.result.attempts))
            finished.append(millis(write.result.finishedAt))
            // An apns-id is a UUID, never empty: '' stands for none.
            apnsIDs.append(write.result.apnsID?.rawValue ?? "")
        }
        var binds = PostgresBindings(capacity: 7)
        binds.append(tenant.rawValue)
        binds.append(job.rawValue)
        binds.append(blocks)
        binds.append(indexes)
        binds.append(attempts)
        binds.append(finished)
        binds.append(apnsIDs)
        try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    WITH sent AS (
                        INSERT INTO job_sent (tenant, job_id, block, idxs, attempts, finished_ms, apns_ids)
                        SELECT $1, $2, u.block, array_agg(u.idx ORDER BY u.idx), array_agg(u.attempts ORDER BY u.idx),
                               array_agg(u.finished ORDER BY u.idx), array_agg(u.apns_id ORDER BY u.idx)
                        FROM unnest($3::int[], $4::int[], $5::int[], $6::bigint[], $7::text[])
                             AS u(block, idx, attempts, finished, apns_id)
                        GROUP BY u.block
                    )
                    INSERT INTO job_outcome AS o (tenant, job_id, state, status, reason, n)
                    VALUES ($1, $2, 'sent', 200, NULL, cardinality($4::int[]))
                    ON CONFLICT (tenant, job_id, state, status, reason) DO UPDATE SET n = o.n + excluded.n
                    """, binds: binds), logger: logger)
    }

    // MARK: A claim in one call

    /// The function (migration `v15.4-pg-claim-in-one-call`) that opens a claim
    /// (``PostgresPushStore/claimPendingItems(tenant:job:limit:claimant:now:leaseUntil:fromIndex:)``):
    /// the job's claim lock; its item lock, exclusive when another claimant's range has expired
    /// (to be taken over), shared otherwise; the job's frontier and item count, read after the
    /// locks. With nothing to take over it goes on: the claimable rows (``claimableItems``,
    /// locked) and, while they leave room under `p_limit`, the claimant's own ranges from
    /// `p_from` on, leased again (``ownRanges``). Each statement of a PL/pgSQL function takes its
    /// own snapshot, so the reads after a lock see what the lock waited for, as separate
    /// statements would.
    ///
    /// With `p_range`, when that leaves the whole claim to the frontier (no row picked, no own
    /// range, `p_from` not above the frontier) it also claims it: the frontier moved, the next
    /// `p_limit` items leased as one claim range, and their chunk slices returned
    /// (``chunkSlices``), one row a chunk. That is a running batch's every claim, in one round
    /// trip and one commit, called on its own: whatever else it did before it answers (a lock
    /// taken, rows picked, own ranges leased again) is undone by the commit or harmless, and the
    /// caller opens the claim again in a transaction of its own.
    ///
    /// `o_state`: 0 when the job is gone, finished or cancelled (nothing else is read); 2 when a
    /// range is to be taken over (the rows and own ranges are left to the caller, after the
    /// takeover); 3 when the range was claimed (the rows carry its slices); 1 otherwise. The
    /// columns from `o_first` on are a slice's (NULL in the one row of states 0 to 2).
    static let claimFunction = """
        CREATE FUNCTION herald_claim(
            p_tenant TEXT, p_job TEXT, p_claimant TEXT, p_now BIGINT, p_from INTEGER, p_limit BIGINT, p_lease_until BIGINT,
            p_range BOOLEAN
        ) RETURNS TABLE (
            o_state INTEGER, o_frontier INTEGER, o_count INTEGER, o_picked INTEGER[], o_own_firsts INTEGER[],
            o_own_ends INTEGER[], o_first INTEGER, o_tokens BYTEA[], o_topics TEXT[], o_push_types TEXT[],
            o_priorities INTEGER[], o_expirations BIGINT[], o_collapse_ids TEXT[], o_apns_ids UUID[],
            o_payload_refs INTEGER[], o_nulls SMALLINT[], o_rowed INTEGER[], o_payload_ids INTEGER[], o_payloads BYTEA[]
        ) LANGUAGE plpgsql AS $body$
        DECLARE
            v_key INTEGER := hashtext(current_schema() || '/' || p_tenant || '/' || p_job);
            v_expired BOOLEAN;
            v_runnable BOOLEAN;
            v_state INTEGER;
            v_frontier INTEGER;
            v_count INTEGER;
            v_end INTEGER;
            v_picked INTEGER[] := '{}';
            v_own_firsts INTEGER[] := '{}';
            v_own_ends INTEGER[] := '{}';
        BEGIN
            PERFORM pg_advisory_xact_lock(\(claimLockNamespace), v_key);
            v_expired := EXISTS (
                SELECT 1 FROM job_claim_range r
                WHERE r.tenant = p_tenant AND r.job_id = p_job AND r.claimant <> p_claimant AND r.lease_until_ms <= p_now);
            IF v_expired THEN
                PERFORM pg_advisory_xact_lock(\(itemLockNamespace), v_key);
            ELSE
                PERFORM pg_advisory_xact_lock_shared(\(itemLockNamespace), v_key);
            END IF;
            SELECT j.materialized, j.item_count, j.state IN ('accepted', 'running') INTO v_frontier, v_count, v_runnable
            FROM job j WHERE j.tenant = p_tenant AND j.id = p_job;
            IF NOT FOUND OR NOT v_runnable THEN
                v_state := 0;
            ELSIF v_expired THEN
                v_state := 2;
            ELSE
                v_state := 1;
                v_picked := ARRAY(
                    \(claimableItems(
                        tenant: "p_tenant", job: "p_job", claimant: "p_claimant", now: "p_now", from: "p_from", limit: "p_limit")));
                IF cardinality(v_picked) < p_limit THEN
                    WITH own AS (
                        \(ownRanges(tenant: "p_tenant", job: "p_job", claimant: "p_claimant", from: "p_from", leaseUntil: "p_lease_until"))
                        RETURNING first_idx, end_idx
                    )
                    SELECT coalesce(array_agg(own.first_idx ORDER BY own.first_idx), '{}'),
                           coalesce(array_agg(own.end_idx ORDER BY own.first_idx), '{}')
                    INTO v_own_firsts, v_own_ends FROM own;
                END IF;
                IF p_range AND cardinality(v_picked) = 0 AND cardinality(v_own_firsts) = 0 AND p_from <= v_frontier
                   AND v_frontier < v_count AND p_limit > 0 THEN
                    v_end := least(v_count::bigint, v_frontier + p_limit)::int;
                    UPDATE job SET materialized = v_end WHERE tenant = p_tenant AND id = p_job;
                    INSERT INTO job_claim_range (tenant, job_id, first_idx, end_idx, claimant, lease_until_ms)
                    VALUES (p_tenant, p_job, v_frontier, v_end, p_claimant, p_lease_until);
                    RETURN QUERY \(chunkSlices(
                        tenant: "p_tenant", job: "p_job", low: "v_frontier", end: "v_end",
                        leading: "3, v_frontier, v_count, v_picked, v_own_firsts, v_own_ends"));
                    RETURN;
                END IF;
            END IF;
            RETURN QUERY SELECT v_state, v_frontier, v_count, v_picked, v_own_firsts, v_own_ends, NULL::int, NULL::bytea[],
                NULL::text[], NULL::text[], NULL::int[], NULL::bigint[], NULL::text[], NULL::uuid[], NULL::int[],
                NULL::smallint[], NULL::int[], NULL::int[], NULL::bytea[];
        END
        $body$
        """

    // MARK: A group of plain successes in one call

    /// The function (migration `v15.2-pg-record-sent-in-three-statements`) that records a commit
    /// group of plain successes as ``applyChanges(_:tenant:job:outcomes:retries:logger:)`` would,
    /// in one call: its arrays in ascending index order, each index once
    /// (``recordPlainSuccesses``), the apns-ids as text. Three statements: the shared item lock;
    /// the job's presence and whether any of the group's items has a row or a record already; the
    /// records with their count. Each statement costs PL/pgSQL a plan lookup and an executor
    /// start, more than the checks themselves, so the bounds come from the sorted array's ends and
    /// the checks share one statement.
    static let recordSentFunction = recordSentFunction(
        create: "CREATE OR REPLACE FUNCTION herald_record_sent", apnsIDs: "p_apns_ids TEXT[]", column: "apns_ids")

    /// The same function for groups whose every item has its apns-id, which it takes and keeps
    /// as `uuid[]` (migration `v15.3-pg-ids-as-bytes`): 16 bytes an id, which the server
    /// takes in without checking text, against 36 characters each checked.
    static let recordSentUUIDsFunction = recordSentFunction(
        create: "CREATE FUNCTION herald_record_sent_uuids", apnsIDs: "p_apns_ids UUID[]", column: "apns_uuids")

    /// The text of ``recordSentFunction`` (`create` names it), its apns-ids taken as `apnsIDs`
    /// and kept in `job_sent.<column>`.
    private static func recordSentFunction(create: String, apnsIDs: String, column: String) -> String {
        """
        \(create)(
            p_tenant TEXT, p_job TEXT, p_idxs INTEGER[], p_attempts INTEGER[], p_finished BIGINT[],
            \(apnsIDs)
        ) RETURNS INTEGER LANGUAGE plpgsql AS $body$
        DECLARE
            v_low INTEGER := p_idxs[1];
            v_high INTEGER := p_idxs[cardinality(p_idxs)];
            v_job BOOLEAN;
            v_taken BOOLEAN;
        BEGIN
            -- Before the job is read: its delete and cancel take this lock exclusively.
            PERFORM pg_advisory_xact_lock_shared(\(PostgresPushStore.itemLockNamespace),
                hashtext(current_schema() || '/' || p_tenant || '/' || p_job));
            -- A record's indexes are sorted: one that cannot hold the group's is not unnested.
            SELECT EXISTS (SELECT 1 FROM job WHERE tenant = p_tenant AND id = p_job),
                EXISTS (SELECT 1 FROM job_item
                    WHERE tenant = p_tenant AND job_id = p_job AND idx BETWEEN v_low AND v_high AND idx = ANY(p_idxs))
                OR EXISTS (SELECT 1 FROM job_sent s, unnest(s.idxs) AS x
                    WHERE s.tenant = p_tenant AND s.job_id = p_job
                      AND s.block BETWEEN v_low >> \(PostgresPushStore.sentBlockShift) AND v_high >> \(PostgresPushStore.sentBlockShift)
                      AND s.idxs[1] <= v_high AND s.idxs[cardinality(s.idxs)] >= v_low
                      AND x BETWEEN v_low AND v_high AND x = ANY(p_idxs))
                INTO v_job, v_taken;
            IF NOT v_job THEN
                RETURN NULL;
            END IF;
            IF v_low IS NULL THEN
                RETURN 0;
            END IF;
            IF v_taken THEN
                RETURN -1;
            END IF;
            IF v_low >> \(PostgresPushStore.sentBlockShift) = v_high >> \(PostgresPushStore.sentBlockShift) THEN
                -- One block (most groups): the arrays as given, in ascending index order.
                WITH sent AS (
                    INSERT INTO job_sent (tenant, job_id, block, idxs, attempts, finished_ms, \(column))
                    VALUES (p_tenant, p_job, v_low >> \(PostgresPushStore.sentBlockShift), p_idxs, p_attempts, p_finished, p_apns_ids)
                )
                INSERT INTO job_outcome AS o (tenant, job_id, state, status, reason, n)
                    VALUES (p_tenant, p_job, 'sent', 200, NULL, cardinality(p_idxs))
                    ON CONFLICT (tenant, job_id, state, status, reason) DO UPDATE SET n = o.n + excluded.n;
            ELSE
                WITH sent AS (
                    INSERT INTO job_sent (tenant, job_id, block, idxs, attempts, finished_ms, \(column))
                    SELECT p_tenant, p_job, u.idx >> \(PostgresPushStore.sentBlockShift), array_agg(u.idx ORDER BY u.idx),
                           array_agg(u.attempts ORDER BY u.idx), array_agg(u.finished ORDER BY u.idx),
                           array_agg(u.apns_id ORDER BY u.idx)
                    FROM unnest(p_idxs, p_attempts, p_finished, p_apns_ids) AS u(idx, attempts, finished, apns_id)
                    GROUP BY u.idx >> \(PostgresPushStore.sentBlockShift)
                )
                INSERT INTO job_outcome AS o (tenant, job_id, state, status, reason, n)
                    VALUES (p_tenant, p_job, 'sent', 200, NULL, cardinality(p_idxs))
                    ON CONFLICT (tenant, job_id, state, status, reason) DO UPDATE SET n = o.n + excluded.n;
            END IF;
            RETURN cardinality(p_idxs);
        END
        $body$
        """
    }

    /// `herald_record_sent` as migration `v15.1-pg-record-sent` created it (a migration is
    /// never edited); ``recordSentFunction`` replaces it.
    static let recordSentFunctionFirst = """
    CREATE FUNCTION herald_record_sent(
        p_tenant TEXT, p_job TEXT, p_idxs INTEGER[], p_attempts INTEGER[], p_finished BIGINT[],
        p_apns_ids TEXT[]
    ) RETURNS INTEGER LANGUAGE plpgsql AS $body$
    DECLARE
        v_low INTEGER;
        v_high INTEGER;
        v_sent BOOLEAN;
    BEGIN
        PERFORM pg_advisory_xact_lock_shared(\(PostgresPushStore.itemLockNamespace),
            hashtext(current_schema() || '/' || p_tenant || '/' || p_job));
        PERFORM 1 FROM job WHERE tenant = p_tenant AND id = p_job;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        SELECT min(x), max(x) INTO v_low, v_high FROM unnest(p_idxs) AS x;
        IF v_low IS NULL THEN
            RETURN 0;
        END IF;
        PERFORM 1 FROM job_item
            WHERE tenant = p_tenant AND job_id = p_job AND idx BETWEEN v_low AND v_high AND idx = ANY(p_idxs)
            LIMIT 1;
        IF FOUND THEN
            RETURN -1;
        END IF;
        -- A record's indexes are sorted: one that cannot hold the group's is not unnested.
        SELECT EXISTS (SELECT 1 FROM job_sent s, unnest(s.idxs) AS x
            WHERE s.tenant = p_tenant AND s.job_id = p_job
              AND s.block BETWEEN v_low >> \(PostgresPushStore.sentBlockShift) AND v_high >> \(PostgresPushStore.sentBlockShift)
              AND s.idxs[1] <= v_high AND s.idxs[cardinality(s.idxs)] >= v_low
              AND x BETWEEN v_low AND v_high AND x = ANY(p_idxs))
            INTO v_sent;
        IF v_sent THEN
            RETURN -1;
        END IF;
        IF v_low >> \(PostgresPushStore.sentBlockShift) = v_high >> \(PostgresPushStore.sentBlockShift) THEN
            -- One block (most groups): the arrays as given, in ascending index order.
            INSERT INTO job_sent (tenant, job_id, block, idxs, attempts, finished_ms, apns_ids)
                VALUES (p_tenant, p_job, v_low >> \(PostgresPushStore.sentBlockShift), p_idxs, p_attempts, p_finished, p_apns_ids);
        ELSE
            INSERT INTO job_sent (tenant, job_id, block, idxs, attempts, finished_ms, apns_ids)
                SELECT p_tenant, p_job, u.idx >> \(PostgresPushStore.sentBlockShift), array_agg(u.idx ORDER BY u.idx),
                       array_agg(u.attempts ORDER BY u.idx), array_agg(u.finished ORDER BY u.idx),
                       array_agg(u.apns_id ORDER BY u.idx)
                FROM unnest(p_idxs, p_attempts, p_finished, p_apns_ids) AS u(idx, attempts, finished, apns_id)
                GROUP BY u.idx >> \(PostgresPushStore.sentBlockShift);
        END IF;
        INSERT INTO job_outcome AS o (tenant, job_id, state, status, reason, n)
            VALUES (p_tenant, p_job, 'sent', 200, NULL, cardinality(p_idxs))
            ON CONFLICT (tenant, job_id, state, status, reason) DO UPDATE SET n = o.n + excluded.n;
        RETURN cardinality(p_idxs);
    END
    $body$
    """

    /// Records one job's commit group through `herald_record_sent_uuids` (or `herald_record_sent`
    /// when one of its items has no apns-id) when it is all plain successes
    /// (``isPlainSuccess(_:)``, each index once): one call, committed on its own. The function
    /// takes the indexes in ascending order.
    /// - Returns: the indexes written (none when the job is gone); nil when the group is not all
    ///   plain successes or one of its items has a row or a record already, and nothing was
    ///   written: the general path decides.
    static func recordPlainSuccesses(
        _ client: BoundedPostgresClient, tenant: TenantID, job: JobID, _ writes: [ResultWrite], logger: Logger
    ) async throws -> Set<Int>? {
        guard !writes.isEmpty, writes.allSatisfy({ isPlainSuccess($0.result) }) else { return nil }
        var indexes = PostgresArray<Int32>(capacity: writes.count)
        var attempts = PostgresArray<Int32>(capacity: writes.count)
        var finished = PostgresArray<Int64>(capacity: writes.count)
        var uuids = PostgresArray<UUID>(capacity: writes.count)
        // In index order, each write read in place (a sorted copy would copy every result).
        let order = writes.indices.sorted(by: { writes[$0].index < writes[$1].index })
        for position in order {
            indexes.append(Int32(clamping: writes[position].index))
            attempts.append(count(writes[position].result.attempts))
            finished.append(millis(writes[position].result.finishedAt))
            if let words = writes[position].result.apnsID?.words { uuids.append(UUID(words)) }
        }
        let rows: [PostgresRow]
        if uuids.count == writes.count {
            rows = try await client.execute(
                Prepared<RecordSentUUIDsText>(tenant.rawValue, job.rawValue, indexes, attempts, finished, uuids),
                logger: logger)
        } else {
            // An apns-id is a UUID, never empty: '' stands for none.
            let texts = PostgresArray(order.map { writes[$0].result.apnsID?.rawValue ?? "" })
            rows = try await client.execute(
                Prepared<RecordSentText>(tenant.rawValue, job.rawValue, indexes, attempts, finished, texts), logger: logger)
        }
        guard let row = rows.first else { throw StoreError.corrupt("herald_record_sent answered no row") }
        guard let answer = try row.makeRandomAccess()[0].decode(Int32?.self) else { return [] }
        return answer < 0 ? nil : Set(writes.map(\.index))
    }

    // MARK: Outcomes and retries of one job

    /// Records one job's outcomes (the first for an index wins) and retries in the caller's
    /// transaction: plain successes of items without a row as `job_sent` records, everything
    /// else on the item's row (made first where it has none). Items already decided keep their
    /// outcome. - Returns: the indexes whose outcome or retry was written.
    static func applyChanges(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, outcomes: [ResultWrite],
        retries: [Int: JobItemRetry], logger: Logger
    ) async throws -> Set<Int> {
        guard
            try await lockJob(connection, tenant: tenant, job: job, runnable: false, exclusive: false, logger: logger) != nil
        else { return [] }
        let named = outcomes.map(\.index) + retries.keys
        let wanted = named.map { Int32(clamping: $0) }
        let blocks = Array(Set(named.map { Int32(clamping: $0 >> sentBlockShift) }))
        // The named items with a row (true), and those a plain success record holds (false).
        var rowed = Set<Int>()
        var sent = Set<Int>()
        for row in try await connection.query(
            """
            SELECT idx, true FROM job_item
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND idx = ANY(\(wanted))
            UNION ALL
            SELECT x, false FROM job_sent s, unnest(s.idxs) AS x
            WHERE s.tenant = \(tenant.rawValue) AND s.job_id = \(job.rawValue) AND s.block = ANY(\(blocks)) AND x = ANY(\(wanted))
            """, logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            let index = try cells[0].decode(Int.self)
            if try cells[1].decode(Bool.self) { rowed.insert(index) } else { sent.insert(index) }
        }
        // A row decides for its item.
        sent.subtract(rowed)
        var plain: [ResultWrite] = []
        var others: [ResultWrite] = []
        for outcome in outcomes where !sent.contains(outcome.index) {
            if !rowed.contains(outcome.index), isPlainSuccess(outcome.result) {
                plain.append(outcome)
            } else {
                others.append(outcome)
            }
        }
        let deferred = retries.filter { !sent.contains($0.key) }
        let needRows = (others.map(\.index) + deferred.keys).filter { !rowed.contains($0) }
        try await ensureRows(connection, tenant: tenant, job: job, indexes: needRows, logger: logger)
        var written = Set(plain.map(\.index))
        try await insertSent(connection, tenant: tenant, job: job, plain, logger: logger)
        if !others.isEmpty {
            for row in try await connection.query(updateResults(others), logger: logger).collect() {
                written.insert(try row.makeRandomAccess()[2].decode(Int.self))
            }
        }
        if !deferred.isEmpty {
            for row in try await connection.query(deferItems(tenant: tenant, job: job, deferred), logger: logger).collect() {
                written.insert(try row.makeRandomAccess()[0].decode(Int.self))
            }
        }
        return written
    }
}

// MARK: The claim's statements, prepared

extension PostgresPushStore {
    /// Takes an advisory lock (a namespace and a key, as
    /// ``lockJob(_:tenant:job:runnable:exclusive:logger:)`` and ``claimFunction`` do) until
    /// the transaction ends.
    enum ExclusiveLockText: PreparedText {
        static let name = "herald_lock"
        static let sql = "SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2))"
        static let types: [PostgresDataType] = [.int4, .text]
    }

    /// ``ExclusiveLockText``, shared.
    enum SharedLockText: PreparedText {
        static let name = "herald_lock_shared"
        static let sql = "SELECT pg_advisory_xact_lock_shared($1, hashtext(current_schema() || '/' || $2))"
        static let types: [PostgresDataType] = [.int4, .text]
    }

    /// A job's frontier, item count and whether it runs.
    enum JobFrontierText: PreparedText {
        static let name = "herald_job_frontier"
        static let sql = """
            SELECT materialized, item_count, state IN ('accepted', 'running') FROM job WHERE tenant = $1 AND id = $2
            """
        static let types: [PostgresDataType] = [.text, .text]
    }

    /// A claim (``claimFunction``): tenant, job, claimant, now, from, limit, lease end, and
    /// whether to claim the range when nothing else is to be claimed first.
    enum ClaimText: PreparedText {
        static let name = "herald_claim_call"
        static let sql = "SELECT * FROM herald_claim($1, $2, $3, $4, $5, $6, $7, $8)"
        static let types: [PostgresDataType] = [.text, .text, .text, .int8, .int4, .int8, .int8, .bool]
    }

    /// Moves a job's frontier to `$1`.
    enum FrontierMoveText: PreparedText {
        static let name = "herald_frontier_move"
        static let sql = "UPDATE job SET materialized = $1 WHERE tenant = $2 AND id = $3"
        static let types: [PostgresDataType] = [.int4, .text, .text]
    }

    /// The claimant's (`$4`) ranges of the job from index `$5` on, leased again until `$1`: the
    /// last one starting at or before `$5` (a primary-key read backwards) and those after it.
    enum OwnRangesText: PreparedText {
        static let name = "herald_own_ranges"
        static let sql = "\(ownRanges(tenant: "$2", job: "$3", claimant: "$4", from: "$5", leaseUntil: "$1")) RETURNING first_idx, end_idx"
        static let types: [PostgresDataType] = [.int8, .text, .text, .text, .int4]
    }

    /// The UPDATE of ``OwnRangesText`` (without its RETURNING) over the given expressions, which
    /// ``claimFunction`` runs too.
    static func ownRanges(tenant: String, job: String, claimant: String, from: String, leaseUntil: String) -> String {
        """
        UPDATE job_claim_range SET lease_until_ms = \(leaseUntil)
        WHERE tenant = \(tenant) AND job_id = \(job) AND claimant = \(claimant) AND end_idx > \(from)
          AND first_idx >= coalesce(
              (SELECT first_idx FROM job_claim_range WHERE tenant = \(tenant) AND job_id = \(job) AND claimant = \(claimant)
                 AND first_idx <= \(from)
               ORDER BY first_idx DESC LIMIT 1), \(from))
        """
    }

    /// The job's chunks over `$3 ..< $4`, their arrays cut to those bounds, one row a chunk with
    /// its first index in the cut, the indexes of its items there with a `job_item` row, and the
    /// payloads its items there refer to, ids and bytes
    /// (``chunkItemsWithoutRows(_:tenant:job:low:end:claim:logger:)``).
    enum ChunkSlicesText: PreparedText {
        static let name = "herald_chunk_slices"
        static let sql = PostgresPushStore.chunkSlices
        static let types: [PostgresDataType] = [.text, .text, .int4, .int4]
    }

    /// ``ChunkSlicesText`` of a new claim range, which the statement writes first: the job's
    /// frontier moved to the range's end `$4`, and the range leased to `$5` until `$6`. One round
    /// trip for what a claim from the frontier does; the read's snapshot is the statement's, and
    /// neither write changes what it reads.
    enum ClaimRangeText: PreparedText {
        static let name = "herald_claim_range"
        static let sql = """
            WITH moved AS (
                UPDATE job SET materialized = $4 WHERE tenant = $1 AND id = $2 AND materialized < $4
            ), leased AS (
                INSERT INTO job_claim_range (tenant, job_id, first_idx, end_idx, claimant, lease_until_ms)
                VALUES ($1, $2, $3, $4, $5, $6)
            )
            \(PostgresPushStore.chunkSlices)
            """
        static let types: [PostgresDataType] = [.text, .text, .int4, .int4, .text, .int8]
    }

    /// The read of ``ChunkSlicesText``, over `$1 … $4`.
    static let chunkSlices = chunkSlices(tenant: "$1", job: "$2", low: "$3", end: "$4")

    /// The read of ``ChunkSlicesText`` over the given expressions (`low ..< end`), each row led
    /// by `leading`'s columns (``claimFunction`` returns it so).
    static func chunkSlices(tenant: String, job: String, low: String, end: String, leading: String? = nil) -> String {
        """
        SELECT \(leading.map { $0 + ", " } ?? "")c.first_idx + s.lo - 1, \(PostgresPushStore.chunkTokens), c.topics[s.lo:s.hi],
               c.push_types[s.lo:s.hi], c.priorities[s.lo:s.hi], c.expirations[s.lo:s.hi], c.collapse_ids[s.lo:s.hi],
               \(PostgresPushStore.chunkAPNsIDs), c.payload_refs[s.lo:s.hi], c.nulls[s.lo:s.hi],
               ARRAY(SELECT i.idx FROM job_item i WHERE i.tenant = \(tenant) AND i.job_id = \(job)
                       AND i.idx >= c.first_idx + s.lo - 1 AND i.idx < c.first_idx + s.hi),
               p.ids, p.payloads
        FROM job_chunk c
        CROSS JOIN LATERAL (SELECT greatest(\(low) - c.first_idx + 1, 1) AS lo, least(\(end) - c.first_idx, c.count) AS hi) AS s
        CROSS JOIN LATERAL (
            SELECT coalesce(array_agg(jp.id), '{}'::int[]) AS ids, coalesce(array_agg(jp.payload), '{}'::bytea[]) AS payloads
            FROM job_payload jp WHERE jp.tenant = \(tenant) AND jp.job_id = \(job) AND jp.id = ANY(c.payload_refs[s.lo:s.hi])
        ) AS p
        WHERE c.tenant = \(tenant) AND c.job_id = \(job) AND c.first_idx < \(end) AND c.first_idx + c.count > \(low)
          AND c.first_idx >= coalesce(
              (SELECT f.first_idx FROM job_chunk f WHERE f.tenant = \(tenant) AND f.job_id = \(job) AND f.first_idx <= \(low)
               ORDER BY f.first_idx DESC LIMIT 1), \(low))
        ORDER BY c.first_idx
        """
    }

    /// One commit group of plain successes (``recordPlainSuccesses(_:tenant:job:_:logger:)``).
    enum RecordSentText: PreparedText {
        static let name = "herald_record_sent_call"
        static let sql = "SELECT herald_record_sent($1, $2, $3, $4, $5, $6)"
        static let types: [PostgresDataType] = [.text, .text, .int4Array, .int4Array, .int8Array, .textArray]
    }

    /// One commit group of plain successes, every one with its apns-id.
    enum RecordSentUUIDsText: PreparedText {
        static let name = "herald_record_sent_uuids_call"
        static let sql = "SELECT herald_record_sent_uuids($1, $2, $3, $4, $5, $6)"
        static let types: [PostgresDataType] = [.text, .text, .int4Array, .int4Array, .int8Array, .uuidArray]
    }

    /// The job's payloads with the ids in `$3`.
    enum PayloadsText: PreparedText {
        static let name = "herald_payloads"
        static let sql = "SELECT id, payload FROM job_payload WHERE tenant = $1 AND job_id = $2 AND id = ANY($3)"
        static let types: [PostgresDataType] = [.text, .text, .int4Array]
    }
}
