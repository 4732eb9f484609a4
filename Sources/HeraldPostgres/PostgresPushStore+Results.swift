import Foundation
import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// Job item outcomes with group commit, as the SQLite store's: the job runner records one outcome
// per item as soon as its send ends, up to `jobs.concurrency_per_tenant` at once. Each call
// returns only after its outcome is committed, but the outcomes that arrive while a write runs
// go together into the next one: one `UPDATE … FROM unnest(…)` statement (one commit) for many
// items instead of one round trip and one commit each.

/// One outcome waiting for the next write.
struct ResultWrite: Sendable {
    var tenant: TenantID
    var job: JobID
    var index: Int
    var result: JobItemResult
}

extension PostgresPushStore {
    /// The most outcomes in one statement (about 200 bytes each on the wire).
    static let resultsPerWrite = 1_000

    public func recordOutcome(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws -> Bool {
        guard result.state.isFinal else {
            throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
        }
        return try await resultCommits.submit(ResultWrite(tenant: tenant, job: job, index: index, result: result))
    }

    /// One commit group of the job runner in one transaction (``applyChanges(_:tenant:job:outcomes:retries:logger:)``):
    /// plain successes as `job_sent` records, other outcomes and retries on the items' rows.
    /// Checked before anything is written. An index named twice takes its first outcome, or,
    /// without one, its last retry.
    public func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
        guard !changes.isEmpty else { return 0 }
        for change in changes {
            if case .outcome(let result) = change.change, !result.state.isFinal {
                throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
            }
        }
        var outcomes: [ResultWrite] = []
        outcomes.reserveCapacity(changes.count)
        var retries: [Int: JobItemRetry] = [:]
        var decided = Set<Int>(minimumCapacity: changes.count)
        for change in changes {
            switch change.change {
            case .outcome(let result):
                guard decided.insert(change.index).inserted else { continue }
                retries[change.index] = nil
                outcomes.append(ResultWrite(tenant: tenant, job: job, index: change.index, result: result))
            case .retry(let retry):
                if !decided.contains(change.index) { retries[change.index] = retry }
            }
        }
        let logger = self.logger
        if retries.isEmpty,
            let written = try await Self.recordPlainSuccesses(client, tenant: tenant, job: job, outcomes, logger: logger)
        {
            return written.count
        }
        let (decidedOutcomes, deferred) = (outcomes, retries)
        return try await client.withTransaction(logger: logger) { connection in
            try await Self.applyChanges(
                connection, tenant: tenant, job: job, outcomes: decidedOutcomes, retries: deferred, logger: logger
            ).count
        }
    }

    /// One `UPDATE … FROM unnest(…)` putting items without an outcome back to wait, as
    /// ``deferItem(tenant:job:index:retry:)`` does one.
    static func deferItems(tenant: TenantID, job: JobID, _ retries: [Int: JobItemRetry]) -> PostgresQuery {
        var indexes: [Int32] = []
        var attempts: [Int32] = []
        var first: [Int64] = []
        var next: [Int64] = []
        var errors: [String] = []
        var hasError: [Bool] = []
        for (index, retry) in retries {
            indexes.append(Int32(clamping: index))
            attempts.append(count(retry.attempts))
            first.append(millis(retry.firstAttemptAt))
            next.append(millis(retry.nextAttemptAt))
            errors.append(retry.lastError ?? "")
            hasError.append(retry.lastError != nil)
        }
        var binds = PostgresBindings(capacity: 8)
        binds.append(tenant.rawValue)
        binds.append(job.rawValue)
        binds.append(indexes)
        binds.append(attempts)
        binds.append(first)
        binds.append(next)
        binds.append(errors)
        binds.append(hasError)
        return PostgresQuery(
            unsafeSQL: """
                UPDATE job_item AS item SET state = 'retrying', attempts = greatest(item.attempts, t.attempts),
                    first_attempt_ms = coalesce(item.first_attempt_ms, t.first_attempt),
                    next_attempt_ms = t.next_attempt, last_error = CASE WHEN t.has_error THEN t.error END,
                    claimant = NULL, lease_until_ms = NULL, wire_at_ms = NULL
                FROM unnest($3::int[], $4::int[], $5::bigint[], $6::bigint[], $7::text[], $8::bool[])
                     AS t(idx, attempts, first_attempt, next_attempt, error, has_error)
                WHERE item.tenant = $1 AND item.job_id = $2 AND item.idx = t.idx AND item.state IN ('pending', 'retrying')
                RETURNING item.idx
                """, binds: binds)
    }

