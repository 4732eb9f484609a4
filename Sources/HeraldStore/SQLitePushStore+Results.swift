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
        /// An outcome: true when recorded.
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
    /// item of a batch) are one `job_sent` row per chunk and a few bits (`job_settled`); any
    /// other change is its item's row (`SQLitePushStore+Items.swift`).
    public func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
        let checked = try Self.checkAll(changes)
        guard !checked.isEmpty else { return 0 }
        return try await writeTransaction { db in
            try Self.recordChanges(db, tenant: tenant, job: job, checked)
        }
    }

    /// The checks and the transaction of `recordChanges` stay out of the async function: with a
    /// throwing `map` inlined there, Swift 6.3.1's release optimizer crashes while splitting the
    /// coroutine (signal 11 in CoroSplit).
    @inline(never)
    private static func checkAll(_ changes: [JobItemChange]) throws -> [CheckedChange] {
        var checked: [CheckedChange] = []
        checked.reserveCapacity(changes.count)
        for change in changes { checked.append(try check(change.index, change.change)) }
        return checked
    }

    @inline(never)
    private static func recordChanges(
        _ db: Database, tenant: TenantID, job: JobID, _ checked: [CheckedChange]
    ) throws -> Int {
        guard let ref = try jobRef(db, tenant: tenant, id: job) else { return 0 }
        var counts = OutcomeCounts()
        let written = try apply(db, job: ref, checked, counts: &counts)
        try counts.write(db)
        return written.filter { $0 }.count
    }

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
        // Checked before the transaction: a change the store cannot keep fails alone.
        var checked: [Result<CheckedChange, any Error>] = []
        checked.reserveCapacity(batch.count)
        for waiter in batch {
            let change: JobItemChange.Change
            switch waiter.change {
            case .outcome(let result, _): change = .outcome(result)
            case .retry(let retry, _): change = .retry(retry)
            }
            checked.append(Result { try Self.check(waiter.index, change) })
        }
        let checkedChanges = checked
        struct JobKey: Hashable {
            var tenant: TenantID
            var job: JobID
        }
        pool.asyncWrite(
            { db -> [Result<Bool, any Error>] in
                // Each job's changes in the order they came, applied together.
                var byJob: [JobKey: [Int]] = [:]
                var order: [JobKey] = []
                for (position, waiter) in batch.enumerated() {
                    guard case .success = checkedChanges[position] else { continue }
                    let key = JobKey(tenant: waiter.tenant, job: waiter.job)
                    if byJob[key] == nil { order.append(key) }
                    byJob[key, default: []].append(position)
                }
                // A change whose job is gone writes nothing (false).
                var answers: [Result<Bool, any Error>] = checkedChanges.map { $0.map { _ in false } }
                var counts = OutcomeCounts()
                for key in order {
                    let positions = byJob[key] ?? []
                    guard let ref = try Self.jobRef(db, tenant: key.tenant, id: key.job) else { continue }
                    let changes = positions.compactMap { try? checkedChanges[$0].get() }
                    let written = try Self.apply(db, job: ref, changes, counts: &counts)
                    for (position, changed) in zip(positions, written) { answers[position] = .success(changed) }
                }
                // In the same transaction as the outcomes: if it fails, neither is written.
                try counts.write(db)
                return answers
            },
            completion: { _, outcome in
                switch outcome {
                case .success(let answers):
                    for (waiter, answer) in zip(batch, answers) {
                        switch waiter.change {
                        case .outcome(_, let continuation), .retry(_, let continuation): continuation.resume(with: answer)
                        }
                    }
                case .failure(let error):
                    // Nothing of this transaction was committed: every caller gets the error.
                    for waiter in batch {
                        switch waiter.change {
                        case .outcome(_, let continuation), .retry(_, let continuation): continuation.resume(throwing: error)
                        }
                    }
                }
                self.flushResults()
            })
    }
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
