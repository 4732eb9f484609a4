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
                batch.map { waiter in
                    switch waiter.change {
                    case .result(let result, _):
                        return .recorded(
                            Result {
                                try Self.record(
                                    db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, result: result)
                            })
                    case .outcome(let result, _):
                        return .changed(
                            Result {
                                try Self.update(
                                    db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, result: result)
                            })
                    case .retry(let retry, _):
                        return .changed(
                            Result {
                                try Self.deferItem(
                                    db, tenant: waiter.tenant, job: waiter.job, index: waiter.index, retry: retry)
                            })
                    }
                }
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
    private static func record(_ db: Database, tenant: TenantID, job: JobID, index: Int, result: JobItemResult) throws
        -> RecordOutcome
    {
        let changed = try update(db, tenant: tenant, job: job, index: index, result: result)
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT \(jobItemColumns) FROM job_item WHERE tenant = ? AND job_id = ? AND idx = ?"),
                arguments: [tenant.rawValue, job.rawValue, index])
        else { throw StoreError.notFound("item \(index) of job \(job)") }
        let item = try jobItem(from: row)
        return changed ? .recorded(item) : .alreadyRecorded(item)
    }

    /// Writes one outcome inside a write transaction if the item has none yet.
    /// - Returns: true when it was written.
    private static func update(_ db: Database, tenant: TenantID, job: JobID, index: Int, result: JobItemResult) throws
        -> Bool
    {
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
        return db.changesCount > 0
    }
}