    private struct ItemKey: Hashable {
        var tenant: String
        var job: String
        var index: Int
    }

    /// Writes a batch of outcomes, one transaction a job (``applyChanges(_:tenant:job:outcomes:retries:logger:)``):
    /// each item without an outcome takes its own; an item that already has one (recorded by
    /// another instance, or twice in this batch: the first wins) keeps it.
    /// - Returns: for each write, true when its outcome was recorded.
    static func writeResults(_ batch: [ResultWrite], client: BoundedPostgresClient, logger: Logger) async
        -> [Result<Bool, any Error>]
    {
        var first: [ItemKey: Int] = [:]
        var byJob: [ItemKey: [ResultWrite]] = [:]
        var jobOrder: [ItemKey] = []
        for (offset, write) in batch.enumerated() {
            let key = ItemKey(tenant: write.tenant.rawValue, job: write.job.rawValue, index: write.index)
            guard first[key] == nil else { continue }
            first[key] = offset
            let jobKey = ItemKey(tenant: write.tenant.rawValue, job: write.job.rawValue, index: 0)
            if byJob[jobKey] == nil { jobOrder.append(jobKey) }
            byJob[jobKey, default: []].append(write)
        }
        var written: Set<ItemKey> = []
        var failures: [ItemKey: any Error] = [:]
        for jobKey in jobOrder {
            guard let writes = byJob[jobKey], let sample = writes.first else { continue }
            do {
                let recorded: Set<Int>
                if let plain = try await recordPlainSuccesses(client, tenant: sample.tenant, job: sample.job, writes, logger: logger) {
                    recorded = plain
                } else {
                    recorded = try await client.withTransaction(logger: logger) { connection in
                        try await applyChanges(
                            connection, tenant: sample.tenant, job: sample.job, outcomes: writes, retries: [:], logger: logger)
                    }
                }
                for index in recorded { written.insert(ItemKey(tenant: jobKey.tenant, job: jobKey.job, index: index)) }
            } catch {
                // One transaction: nothing of this job's outcomes was committed.
                failures[jobKey] = (error as? PostgresTransactionError)?.closureError ?? error
            }
        }
        var answers: [Result<Bool, any Error>] = []
        answers.reserveCapacity(batch.count)
        for (offset, write) in batch.enumerated() {
            let key = ItemKey(tenant: write.tenant.rawValue, job: write.job.rawValue, index: write.index)
            if let failure = failures[ItemKey(tenant: key.tenant, job: key.job, index: 0)] {
                answers.append(.failure(failure))
            } else {
                answers.append(.success(first[key] == offset && written.contains(key)))
            }
        }
        return answers
    }

    /// A result with nothing to keep but its apns-id, finish time and attempts: sent with 200, no
    /// reason, message or timestamp (nearly every item of a batch). A success's `apns-unique-id`
    /// (development) is not kept, as on SQLite: the API shows it for failed items.
    static func isPlainSuccess(_ result: JobItemResult) -> Bool {
        result.state == .sent && result.status == 200 && result.reason == nil && result.message == nil
            && result.apnsTimestamp == nil
    }

