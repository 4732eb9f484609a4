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
    struct Waiter: Sendable {
        var tenant: TenantID
        var job: JobID
        var index: Int
        var result: JobItemResult
        var continuation: CheckedContinuation<RecordOutcome, any Error>
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
        guard result.state != .pending else {
            throw StoreError.invalidArgument("a result must be sent or failed, not pending")
        }
        return try await withCheckedThrowingContinuation { continuation in
            let waiter = ResultQueue.Waiter(
                tenant: tenant, job: job, index: index, result: result, continuation: continuation)
            let start = resultQueue.withLock { queue -> Bool in
                queue.waiting.append(waiter)
                guard !queue.flushing else { return false }
                queue.flushing = true
                return true
            }
            if start { flushResults() }
        }
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
        pool.asyncWrite(
            { db -> [Result<RecordOutcome, any Error>] in
                batch.map { waiter in
                    Result {
                        try Self.record(
                            db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, result: waiter.result)
                    }
                }
            },
            completion: { _, outcome in
                switch outcome {
                case .success(let outcomes):
                    for (waiter, outcome) in zip(batch, outcomes) { waiter.continuation.resume(with: outcome) }
                case .failure(let error):
                    // Nothing of this transaction was committed: every caller gets the error.
                    for waiter in batch { waiter.continuation.resume(throwing: error) }
                }
                self.flushResults()
            })
    }

    /// Records one outcome inside a write transaction: the first outcome recorded wins.
    private static func record(_ db: Database, tenant: TenantID, job: JobID, index: Int, result: JobItemResult) throws
        -> RecordOutcome
    {
        // Cached statements skip SQLite's parse and GRDB's authorizer on this hot path.
        try db.cachedStatement(
            sql: """
                UPDATE job_item SET state = ?, status = ?, reason = ?, message = ?, result_apns_id = ?,
                    apns_timestamp_ms = ?, finished_at_ms = ?, claimant = NULL, lease_until_ms = NULL
                WHERE tenant = ? AND job_id = ? AND idx = ? AND state = 'pending'
                """
        ).execute(arguments: [
            result.state.rawValue, result.status, result.reason, result.message, result.apnsID?.rawValue,
            result.apnsTimestamp.map(clampedMillis),
            try millis(result.finishedAt, field: "finished_at"),
            tenant.rawValue, job.rawValue, index,
        ])
        let changed = db.changesCount > 0
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT \(jobItemColumns) FROM job_item WHERE tenant = ? AND job_id = ? AND idx = ?"),
                arguments: [tenant.rawValue, job.rawValue, index])
        else { throw StoreError.notFound("item \(index) of job \(job)") }
        let item = try jobItem(from: row)
        return changed ? .recorded(item) : .alreadyRecorded(item)
    }
}
