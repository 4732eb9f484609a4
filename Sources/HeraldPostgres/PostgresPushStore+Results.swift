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
    /// The caller wants the item back (``PushStore/recordResult(tenant:job:index:result:)``);
    /// the job runner's ``PushStore/recordOutcome(tenant:job:index:result:)`` does not.
    var readBack: Bool
}

/// What became of one outcome: recorded now or kept the earlier one, with the item when read back.
enum ResultAnswer: Sendable {
    case recorded(JobItem?)
    case alreadyRecorded(JobItem?)
}

extension PostgresPushStore {
    /// The most outcomes in one statement (about 200 bytes each on the wire).
    static let resultsPerWrite = 1_000

    public func recordResult(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws
        -> RecordOutcome
    {
        guard result.state.isFinal else {
            throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
        }
        let answer = try await resultCommits.submit(
            ResultWrite(tenant: tenant, job: job, index: index, result: result, readBack: true))
        switch answer {
        case .recorded(let item?): return .recorded(item)
        case .alreadyRecorded(let item?): return .alreadyRecorded(item)
        case .recorded(nil), .alreadyRecorded(nil): throw StoreError.corrupt("item \(index) of job \(job) was not read back")
        }
    }

    public func recordOutcome(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws -> Bool {
        guard result.state.isFinal else {
            throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
        }
        let answer = try await resultCommits.submit(
            ResultWrite(tenant: tenant, job: job, index: index, result: result, readBack: false))
        if case .recorded = answer { return true }
        return false
    }

    /// One commit group of the job runner: every outcome in one `UPDATE … FROM unnest(…)` (the
    /// statement ``writeResults(_:client:logger:)`` uses, with its counts) and every retry in
    /// another, in one transaction when there are both. Checked before anything is written.
    /// An index named twice takes its first outcome, or, without one, its last retry.
    public func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
        guard !changes.isEmpty else { return 0 }
        for change in changes {
            if case .outcome(let result) = change.change, !result.state.isFinal {
                throw StoreError.invalidArgument("a result must be sent, failed or unknown, not \(result.state)")
            }
        }
        var outcomes: [ResultWrite] = []
        var retries: [Int: JobItemRetry] = [:]
        var decided = Set<Int>()
        var top = 0
        for change in changes {
            top = max(top, Self.after(change.index))
            switch change.change {
            case .outcome(let result):
                guard decided.insert(change.index).inserted else { continue }
                retries[change.index] = nil
                outcomes.append(ResultWrite(tenant: tenant, job: job, index: change.index, result: result, readBack: false))
            case .retry(let retry):
                if !decided.contains(change.index) { retries[change.index] = retry }
            }
        }
        let logger = self.logger
        if !knownMaterialized(tenant: tenant, job: job, upTo: top) {
            try await Self.materialize(client, needs: [(tenant, job, top)], logger: logger)
            noteMaterialized(tenant: tenant, job: job, upTo: top)
        }
        let retryQuery = retries.isEmpty ? nil : Self.deferItems(tenant: tenant, job: job, retries)
        let outcomeQuery: PostgresQuery?
        if outcomes.isEmpty {
            outcomeQuery = nil
        } else if outcomes.allSatisfy({ Self.isPlainSuccess($0.result) }) {
            outcomeQuery = Self.updatePlainSuccesses(tenant: tenant, job: job, outcomes)
        } else {
            outcomeQuery = Self.updateResults(outcomes)
        }
        switch (outcomeQuery, retryQuery) {
        case (let outcomes?, let retries?):
            return try await client.withTransaction(logger: logger) { connection in
                let recorded = try await connection.query(outcomes, logger: logger).collect().count
                return recorded + (try await connection.query(retries, logger: logger).collect().count)
            }
        case (let only?, nil), (nil, let only?):
            return try await client.query(only, logger: logger).collect().count
        case (nil, nil):
            return 0
        }
    }

    /// One `UPDATE … FROM unnest(…)` putting items without an outcome back to wait, as
    /// ``deferItem(tenant:job:index:retry:)`` does one.
    private static func deferItems(tenant: TenantID, job: JobID, _ retries: [Int: JobItemRetry]) -> PostgresQuery {
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
                RETURNING 1
                """, binds: binds)
    }

    private struct ItemKey: Hashable {
        var tenant: String
        var job: String
        var index: Int
    }

    /// Writes a batch of outcomes in one statement: each item without an outcome takes its own;
    /// an item that already has one (recorded by another instance, or twice in this batch: the
    /// first wins) keeps it. The items whose callers want them are read back afterwards (an
    /// outcome, once written, never changes).
    static func writeResults(_ batch: [ResultWrite], client: BoundedPostgresClient, logger: Logger) async
        -> [Result<ResultAnswer, any Error>]
    {
        var first: [ItemKey: Int] = [:]
        var writes: [ResultWrite] = []
        writes.reserveCapacity(batch.count)
        for (offset, write) in batch.enumerated() {
            let key = ItemKey(tenant: write.tenant.rawValue, job: write.job.rawValue, index: write.index)
            if first[key] == nil {
                first[key] = offset
                writes.append(write)
            }
        }
        var written: Set<ItemKey> = []
        do {
            var needs: [ItemKey: (tenant: TenantID, job: JobID, upTo: Int)] = [:]
            for write in writes {
                let key = ItemKey(tenant: write.tenant.rawValue, job: write.job.rawValue, index: 0)
                needs[key] = (write.tenant, write.job, max(needs[key]?.upTo ?? 0, Self.after(write.index)))
            }
            try await materialize(client, needs: Array(needs.values), logger: logger)
            for row in try await client.query(updateResults(writes), logger: logger).collect() {
                let cells = row.makeRandomAccess()
                written.insert(
                    ItemKey(
                        tenant: try cells[0].decode(String.self), job: try cells[1].decode(String.self),
                        index: try cells[2].decode(Int.self)))
            }
        } catch {
            // One statement: nothing of it was committed. Every caller gets the error.
            return batch.map { _ in .failure(error) }
        }
        var answers: [Result<ResultAnswer, any Error>] = []
        answers.reserveCapacity(batch.count)
        for (offset, write) in batch.enumerated() {
            let key = ItemKey(tenant: write.tenant.rawValue, job: write.job.rawValue, index: write.index)
            let recorded = first[key] == offset && written.contains(key)
            guard write.readBack else {
                answers.append(.success(recorded ? .recorded(nil) : .alreadyRecorded(nil)))
                continue
            }
            do {
                let rows = try await client.query(
                    """
                    SELECT \(unescaped: jobItemColumns(prefix: "")) FROM job_item
                    WHERE tenant = \(write.tenant.rawValue) AND job_id = \(write.job.rawValue) AND idx = \(write.index)
                    """, logger: logger
                ).collect()
                guard let row = rows.first else { throw StoreError.notFound("item \(write.index) of job \(write.job)") }
                let item = try jobItem(from: row)
                answers.append(.success(recorded ? .recorded(item) : .alreadyRecorded(item)))
            } catch {
                answers.append(.failure(error))
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

    /// ``updateResults(_:)`` for one job's plain successes (``isPlainSuccess(_:)``), the usual
    /// commit group of a batch: the same row changes and the same counter row, with the job as
    /// two parameters and four arrays instead of sixteen (the statement the server spends most of
    /// a PostgreSQL batch's time on; the arrays are most of what the client encodes for it).
    ///
    /// The job reaches the join as a column of every row (`array_fill`), not as a constant: with
    /// `item.tenant = $1 AND item.job_id = $2`, a job inserted moments ago (no statistics yet,
    /// one row estimated) is planned as a hash join over all of the job's items (100,000 rows
    /// read for each group of ~50, several times the server's CPU a notification); joined on the
    /// rows' own columns it stays a primary-key lookup per row, as in ``updateResults(_:)``.
    static func updatePlainSuccesses(tenant: TenantID, job: JobID, _ writes: [ResultWrite]) -> PostgresQuery {
        var indexes: [Int64] = []
        var apnsIDs: [String] = []
        var finished: [Int64] = []
        var attempts: [Int32] = []
        indexes.reserveCapacity(writes.count)
        apnsIDs.reserveCapacity(writes.count)
        finished.reserveCapacity(writes.count)
        attempts.reserveCapacity(writes.count)
        for write in writes {
            indexes.append(Int64(write.index))
            // An apns-id is a UUID, never empty: '' stands for none (NULLIF below).
            apnsIDs.append(write.result.apnsID?.rawValue ?? "")
            finished.append(millis(write.result.finishedAt))
            attempts.append(Self.count(write.result.attempts))
        }
        var binds = PostgresBindings(capacity: 6)
        binds.append(tenant.rawValue)
        binds.append(job.rawValue)
        binds.append(indexes)
        binds.append(apnsIDs)
        binds.append(finished)
        binds.append(attempts)
        let sql = """
            WITH written AS (
            UPDATE job_item AS item SET state = 'sent', status = 200, reason = NULL, message = NULL,
                result_apns_id = NULLIF(t.apns_id, ''), apns_timestamp_ms = NULL, finished_at_ms = t.finished_at,
                claimant = NULL, lease_until_ms = NULL, attempts = greatest(item.attempts, t.attempts),
                next_attempt_ms = NULL
            FROM unnest(array_fill($1::text, ARRAY[cardinality($3::bigint[])]),
                        array_fill($2::text, ARRAY[cardinality($3::bigint[])]),
                        $3::bigint[], $4::text[], $5::bigint[], $6::int[])
                 AS t(tenant, job_id, idx, apns_id, finished_at, attempts)
            WHERE item.tenant = t.tenant AND item.job_id = t.job_id AND item.idx = t.idx
              AND item.state IN ('pending', 'retrying')
            RETURNING item.idx
            ), counted AS (
                INSERT INTO job_outcome AS o (tenant, job_id, state, status, reason, n)
                SELECT $1, $2, 'sent', 200, NULL, count(*) FROM written HAVING count(*) > 0
                ON CONFLICT (tenant, job_id, state, status, reason) DO UPDATE SET n = o.n + excluded.n
            )
            SELECT idx FROM written
            """
        return PostgresQuery(unsafeSQL: sql, binds: binds)
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
            uniqueIDs.append(Self.isPlainSuccess(result) ? "" : result.uniqueID ?? "")
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
