import Foundation
import GRDB
import HeraldCore

// A job's items in the v10 shape (see `ItemChunks.swift`): reading them, claiming them,
// marking them on the wire and recording their changes, each inside the caller's transaction.

/// A stored job as the item tables know it: its integer key and item count.
struct JobRef {
    var tenant: TenantID
    var id: JobID
    var key: Int64
    var count: Int
    /// The job's state when it was looked up (nil: a value this version does not know).
    var state: JobState?

    /// Finished or cancelled: none of its items is claimed or sent any more.
    var isFinal: Bool { state?.isFinal == true }
}

/// An item's own row (`job_item`): an item with more to keep than its chunk, bit and plain
/// success record say.
struct ItemRow {
    var state: JobItemState
    var status: Int?
    var reason: String?
    var message: String?
    var resultID: NotificationID?
    var timestampMillis: Int64?
    var finishedMillis: Int64?
    var attempts: Int
    var firstAttemptMillis: Int64?
    var nextAttemptMillis: Int64?
    var lastError: String?
    var wireMillis: Int64?
    var uniqueID: String?
}

/// One claimant's lease on a job's items (`job_claim`).
struct ClaimRow {
    var claimant: String
    var leaseUntil: Int64
    var entries: [UInt32]
}

/// Values kept one a chunk (keyed by its first index), in the order first asked for; the chunk
/// asked for last is kept at hand, since most calls in a row are for one chunk (no hashing then).
struct ChunkSlots<Value> {
    private(set) var firsts: [Int] = []
    var values: [Value] = []
    private var slots: [Int: Int] = [:]
    private var last: (first: Int, slot: Int)? = nil

    /// The slot of the chunk starting at `first`, its value made by `make` the first time.
    mutating func slot(_ first: Int, make: () throws -> Value) rethrows -> Int {
        if let last, last.first == first { return last.slot }
        let slot: Int
        if let known = slots[first] {
            slot = known
        } else {
            let value = try make()
            slot = values.count
            values.append(value)
            firsts.append(first)
            slots[first] = slot
        }
        last = (first, slot)
        return slot
    }
}

/// Plain successes' `job_sent` records of one write, a list for each chunk.
struct SentRecords {
    private var records = ChunkSlots<[UInt8]>()

    /// Each chunk's first index and its records, in the order first seen.
    var chunks: Zip2Sequence<[Int], [[UInt8]]> { zip(records.firsts, records.values) }

    mutating func append(index: Int, attempts: Int, finishedMillis: Int64, apnsID: NotificationID?) {
        let slot = records.slot(ItemChunks.first(of: index)) { [] }
        ItemChunks.appendSent(
            &records.values[slot], index: index, attempts: attempts, finishedMillis: finishedMillis, apnsID: apnsID)
    }
}

/// The `job_settled` bitmaps of one job, read once per chunk and written back at the end.
struct SettledBits {
    let key: Int64
    private var bitmaps = ChunkSlots<[UInt8]>()
    private var dirty: [Bool] = []

    init(key: Int64) { self.key = key }

    private mutating func slot(_ db: Database, chunk first: Int) throws -> Int {
        let slot = try bitmaps.slot(first) {
            let stored = try Data.fetchOne(
                db.cachedStatement(sql: "SELECT bits FROM job_settled WHERE id = ?"),
                arguments: [ItemChunks.rowID(key: key, first: first)])
            let bits = stored.map { [UInt8]($0) } ?? []
            return bits.count == ItemChunks.settledBytes ? bits : [UInt8](repeating: 0, count: ItemChunks.settledBytes)
        }
        if slot == dirty.count { dirty.append(false) }
        return slot
    }

    mutating func bits(_ db: Database, chunk first: Int) throws -> [UInt8] {
        bitmaps.values[try slot(db, chunk: first)]
    }

    mutating func isSet(_ db: Database, _ index: Int) throws -> Bool {
        let first = ItemChunks.first(of: index)
        return ItemChunks.isSet(bitmaps.values[try slot(db, chunk: first)], index - first)
    }

