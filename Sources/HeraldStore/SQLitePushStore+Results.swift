import Foundation
import GRDB
import HeraldCore
import Synchronization

// Job item outcomes with group commit. The job runner records one outcome per item as soon as
// its send ends, up to `jobs.concurrency_per_tenant` at once. Each call still returns only
// after its outcome is committed, but the outcomes that arrive while a write transaction runs
// are written together in the next one: one WAL commit for many items instead of one each.

/// The outcomes waiting for the store's next write transaction.
struct ResultQueue {
    /// What to write for one item: its outcome, or its next attempt.
    enum Change: Sendable {
        case result(JobItemResult, CheckedContinuation<RecordOutcome, any Error>)
        /// An outcome with no read-back: true when recorded.
        case outcome(JobItemResult, CheckedContinuation<Bool, any Error>)
        case retry(JobItemRetry, CheckedContinuation<Bool, any Error>)
    }

    struct Waiter: Sendable {
        var tenant: TenantID
        var job: JobID
        var index: Int
        var change: Change
    }

    var waiting: [Waiter] = []
    /// True while a write transaction of outcomes is queued or running; the queue is then
    /// drained by its completion, so no second one starts.
    var flushing = false
}

extension SQLitePushStore {
    public func recordResult(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws
        -> RecordOutcome
    {
        guard result.state.isFinal else {
            throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
        }
        return try await withCheckedThrowingContinuation { continuation in
            enqueue(ResultQueue.Waiter(tenant: tenant, job: job, index: index, change: .result(result, continuation)))
        }
    }

    public func recordOutcome(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws -> Bool {
        guard result.state.isFinal else {
            throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
        }
        return try await withCheckedThrowingContinuation { continuation in
            enqueue(ResultQueue.Waiter(tenant: tenant, job: job, index: index, change: .outcome(result, continuation)))
        }
    }

    public func deferItem(tenant: TenantID, job: JobID, index: Int, retry: JobItemRetry) async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            enqueue(ResultQueue.Waiter(tenant: tenant, job: job, index: index, change: .retry(retry, continuation)))
        }
    }