    /// One `UPDATE … FROM unnest(…)` of outcomes: a column per array bind, the nullable columns
    /// with a flag array (`has_…`; arrays here hold no NULL element), as ``insertItems`` does.
    static func updateResults(_ writes: [ResultWrite]) -> PostgresQuery {
        let rows = writes.count
        var tenants: [String] = []
        var jobs: [String] = []
        var indexes: [Int64] = []
        var states: [String] = []
        var statuses: [Int32] = []
        var hasStatus: [Bool] = []
        var reasons: [String] = []
        var hasReason: [Bool] = []
        var messages: [String] = []
        var hasMessage: [Bool] = []
        var apnsIDs: [String] = []
        var hasAPNsID: [Bool] = []
        var timestamps: [Int64] = []
        var hasTimestamp: [Bool] = []
        var finished: [Int64] = []
        var attempts: [Int32] = []
        var uniqueIDs: [String] = []
        tenants.reserveCapacity(rows)
        jobs.reserveCapacity(rows)
        indexes.reserveCapacity(rows)
        states.reserveCapacity(rows)
        statuses.reserveCapacity(rows)
        reasons.reserveCapacity(rows)
        messages.reserveCapacity(rows)
        apnsIDs.reserveCapacity(rows)
        timestamps.reserveCapacity(rows)
        finished.reserveCapacity(rows)
        attempts.reserveCapacity(rows)
        for write in writes {
            let result = write.result
            tenants.append(write.tenant.rawValue)
            jobs.append(write.job.rawValue)
            indexes.append(Int64(write.index))
            states.append(result.state.rawValue)
            statuses.append(Int32(clamping: result.status ?? 0))
            hasStatus.append(result.status != nil)
            reasons.append(result.reason ?? "")
            hasReason.append(result.reason != nil)
            messages.append(result.message ?? "")
            hasMessage.append(result.message != nil)
            apnsIDs.append(result.apnsID?.rawValue ?? "")
            hasAPNsID.append(result.apnsID != nil)
            timestamps.append(result.apnsTimestamp.map(millis) ?? 0)
            hasTimestamp.append(result.apnsTimestamp != nil)
            finished.append(millis(result.finishedAt))
            attempts.append(Self.count(result.attempts))
            // A unique id is a UUID, never empty: '' stands for none (NULLIF below). A plain
            // success keeps none, whichever statement writes it.
            uniqueIDs.append(Self.isPlainSuccess(result) ? "" : result.uniqueID?.rawValue ?? "")
        }
        var binds = PostgresBindings(capacity: 17)
        binds.append(tenants)
        binds.append(jobs)
        binds.append(indexes)
        binds.append(states)
        binds.append(statuses)
        binds.append(hasStatus)
        binds.append(reasons)
        binds.append(hasReason)
        binds.append(messages)
        binds.append(hasMessage)
        binds.append(apnsIDs)
        binds.append(hasAPNsID)
        binds.append(timestamps)
        binds.append(hasTimestamp)
        binds.append(finished)
        binds.append(attempts)
        binds.append(uniqueIDs)
        // The outcomes written are counted in `job_outcome` by the same statement (one commit:
        // a count never runs ahead of or behind its items).
        let sql = """
            WITH written AS (
            UPDATE job_item AS item SET state = t.state, status = CASE WHEN t.has_status THEN t.status END,
                reason = CASE WHEN t.has_reason THEN t.reason END, message = CASE WHEN t.has_message THEN t.message END,
                result_apns_id = CASE WHEN t.has_apns_id THEN t.apns_id END,
                apns_timestamp_ms = CASE WHEN t.has_timestamp THEN t.apns_timestamp END,
                finished_at_ms = t.finished_at, claimant = NULL, lease_until_ms = NULL,
                attempts = greatest(item.attempts, t.attempts), next_attempt_ms = NULL,
                result_unique_id = NULLIF(t.unique_id, '')
            FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::bool[], $7::text[],
                        $8::bool[], $9::text[], $10::bool[], $11::text[], $12::bool[], $13::bigint[], $14::bool[],
                        $15::bigint[], $16::int[], $17::text[])
                 AS t(tenant, job_id, idx, state, status, has_status, reason, has_reason, message, has_message,
                      apns_id, has_apns_id, apns_timestamp, has_timestamp, finished_at, attempts, unique_id)
            WHERE item.tenant = t.tenant AND item.job_id = t.job_id AND item.idx = t.idx
              AND item.state IN ('pending', 'retrying')
            RETURNING item.tenant, item.job_id, item.idx, item.state, item.status, item.reason
            ), counted AS (
                INSERT INTO job_outcome AS o (tenant, job_id, state, status, reason, n)
                SELECT tenant, job_id, state, status, reason, count(*) FROM written
                GROUP BY tenant, job_id, state, status, reason
                ON CONFLICT (tenant, job_id, state, status, reason) DO UPDATE SET n = o.n + excluded.n
            )
            SELECT tenant, job_id, idx FROM written
            """
        return PostgresQuery(unsafeSQL: sql, binds: binds)
    }
}