    mutating func set(_ db: Database, _ index: Int) throws {
        let first = ItemChunks.first(of: index)
        let slot = try slot(db, chunk: first)
        guard !ItemChunks.isSet(bitmaps.values[slot], index - first) else { return }
        // In place: the array's element is changed where it is, never copied out and back.
        ItemChunks.set(&bitmaps.values[slot], index - first)
        dirty[slot] = true
    }

    func write(_ db: Database) throws {
        for slot in bitmaps.values.indices where dirty[slot] {
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO job_settled (id, bits) VALUES (?, ?)").execute(
                arguments: [ItemChunks.rowID(key: key, first: bitmaps.firsts[slot]), Data(bitmaps.values[slot])])
        }
    }
}

extension SQLitePushStore {
    static func jobRef(_ db: Database, tenant: TenantID, id: JobID) throws -> JobRef? {
        try Row.readFirst(
            db.cachedStatement(sql: "SELECT item_key, item_count, state FROM job WHERE tenant = ? AND id = ?"),
            arguments: [tenant.rawValue, id.rawValue]
        ) { row in
            let key: Int64? = row[0]
            guard let key else { throw StoreError.corrupt("job \(id) has no item key") }
            let state: String? = row[2]
            return JobRef(tenant: tenant, id: id, key: key, count: row[1], state: state.flatMap(JobState.init(rawValue:)))
        }
    }

    // MARK: Writing a new job's items

    /// A job's items, in the caller's write transaction: payloads once per run of equal ones
    /// (`job_payload`), the notifications as chunk rows of ``ItemChunks/size`` items.
    static func insertItems(
        _ db: Database, tenant: TenantID, job: JobID, key: Int64, notifications: [HeraldCore.Notification]
    ) throws {
        guard notifications.count <= ItemChunks.maxItems else {
            throw StoreError.invalidArgument("a job holds at most \(ItemChunks.maxItems) items")
        }
        let payloadStatement = try db.makeStatement(
            sql: "INSERT INTO job_payload (tenant, job_id, id, payload) VALUES (?, ?, ?, ?)")
        let chunkStatement = try db.makeStatement(sql: "INSERT INTO job_chunk (id, count, items) VALUES (?, ?, ?)")
        var payloadCount: Int64 = 0
        var lastPayload: [UInt8]? = nil
        // A batch item is admitted here: an item without an apns-id gets its one for every
        // attempt, stored with it (as its 16 bytes, never formatted on the way in).
        var ids = NotificationIDGenerator()
        var start = 0
        while start < notifications.count {
            let end = min(start + ItemChunks.size, notifications.count)
            var encoder = ItemChunks.Encoder(capacity: (end - start) * 64)
            // Each notification read in place (a copy of one retains every string and array it holds).
            for index in start..<end {
                // Equal to the previous one: a shared array compares by identity at once.
                if lastPayload != notifications[index].payload {
                    payloadCount += 1
                    try payloadStatement.execute(arguments: [
                        tenant.rawValue, job.rawValue, payloadCount, Data(notifications[index].payload),
                    ])
                    lastPayload = notifications[index].payload
                }
                try encoder.append(notifications[index], id: notifications[index].id ?? ids.nextID(), payloadRef: payloadCount)
            }
            try chunkStatement.execute(arguments: [
                ItemChunks.rowID(key: key, first: start), end - start, Data(encoder.bytes),
            ])
            start = end
        }
    }

    // MARK: Reading items

    static let itemRowColumns = """
        idx, state, status, reason, message, result_apns_id, apns_timestamp_ms, finished_at_ms, attempts, \
        first_attempt_ms, next_attempt_ms, last_error, wire_at_ms, result_unique_id
        """