    /// The job runner's commit group: every change in one write transaction (with the job's
    /// outcome counts). The plain successes (200, no reason, message or timestamp: nearly every
    /// item of a batch) go in one statement, their indexes, apns-ids, times and attempts as one
    /// JSON array bind; any other change is one run of a cached statement. A chunk's changes
    /// name each item once.
    public func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
        var plain = PlainSuccesses()
        var others: [JobItemChange] = []
        for change in changes {
            guard case .outcome(let result) = change.change else {
                others.append(change)
                continue
            }
            guard result.state.isFinal else {
                throw StoreError.invalidArgument(
                    "item \(change.index): a result must be sent, failed or unknown, not \(result.state)")
            }
            if try !plain.add(index: change.index, result: result) { others.append(change) }
        }
        guard !changes.isEmpty else { return 0 }
        let plainCount = plain.count
        let plainJSON = plain.json()
        let single = others
        return try await pool.write { db in
            var counts = OutcomeCounts()
            var changed = 0
            if plainCount > 0 {
                try db.cachedStatement(sql: Self.plainSuccessesSQL).execute(
                    arguments: [plainJSON, tenant.rawValue, job.rawValue])
                let written = db.changesCount
                counts.add(tenant: tenant, job: job, result: PlainSuccesses.kind, count: written)
                changed += written
            }
            for change in single {
                let written: Bool
                switch change.change {
                case .outcome(let result):
                    written = try Self.update(
                        db, tenant: tenant, job: job, index: change.index, result: result, counts: &counts)
                case .retry(let retry):
                    written = try Self.deferItem(db, tenant: tenant, job: job, index: change.index, retry: retry)
                }
                if written { changed += 1 }
            }
            try counts.write(db)
            return changed
        }
    }

    /// Plain successes of one job: `[[idx, apns-id or null, finished_at_ms, attempts], ...]`
    /// (built by ``PlainSuccesses`` from integers and validated apns-ids only). The array is
    /// materialized first and each item looked up by its primary key: without `MATERIALIZED`
    /// SQLite (no statistics) plans the job's items as the outer loop and scans the array for
    /// each, a statement that grows with the job (seconds at 50,000 items).
    static let plainSuccessesSQL = """
        WITH j (idx, apns_id, finished_ms, attempts) AS MATERIALIZED (
            SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?1))
        UPDATE job_item SET state = 'sent', status = 200, reason = NULL, message = NULL,
            result_apns_id = j.apns_id, apns_timestamp_ms = NULL, finished_at_ms = j.finished_ms,
            claimant = NULL, lease_until_ms = NULL, attempts = max(job_item.attempts, j.attempts), next_attempt_ms = NULL
        FROM j
        WHERE job_item.tenant = ?2 AND job_item.job_id = ?3 AND job_item.idx = j.idx
          AND job_item.state IN ('pending', 'retrying')
        """

    private func enqueue(_ waiter: ResultQueue.Waiter) {
        let start = resultQueue.withLock { queue -> Bool in
            queue.waiting.append(waiter)
            guard !queue.flushing else { return false }
            queue.flushing = true
            return true
        }
        if start { flushResults() }
    }

    /// Writes every waiting outcome in one transaction, answers each caller once it committed,
    /// then goes on with the outcomes that arrived meanwhile (or stops when there are none).
    private func flushResults() {
        let batch = resultQueue.withLock { queue -> [ResultQueue.Waiter] in
            let batch = queue.waiting
            queue.waiting.removeAll(keepingCapacity: true)
            if batch.isEmpty { queue.flushing = false }
            return batch
        }
        guard !batch.isEmpty else { return }
        enum Written: Sendable {
            case recorded(Result<RecordOutcome, any Error>)
            /// An outcome written with no read-back, or a retry: whether the row changed.
            case changed(Result<Bool, any Error>)
        }
        pool.asyncWrite(
            { db -> [Written] in
                var counts = OutcomeCounts()
                let written = batch.map { waiter -> Written in
                    switch waiter.change {
                    case .result(let result, _):
                        return .recorded(
                            Result {
                                try Self.record(
                                    db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, result: result,
                                    counts: &counts)
                            })
                    case .outcome(let result, _):
                        return .changed(
                            Result {
                                try Self.update(
                                    db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, result: result,
                                    counts: &counts)
                            })
                    case .retry(let retry, _):
                        return .changed(
                            Result {
                                try Self.deferItem(
                                    db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, retry: retry)
                            })
                    }
                }
                // In the same transaction as the outcomes: if it fails, neither is written.
                try counts.write(db)
                return written
            },
            completion: { _, outcome in
                switch outcome {
                case .success(let outcomes):
                    for (waiter, written) in zip(batch, outcomes) {
                        switch (waiter.change, written) {
                        case (.result(_, let continuation), .recorded(let result)): continuation.resume(with: result)
                        case (.outcome(_, let continuation), .changed(let result)): continuation.resume(with: result)
                        case (.retry(_, let continuation), .changed(let result)): continuation.resume(with: result)
                        case (.result(_, let continuation), .changed):
                            continuation.resume(throwing: StoreError.corrupt("mismatched write"))
                        case (.outcome(_, let continuation), .recorded), (.retry(_, let continuation), .recorded):
                            continuation.resume(throwing: StoreError.corrupt("mismatched write"))
                        }
                    }
                case .failure(let error):
                    // Nothing of this transaction was committed: every caller gets the error.
                    for waiter in batch {
                        switch waiter.change {
                        case .result(_, let continuation): continuation.resume(throwing: error)
                        case .outcome(_, let continuation), .retry(_, let continuation): continuation.resume(throwing: error)
                        }
                    }
                }
                self.flushResults()
            })
    }

    /// Puts an item without an outcome back to wait for its next attempt.
    private static func deferItem(_ db: Database, tenant: TenantID, job: JobID, index: Int, retry: JobItemRetry) throws
        -> Bool
    {
        try db.cachedStatement(
            sql: """
                UPDATE job_item SET state = 'retrying', attempts = max(attempts, ?),
                    first_attempt_ms = coalesce(first_attempt_ms, ?), next_attempt_ms = ?, last_error = ?,
                    claimant = NULL, lease_until_ms = NULL, wire_at_ms = NULL
                WHERE tenant = ? AND job_id = ? AND idx = ? AND state IN ('pending', 'retrying')
                """
        ).execute(arguments: [
            retry.attempts, clampedMillis(retry.firstAttemptAt), clampedMillis(retry.nextAttemptAt), retry.lastError,
            tenant.rawValue, job.rawValue, index,
        ])
        return db.changesCount > 0
    }

    /// Records one outcome inside a write transaction and reads the item back: the first
    /// outcome recorded wins.
    private static func record(
        _ db: Database, tenant: TenantID, job: JobID, index: Int, result: JobItemResult, counts: inout OutcomeCounts
    ) throws -> RecordOutcome {
        let changed = try update(db, tenant: tenant, job: job, index: index, result: result, counts: &counts)
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT \(jobItemColumns) FROM job_item WHERE tenant = ? AND job_id = ? AND idx = ?"),
                arguments: [tenant.rawValue, job.rawValue, index])
        else { throw StoreError.notFound("item \(index) of job \(job)") }
        var payloads = PayloadCache()
        let item = try jobItem(from: row, db, payloads: &payloads)
        return changed ? .recorded(item) : .alreadyRecorded(item)
    }

    /// Writes one outcome inside a write transaction if the item has none yet.
    /// - Returns: true when it was written (and then counted in `counts`).
    private static func update(
        _ db: Database, tenant: TenantID, job: JobID, index: Int, result: JobItemResult, counts: inout OutcomeCounts
    ) throws -> Bool {
        // Cached statements skip SQLite's parse and GRDB's authorizer on this hot path.
        try db.cachedStatement(
            sql: """
                UPDATE job_item SET state = ?, status = ?, reason = ?, message = ?, result_apns_id = ?,
                    apns_timestamp_ms = ?, finished_at_ms = ?, claimant = NULL, lease_until_ms = NULL,
                    attempts = max(attempts, ?), next_attempt_ms = NULL
                WHERE tenant = ? AND job_id = ? AND idx = ? AND state IN ('pending', 'retrying')
                """
        ).execute(arguments: [
            result.state.rawValue, result.status, result.reason, result.message, result.apnsID?.rawValue,
            result.apnsTimestamp.map(clampedMillis),
            try millis(result.finishedAt, field: "finished_at"), result.attempts,
            tenant.rawValue, job.rawValue, index,
        ])
        guard db.changesCount > 0 else { return false }
        counts.add(tenant: tenant, job: job, result: result)
        return true
    }
}

/// The plain successes of a commit group (`sent`, 200, no reason, message or APNs timestamp),
/// as the JSON array ``SQLitePushStore/plainSuccessesSQL`` binds.
struct PlainSuccesses {
    /// The outcome kind every plain success is counted as.
    static let kind = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: Date(timeIntervalSince1970: 0))

    private var text = "["
    private(set) var count = 0

    /// Adds the outcome if it is a plain success.
    /// - Returns: false when it is not (it is written on its own).
    /// - Throws: for a finish time out of the store's range.
    mutating func add(index: Int, result: JobItemResult) throws -> Bool {
        guard result.state == .sent, result.status == 200, result.reason == nil, result.message == nil,
            result.apnsTimestamp == nil
        else { return false }
        let finished = try SQLitePushStore.millis(result.finishedAt, field: "finished_at")
        if count > 0 { text += "," }
        // An apns-id is a validated UUID (hex digits and dashes): nothing in it needs escaping.
        let id = result.apnsID.map { "\"\($0.rawValue)\"" } ?? "null"
        text += "[\(index),\(id),\(finished),\(result.attempts)]"
        count += 1
        return true
    }

    func json() -> String { text + "]" }
}

/// The outcomes one write transaction recorded, by job and (state, status, reason): added to
/// `job_outcome` (migration v9) at the end of that transaction, one row update per kind of
/// outcome instead of one per item.
struct OutcomeCounts {
    struct Key: Hashable {
        var tenant: String
        var job: String
        var state: String
        var status: Int?
        var reason: String?
    }

    private(set) var counts: [Key: Int] = [:]

    mutating func add(tenant: TenantID, job: JobID, result: JobItemResult, count: Int = 1) {
        guard count > 0 else { return }
        let key = Key(
            tenant: tenant.rawValue, job: job.rawValue, state: result.state.rawValue, status: result.status,
            reason: result.reason)
        counts[key, default: 0] += count
    }

    /// Adds the counts to `job_outcome` (a row per kind of outcome: the one writer thread never
    /// races itself between the update and the insert).
    func write(_ db: Database) throws {
        for (key, count) in counts {
            try db.cachedStatement(
                sql: """
                    UPDATE job_outcome SET n = n + ?
                    WHERE tenant = ? AND job_id = ? AND state = ? AND status IS ? AND reason IS ?
                    """
            ).execute(arguments: [count, key.tenant, key.job, key.state, key.status, key.reason])
            if db.changesCount == 0 {
                try db.cachedStatement(
                    sql: "INSERT INTO job_outcome (tenant, job_id, state, status, reason, n) VALUES (?, ?, ?, ?, ?, ?)"
                ).execute(arguments: [key.tenant, key.job, key.state, key.status, key.reason, count])
            }
        }
    }
}