    static func itemRow(_ row: Row) throws -> (Int, ItemRow) {
        let raw: String = row[1]
        guard let state = JobItemState(rawValue: raw) else { throw StoreError.corrupt("job item row with an unknown state") }
        let resultID: Data? = row[5]
        return (
            row[0],
            ItemRow(
                state: state, status: row[2], reason: row[3], message: row[4],
                resultID: resultID.flatMap { $0.count == 16 ? ItemChunks.id($0) : nil }, timestampMillis: row[6],
                finishedMillis: row[7], attempts: row[8], firstAttemptMillis: row[9], nextAttemptMillis: row[10],
                lastError: row[11], wireMillis: row[12], uniqueID: row[13])
        )
    }

    /// The item rows of the job with an index in `range`.
    static func itemRows(_ db: Database, key: Int64, range: ClosedRange<Int>) throws -> [Int: ItemRow] {
        var rows: [Int: ItemRow] = [:]
        let cursor = try Row.fetchCursor(
            db.cachedStatement(
                sql: "SELECT \(itemRowColumns) FROM job_item WHERE job_key = ? AND idx BETWEEN ? AND ?"),
            arguments: [key, range.lowerBound, range.upperBound])
        while let row = try cursor.next() {
            let (index, item) = try itemRow(row)
            rows[index] = item
        }
        return rows
    }

    static func itemRow(_ db: Database, key: Int64, index: Int) throws -> ItemRow? {
        try Row.readFirst(
            db.cachedStatement(sql: "SELECT \(itemRowColumns) FROM job_item WHERE job_key = ? AND idx = ?"),
            arguments: [key, index]
        ) { try itemRow($0).1 }
    }

    /// The notifications of the items at `indexes`, in that order (each index once), with their
    /// payloads unless `payloads` is false. Each chunk is read once, for the span of positions
    /// asked of it, and each notification is built once and moved into the answer.
    static func notifications(
        _ db: Database, job: JobRef, indexes: [Int], payloads withPayloads: Bool = true
    ) throws -> [HeraldCore.Notification] {
        // Each chunk's span of positions; a run of indexes in one chunk (a claim's pending items
        // are in index order) is gathered before its chunk is looked up.
        var byChunk: [Int: (low: Int, high: Int)] = [:]
        var run: (first: Int, low: Int, high: Int)? = nil
        func close(_ run: (first: Int, low: Int, high: Int)) {
            let known = byChunk[run.first]
            byChunk[run.first] = (min(known?.low ?? run.low, run.low), max(known?.high ?? run.high, run.high))
        }
        for index in indexes {
            let first = ItemChunks.first(of: index)
            let position = index - first
            if let current = run, current.first == first {
                run = (first, min(current.low, position), max(current.high, position))
            } else {
                if let current = run { close(current) }
                run = (first, position, position)
            }
        }
        if let run { close(run) }
        var payloads = PayloadCache(tenant: job.tenant, job: job.id)
        // Each chunk's span decoded when first asked for: its notifications by position from the
        // span's low one, each taken out (moved) when its index comes.
        var chunks = ChunkSlots<(low: Int, notes: [HeraldCore.Notification?])>()
        var notes: [HeraldCore.Notification] = []
        notes.reserveCapacity(indexes.count)
        for index in indexes {
            let first = ItemChunks.first(of: index)
            let slot = try chunks.slot(first) {
                guard let span = byChunk[first] else { throw StoreError.corrupt("job \(job.id) lacks item \(index)") }
                var decoded = [HeraldCore.Notification?](repeating: nil, count: span.high - span.low + 1)
                let found: Bool? = try Row.readFirst(
                    db.cachedStatement(sql: "SELECT count, items FROM job_chunk WHERE id = ?"),
                    arguments: [ItemChunks.rowID(key: job.key, first: first)]
                ) { row in
                    try ItemChunks.decode(
                        row[1], count: row[0], wanted: span.low..<(span.high + 1),
                        payload: { withPayloads ? try payloads.payload(db, id: $0) : [] }
                    ) { position, notification, _ in decoded[position - span.low] = notification }
                    return true
                }
                guard found != nil else { throw StoreError.corrupt("job \(job.id) lacks the chunk of item \(first)") }
                return (span.low, decoded)
            }
            let position = index - first - chunks.values[slot].low
            guard chunks.values[slot].notes.indices.contains(position),
                let notification = chunks.values[slot].notes[position].take()
            else { throw StoreError.corrupt("job \(job.id) lacks item \(index)") }
            notes.append(notification)
        }
        return notes
    }

    /// The plain successes recorded for items in `range`.
    static func sentRecords(_ db: Database, key: Int64, range: ClosedRange<Int>) throws -> [Int: ItemChunks.Sent] {
        var sent: [Int: ItemChunks.Sent] = [:]
        let low = ItemChunks.rowID(key: key, first: ItemChunks.first(of: range.lowerBound))
        let high = ItemChunks.rowID(key: key, first: ItemChunks.first(of: range.upperBound)) | 0xff
        let cursor = try Data.fetchCursor(
            db.cachedStatement(sql: "SELECT items FROM job_sent WHERE id BETWEEN ? AND ?"), arguments: [low, high])
        while let blob = try cursor.next() { try ItemChunks.decodeSent(blob, into: &sent, range: range) }
        return sent
    }

    static func claimRows(_ db: Database, key: Int64) throws -> [ClaimRow] {
        let cursor = try Row.fetchCursor(
            db.cachedStatement(sql: "SELECT claimant, lease_until_ms, items FROM job_claim WHERE job_key = ?"),
            arguments: [key])
        var claims: [ClaimRow] = []
        while let row = try cursor.next() {
            claims.append(ClaimRow(claimant: row[0], leaseUntil: row[1], entries: try ItemChunks.entries(row[2])))
        }
        return claims
    }

    static func writeClaim(_ db: Database, key: Int64, _ claim: ClaimRow) throws {
        if claim.entries.isEmpty {
            try db.cachedStatement(sql: "DELETE FROM job_claim WHERE job_key = ? AND claimant = ?").execute(
                arguments: [key, claim.claimant])
        } else {
            try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO job_claim (job_key, claimant, lease_until_ms, items) VALUES (?, ?, ?, ?)"
            ).execute(arguments: [key, claim.claimant, claim.leaseUntil, ItemChunks.blob(claim.entries)])
        }
    }

    /// The entries of a claim whose items are still without an outcome: pending ones whose bit
    /// is clear, retries whose row still says `retrying`.
    static func liveEntries(_ db: Database, key: Int64, _ entries: [UInt32], settled: inout SettledBits) throws
        -> [UInt32]
    {
        try entries.filter { entry in
            let index = Int(entry & ~ItemChunks.retryEntry)
            if entry & ItemChunks.retryEntry != 0 {
                return try itemRow(db, key: key, index: index)?.state == .retrying
            }
            return try !settled.isSet(db, index)
        }
    }

    /// Items in index order from `fromIndex`, at most `limit`.
    static func readItems(_ db: Database, job: JobRef, fromIndex: Int, limit: Int) throws -> [JobItem] {
        let start = max(0, fromIndex)
        guard limit > 0, start < job.count else { return [] }
        let end = start + min(limit, job.count - start)  // exclusive
        let range = start...(end - 1)
        let rows = try itemRows(db, key: job.key, range: range)
        let sent = try sentRecords(db, key: job.key, range: range)
        var leases: [Int: (String, Int64)] = [:]
        for claim in try claimRows(db, key: job.key) {
            for entry in claim.entries {
                let index = Int(entry & ~ItemChunks.retryEntry)
                if range.contains(index) { leases[index] = (claim.claimant, claim.leaseUntil) }
            }
        }
        // Asked for last first: each is taken off the end (moved, not copied), in index order.
        var notes = try notifications(db, job: job, indexes: range.reversed())
        var items: [JobItem] = []
        items.reserveCapacity(range.count)
        for index in range {
            guard let notification = notes.popLast() else { throw StoreError.corrupt("job \(job.id) lacks item \(index)") }
            items.append(
                item(job: job.id, index: index, notification: notification, row: rows[index], sent: sent[index], lease: leases[index]))
        }
        return items
    }

    /// One item from what the tables keep of it.
    static func item(
        job: JobID, index: Int, notification: consuming HeraldCore.Notification, row: ItemRow?, sent: ItemChunks.Sent?,
        lease: (String, Int64)?
    ) -> JobItem {
        if let row {
            var result: JobItemResult? = nil
            if row.state.isFinal {
                result = JobItemResult(
                    state: row.state, status: row.status, reason: row.reason, message: row.message, apnsID: row.resultID,
                    apnsTimestamp: row.timestampMillis.map(date), finishedAt: date(row.finishedMillis ?? 0),
                    attempts: row.attempts, uniqueID: row.uniqueID.flatMap(APNsUniqueID.init))
            }
            let held = row.state.isFinal ? nil : lease
            return JobItem(
                job: job, index: index, notification: notification, state: row.state, result: result,
                claimant: held?.0, leaseUntil: held.map { date($0.1) }, attempts: row.attempts,
                firstAttemptAt: row.firstAttemptMillis.map(date), nextAttemptAt: row.nextAttemptMillis.map(date),
                lastError: row.lastError, onWireAt: row.wireMillis.map(date))
        }
        if let sent {
            let result = JobItemResult(
                state: .sent, status: 200, reason: nil, message: nil, apnsID: sent.apnsID, apnsTimestamp: nil,
                finishedAt: date(sent.finishedMillis), attempts: sent.attempts)
            return JobItem(
                job: job, index: index, notification: notification, state: .sent, result: result, attempts: sent.attempts)
        }
        return JobItem(
            job: job, index: index, notification: notification, state: .pending, result: nil, claimant: lease?.0,
            leaseUntil: lease.map { date($0.1) })
    }

    // MARK: Claims

    /// The due `retrying` items, earliest first: a range of the partial index `job_item_due`.
    static let claimDueSQL = """
        SELECT idx FROM job_item INDEXED BY job_item_due
        WHERE job_key = ? AND state = 'retrying' AND next_attempt_ms <= ?
        ORDER BY next_attempt_ms
        LIMIT ?
        """

    static func claim(
        _ db: Database, job: JobRef, limit: Int, claimant: String, now: Int64, until: Int64, fromIndex: Int
    ) throws -> [JobItem] {
        var claims = try claimRows(db, key: job.key)
        var busy = Set<Int>()
        for claim in claims where claim.claimant != claimant && claim.leaseUntil > now {
            for entry in claim.entries { busy.insert(Int(entry & ~ItemChunks.retryEntry)) }
        }
        var selected: [UInt32] = []
        // Due retries first (a busy one is skipped: fetch that many more).
        var dueChosen = Set<Int>()
        let due = try Int.fetchAll(
            db.cachedStatement(sql: claimDueSQL), arguments: [job.key, now, limit + busy.count])
        for index in due where !busy.contains(index) && selected.count < limit {
            selected.append(try ItemChunks.claimEntry(index, retry: true))
            dueChosen.insert(index)
        }
        // Then pending items from the hint, in index order: the chunks' settled bits. Most
        // claims have neither busy items nor due retries: then nothing is hashed per item.
        var pending: [Int] = []
        var settled = SettledBits(key: job.key)
        let from = min(max(0, fromIndex), job.count)
        var first = ItemChunks.first(of: from)
        while selected.count < limit, first < job.count {
            let bits = try settled.bits(db, chunk: first)
            for index in max(first, from)..<min(first + ItemChunks.size, job.count)
            where !ItemChunks.isSet(bits, index - first) && (busy.isEmpty || !busy.contains(index))
                && (dueChosen.isEmpty || !dueChosen.contains(index))
            {
                selected.append(try ItemChunks.claimEntry(index, retry: false))
                pending.append(index)
                if selected.count == limit { break }
            }
            first += ItemChunks.size
        }
        guard !selected.isEmpty else { return [] }
        // Whether an index was taken now: a due retry, or one of `pending` (ascending, searched
        // by halves).
        func isChosen(_ index: Int) -> Bool {
            if !dueChosen.isEmpty, dueChosen.contains(index) { return true }
            var low = 0
            var high = pending.count
            while low < high {
                let middle = low + (high - low) / 2
                if pending[middle] < index { low = middle + 1 } else { high = middle }
            }
            return low < pending.count && pending[low] == index
        }

        // The lease: this claimant's row holds its earlier items still without an outcome and these.
        var own = ClaimRow(claimant: claimant, leaseUntil: until, entries: [])
        for (position, claim) in claims.enumerated() {
            if claim.claimant == claimant {
                own.entries = try liveEntries(db, key: job.key, claim.entries, settled: &settled).filter {
                    !isChosen(Int($0 & ~ItemChunks.retryEntry))
                }
            } else {
                // An expired lease of another claimant gives up the items taken now.
                let kept = claim.entries.filter { !isChosen(Int($0 & ~ItemChunks.retryEntry)) }
                if kept.count != claim.entries.count {
                    claims[position].entries = kept
                    try writeClaim(db, key: job.key, claims[position])
                }
            }
        }
        own.entries += selected
        try writeClaim(db, key: job.key, own)

        // The claimed items: due retries in the order claimed, then pending ones in index order.
        let indexes = selected.map { Int($0 & ~ItemChunks.retryEntry) }
        // Asked for last first: each is taken off the end (moved, not copied), in claim order.
        var notes = try notifications(db, job: job, indexes: indexes.reversed())
        var rows: [Int: ItemRow] = [:]
        if let low = pending.first, let high = pending.last {
            rows = try itemRows(db, key: job.key, range: low...high)
        }
        for entry in selected where entry & ItemChunks.retryEntry != 0 {
            let index = Int(entry & ~ItemChunks.retryEntry)
            rows[index] = try itemRow(db, key: job.key, index: index)
        }
        var items: [JobItem] = []
        items.reserveCapacity(indexes.count)
        for index in indexes {
            guard let notification = notes.popLast() else {
                throw StoreError.corrupt("job \(job.id) lacks item \(index)")
            }
            items.append(
                item(
                    job: job.id, index: index, notification: notification, row: rows.isEmpty ? nil : rows[index], sent: nil,
                    lease: (claimant, until)))
        }
        return items
    }

    // MARK: On the wire

    /// Of `indexes`, those in `claimant`'s claim row (with or without an outcome since).
    static func heldIndexes(_ db: Database, job: JobRef, among indexes: Set<Int>, claimant: String) throws -> [Int] {
        guard
            let entries = try Row.readFirst(
                db.cachedStatement(sql: "SELECT items FROM job_claim WHERE job_key = ? AND claimant = ?"),
                arguments: [job.key, claimant], { try ItemChunks.entries($0[0]) })
        else { return [] }
        let held = Set(entries.map { Int($0 & ~ItemChunks.retryEntry) })
        return indexes.filter { held.contains($0) && $0 >= 0 && $0 < job.count }
    }

    static func markOnWire(_ db: Database, job: JobRef, indexes: Set<Int>, claimant: String, at: Int64) throws
        -> Set<Int>
    {
        var settled = SettledBits(key: job.key)
        var marked = Set<Int>()
        for index in try heldIndexes(db, job: job, among: indexes, claimant: claimant) {
            if try settled.isSet(db, index) {
                try db.cachedStatement(
                    sql: "UPDATE job_item SET wire_at_ms = ? WHERE job_key = ? AND idx = ? AND state = 'retrying'"
                ).execute(arguments: [at, job.key, index])
            } else {
                try db.cachedStatement(
                    sql: """
                        INSERT INTO job_item (job_key, idx, state, attempts, wire_at_ms) VALUES (?, ?, 'pending', 0, ?)
                        ON CONFLICT (job_key, idx) DO UPDATE SET wire_at_ms = excluded.wire_at_ms
                        WHERE job_item.state IN ('pending', 'retrying')
                        """
                ).execute(arguments: [job.key, index, at])
            }
            if db.changesCount > 0 { marked.insert(index) }
        }
        return marked
    }

    // MARK: Outcomes and retries

    /// An outcome or retry checked before its transaction: its times in the store's unit.
    struct CheckedChange: Sendable {
        var index: Int
        var change: JobItemChange.Change
        var finishedMillis: Int64 = 0
    }

    static func check(_ index: Int, _ change: JobItemChange.Change) throws -> CheckedChange {
        switch change {
        case .outcome(let result):
            guard result.state.isFinal else {
                throw StoreError.invalidArgument(
                    "item \(index): a result must be sent, failed or unknown, not \(result.state)")
            }
            return CheckedChange(
                index: index, change: change, finishedMillis: try millis(result.finishedAt, field: "finished_at"))
        case .retry:
            return CheckedChange(index: index, change: change)
        }
    }

    /// True for an outcome kept as a plain success record: 200 with nothing else to say. A
    /// success's `apns-unique-id` (development) is not kept: the API shows it for failed items.
    static func isPlain(_ result: JobItemResult) -> Bool {
        result.state == .sent && result.status == 200 && result.reason == nil && result.message == nil
            && result.apnsTimestamp == nil
    }

    static let outcomeRowSQL = """
        INSERT INTO job_item (job_key, idx, state, status, reason, message, result_apns_id, apns_timestamp_ms,
                              finished_at_ms, attempts, result_unique_id)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, max(0, ?), ?)
        ON CONFLICT (job_key, idx) DO UPDATE SET state = excluded.state, status = excluded.status,
            reason = excluded.reason, message = excluded.message, result_apns_id = excluded.result_apns_id,
            apns_timestamp_ms = excluded.apns_timestamp_ms, finished_at_ms = excluded.finished_at_ms,
            result_unique_id = excluded.result_unique_id,
            attempts = max(job_item.attempts, excluded.attempts), next_attempt_ms = NULL
        """

    static let retryRowSQL = """
        INSERT INTO job_item (job_key, idx, state, attempts, first_attempt_ms, next_attempt_ms, last_error)
        VALUES (?, ?, 'retrying', max(0, ?), ?, ?, ?)
        ON CONFLICT (job_key, idx) DO UPDATE SET state = 'retrying', attempts = max(job_item.attempts, excluded.attempts),
            first_attempt_ms = coalesce(job_item.first_attempt_ms, excluded.first_attempt_ms),
            next_attempt_ms = excluded.next_attempt_ms, last_error = excluded.last_error, wire_at_ms = NULL
        """

    /// Applies changes of one job in order, each only to an item without an outcome (the first
    /// outcome wins): plain successes as one `job_sent` record per chunk, everything else as the
    /// item's row; the settled bits, the leases of deferred items and `counts` along.
    /// - Returns: for each change, whether it changed its item.
    static func apply(_ db: Database, job: JobRef, _ changes: [CheckedChange], counts: inout OutcomeCounts) throws
        -> [Bool]
    {
        let valid = changes.map(\.index).filter { $0 >= 0 && $0 < job.count }
        guard let low = valid.min(), let high = valid.max() else { return changes.map { _ in false } }
        var states: [Int: JobItemState] = [:]
        if high - low <= 4 * valid.count + ItemChunks.size {
            let cursor = try Row.fetchCursor(
                db.cachedStatement(sql: "SELECT idx, state FROM job_item WHERE job_key = ? AND idx BETWEEN ? AND ?"),
                arguments: [job.key, low, high])
            while let row = try cursor.next() {
                let raw: String = row[1]
                states[row[0]] = JobItemState(rawValue: raw)
            }
        } else {
            for index in Set(valid) {
                if let raw = try String.fetchOne(
                    db.cachedStatement(sql: "SELECT state FROM job_item WHERE job_key = ? AND idx = ?"),
                    arguments: [job.key, index])
                {
                    states[index] = JobItemState(rawValue: raw)
                }
            }
        }
        var settled = SettledBits(key: job.key)
        // The plain successes' records, one list a chunk (the chunk used last kept at hand: most
        // of a group's changes are of one chunk), counted together.
        var sent = SentRecords()
        // The first plain success's change (all count as one kind), and how many there are.
        var plainFirst: Int? = nil
        var plainCount = 0
        var unleased = Set<Int>()
        var written: [Bool] = []
        written.reserveCapacity(changes.count)
        // Each change read where it is (a copy would retain each of its strings).
        for position in changes.indices {
            let index = changes[position].index
            guard index >= 0, index < job.count else {
                written.append(false)
                continue
            }
            // Most groups are plain successes of items without a row: nothing to look up.
            let state = states.isEmpty ? nil : states[index]
            let final = try settled.isSet(db, index) && state != .retrying
            guard !final else {
                written.append(false)
                continue
            }
            switch changes[position].change {
            case .outcome(let result):
                if state == nil, isPlain(result) {
                    sent.append(
                        index: index, attempts: max(0, result.attempts), finishedMillis: changes[position].finishedMillis,
                        apnsID: result.apnsID)
                    plainCount += 1
                    if plainFirst == nil { plainFirst = position }
                } else {
                    try db.cachedStatement(sql: outcomeRowSQL).execute(arguments: [
                        job.key, index, result.state.rawValue, result.status, result.reason, result.message,
                        result.apnsID.map { Data($0.words.bytes) }, result.apnsTimestamp.map(clampedMillis),
                        changes[position].finishedMillis, result.attempts, isPlain(result) ? nil : result.uniqueID?.rawValue,
                    ])
                    states[index] = result.state
                    counts.add(tenant: job.tenant, job: job.id, result: result)
                }
            case .retry(let retry):
                try db.cachedStatement(sql: retryRowSQL).execute(arguments: [
                    job.key, index, retry.attempts, clampedMillis(retry.firstAttemptAt), clampedMillis(retry.nextAttemptAt),
                    retry.lastError,
                ])
                states[index] = .retrying
                unleased.insert(index)
            }
            try settled.set(db, index)
            written.append(true)
        }
        // Every plain success counts as one kind of outcome (`sent`, 200, no reason).
        if let plainFirst, case .outcome(let result) = changes[plainFirst].change {
            counts.add(tenant: job.tenant, job: job.id, result: result, count: plainCount)
        }
        for (first, records) in sent.chunks {
            let base = ItemChunks.rowID(key: job.key, first: first)
            let last = try Int64.fetchOne(
                db.cachedStatement(sql: "SELECT max(id) FROM job_sent WHERE id BETWEEN ? AND ?"),
                arguments: [base, base | 0xff])
            let id = last.map { $0 + 1 } ?? base
            guard id <= base | 0xff else { throw StoreError.corrupt("job \(job.id): too many success records in one chunk") }
            try db.cachedStatement(sql: "INSERT INTO job_sent (id, items) VALUES (?, ?)").execute(arguments: [
                id, Data(records),
            ])
        }
        try settled.write(db)
        // A deferred item is unleased: it waits for its next attempt.
        if !unleased.isEmpty {
            for var claim in try claimRows(db, key: job.key) {
                let kept = claim.entries.filter { !unleased.contains(Int($0 & ~ItemChunks.retryEntry)) }
                guard kept.count != claim.entries.count else { continue }
                claim.entries = kept
                try writeClaim(db, key: job.key, claim)
            }
        }
        return written
    }
}
