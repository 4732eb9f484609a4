import Foundation
import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// What several `herald serve` instances share besides jobs (migration v7): the webhook outbox,
// the retention sweep, the instance registry and lease renewal.

extension PostgresPushStore: WebhookOutboxStore {
    public func enqueueWebhooks(_ webhooks: [OutboxWebhook]) async throws {
        guard !webhooks.isEmpty else { return }
        let logger = self.logger
        try await client.withTransaction(logger: logger) { connection in
            for webhook in webhooks { try await Self.insertWebhook(webhook, connection, logger: logger) }
        }
    }

    /// One outbox row (its headers as JSON text), inside the caller's transaction.
    private static func insertWebhook(_ webhook: OutboxWebhook, _ connection: PostgresConnection, logger: Logger) async throws {
        let headers = String(decoding: try JSONEncoder().encode(webhook.request.headers), as: UTF8.self)
        try await connection.query(
            """
            INSERT INTO webhook_outbox (tenant, url, headers, body, timeout_ms, allow_private, attempt,
                                        max_attempts, backoff_ms, next_attempt_ms)
            VALUES (\(webhook.tenant.rawValue), \(webhook.request.url), \(headers),
                    \(ByteBuffer(bytes: webhook.request.body)), \(OutboxWebhook.millis(webhook.request.timeout)),
                    \(webhook.request.allowPrivateAddresses), \(Self.count(webhook.attempt)),
                    \(Self.count(webhook.maxAttempts)), \(OutboxWebhook.millis(webhook.backoff)),
                    \(Self.millis(webhook.nextAttemptAt)))
            """, logger: logger)
    }

    /// `FOR UPDATE SKIP LOCKED`: instances claiming at once each get other deliveries.
    public func claimDueWebhooks(now: Date, claimUntil: Date, limit: Int) async throws -> [OutboxWebhook] {
        guard limit > 0 else { return [] }
        let nowMillis = Self.millis(now)
        let rows = try await client.query(
            """
            WITH due AS (
                SELECT id FROM webhook_outbox
                WHERE next_attempt_ms <= \(nowMillis) AND (claimed_until_ms IS NULL OR claimed_until_ms <= \(nowMillis))
                ORDER BY next_attempt_ms, id LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            UPDATE webhook_outbox AS w SET claimed_until_ms = \(Self.millis(claimUntil)) FROM due WHERE w.id = due.id
            RETURNING w.id, w.tenant, w.url, w.headers, w.body, w.timeout_ms, w.allow_private, w.attempt,
                      w.max_attempts, w.backoff_ms, w.next_attempt_ms
            """, logger: logger
        ).collect()
        var claimed: [OutboxWebhook] = []
        for row in rows {
            let cells = row.makeRandomAccess()
            let id = try cells[0].decode(Int64.self)
            guard let tenant = try? TenantID(try cells[1].decode(String.self)),
                let headers = try? JSONDecoder().decode(
                    [String: String].self, from: Data(try cells[3].decode(String.self).utf8))
            else {
                // A row this version cannot read is dropped rather than retried forever.
                try await removeWebhook(id: id)
                continue
            }
            claimed.append(
                OutboxWebhook(
                    id: id, tenant: tenant,
                    request: WebhookRequest(
                        url: try cells[2].decode(String.self), headers: headers,
                        body: Array(buffer: try cells[4].decode(ByteBuffer.self)),
                        timeout: .milliseconds(try cells[5].decode(Int64.self)),
                        allowPrivateAddresses: try cells[6].decode(Bool.self)),
                    attempt: try cells[7].decode(Int.self), maxAttempts: try cells[8].decode(Int.self),
                    backoff: .milliseconds(try cells[9].decode(Int64.self)),
                    nextAttemptAt: Self.date(try cells[10].decode(Int64.self))))
        }
        return claimed.sorted { ($0.nextAttemptAt, $0.id) < ($1.nextAttemptAt, $1.id) }
    }

    public func removeWebhook(id: Int64) async throws {
        try await client.query("DELETE FROM webhook_outbox WHERE id = \(id)", logger: logger)
    }

    public func rescheduleWebhook(id: Int64, attempt: Int, backoff: Duration, nextAttemptAt: Date) async throws {
        try await client.query(
            """
            UPDATE webhook_outbox SET attempt = \(Self.count(attempt)), backoff_ms = \(OutboxWebhook.millis(backoff)),
                next_attempt_ms = \(Self.millis(nextAttemptAt)), claimed_until_ms = NULL
            WHERE id = \(id)
            """, logger: logger)
    }

    @discardableResult
    public func releaseWebhookClaims() async throws -> Int {
        try await client.query(
            "UPDATE webhook_outbox SET claimed_until_ms = NULL WHERE claimed_until_ms IS NOT NULL RETURNING 1",
            logger: logger
        ).collect().count
    }

    public func outboxCounts() async throws -> [TenantID: Int] {
        var counts: [TenantID: Int] = [:]
        for row in try await client.query(
            "SELECT tenant, count(*) FROM webhook_outbox GROUP BY tenant", logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            if let tenant = try? TenantID(try cells[0].decode(String.self)) {
                counts[tenant] = try cells[1].decode(Int.self)
            }
        }
        return counts
    }
}

extension PostgresPushStore: StoreUpkeep {
    /// Each transaction takes the oldest expired job `FOR UPDATE SKIP LOCKED`, so instances
    /// sweeping at once work on different jobs. A job's item rows go first (`itemsPerTransaction`
    /// a transaction), then its chunk rows (one a transaction, whatever its item count: a row of
    /// arrays), then the job.
    public func deleteExpiredJobs(before cutoff: Date, itemsPerTransaction: Int, maxItems: Int) async throws
        -> RetentionSweep
    {
        let cutoffMillis = Self.millis(cutoff)
        let step = max(1, itemsPerTransaction)
        let logger = self.logger
        var sweep = RetentionSweep()
        while true {
            guard sweep.items < maxItems else {
                sweep.complete = false
                return sweep
            }
            let (items, deletedJob, found) = try await client.withTransaction(logger: logger) {
                connection -> (Int, Bool, Bool) in
                let rows = try await connection.query(
                    """
                    SELECT tenant, id, EXISTS (SELECT 1 FROM job_chunk c WHERE c.tenant = job.tenant AND c.job_id = job.id)
                    FROM job
                    WHERE state IN ('finished', 'cancelled') AND updated_at_ms < \(cutoffMillis)
                    ORDER BY updated_at_ms LIMIT 1
                    FOR UPDATE OF job SKIP LOCKED
                    """, logger: logger
                ).collect()
                guard let row = rows.first else { return (0, false, false) }
                let cells = row.makeRandomAccess()
                let tenant = try cells[0].decode(String.self)
                let id = try cells[1].decode(String.self)
                // A job written as chunk rows (v9.1-pg) is counted by its chunks, whose items may
                // also have rows; an older job's items are its rows.
                let chunked = try cells[2].decode(Bool.self)
                let rowsDeleted = try await connection.query(
                    """
                    DELETE FROM job_item WHERE tenant = \(tenant) AND job_id = \(id) AND idx IN (
                        SELECT idx FROM job_item WHERE tenant = \(tenant) AND job_id = \(id) ORDER BY idx LIMIT \(step))
                    RETURNING 1
                    """, logger: logger
                ).collect().count
                let items = chunked ? 0 : rowsDeleted
                guard rowsDeleted < step else { return (items, false, true) }
                // Then its chunk rows, one a transaction (up to 1,000 items each).
                let chunks = try await connection.query(
                    """
                    DELETE FROM job_chunk WHERE tenant = \(tenant) AND job_id = \(id) AND first_idx = (
                        SELECT min(first_idx) FROM job_chunk WHERE tenant = \(tenant) AND job_id = \(id))
                    RETURNING count
                    """, logger: logger
                ).collect()
                if let chunk = chunks.first {
                    return (items + (try chunk.makeRandomAccess()[0].decode(Int.self)), false, true)
                }
                try await connection.query("DELETE FROM job WHERE tenant = \(tenant) AND id = \(id)", logger: logger)
                return (items, true, true)
            }
            guard found else { return sweep }
            sweep.items += items
            if deletedJob { sweep.jobs += 1 }
        }
    }

    /// Nothing: PostgreSQL's autovacuum reclaims the deleted rows.
    public func compact() async throws {}
}

extension PostgresPushStore: InstanceRegistry {
    public func registerInstance(_ instance: InstanceRecord) async throws {
        try await client.query(
            """
            INSERT INTO herald_instance (id, claimant, host, pid, started_at_ms, last_heartbeat_ms)
            VALUES (\(instance.id), \(instance.claimant), \(instance.host), \(Int32(clamping: instance.pid)),
                    \(Self.millis(instance.startedAt)), \(Self.millis(instance.lastHeartbeat)))
            ON CONFLICT (id) DO UPDATE SET claimant = excluded.claimant, host = excluded.host, pid = excluded.pid,
                started_at_ms = excluded.started_at_ms, last_heartbeat_ms = excluded.last_heartbeat_ms
            """, logger: logger)
    }

    public func heartbeat(instance id: String, at: Date) async throws -> Bool {
        try await !client.query(
            """
            UPDATE herald_instance SET last_heartbeat_ms = greatest(last_heartbeat_ms, \(Self.millis(at)))
            WHERE id = \(id) RETURNING 1
            """, logger: logger
        ).collect().isEmpty
    }

    public func instances() async throws -> [InstanceRecord] {
        try await client.query(
            """
            SELECT id, claimant, host, pid, started_at_ms, last_heartbeat_ms FROM herald_instance
            ORDER BY started_at_ms, id
            """, logger: logger
        ).collect().map { row in
            let cells = row.makeRandomAccess()
            return InstanceRecord(
                id: try cells[0].decode(String.self), claimant: try cells[1].decode(String.self),
                host: try cells[2].decode(String.self), pid: try cells[3].decode(Int.self),
                startedAt: Self.date(try cells[4].decode(Int64.self)),
                lastHeartbeat: Self.date(try cells[5].decode(Int64.self)))
        }
    }

    @discardableResult
    public func removeInstance(id: String) async throws -> Bool {
        try await !client.query("DELETE FROM herald_instance WHERE id = \(id) RETURNING 1", logger: logger)
            .collect().isEmpty
    }

    @discardableResult
    public func releaseLeases(heldBy claimant: String) async throws -> Int {
        let logger = self.logger
        var released = 0
        // Its claim ranges, a job at a time (each takeover holds its job).
        for row in try await client.query(
            "SELECT DISTINCT tenant, job_id FROM job_claim_range WHERE claimant = \(claimant)", logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            guard let tenant = try? TenantID(try cells[0].decode(String.self)),
                let job = try? JobID(try cells[1].decode(String.self))
            else { throw StoreError.corrupt("claim range of an invalid tenant or job id") }
            released += try await client.withTransaction(logger: logger) { connection in
                guard try await Self.lockJob(connection, tenant: tenant, job: job, runnable: false, logger: logger) != nil
                else { return 0 }
                return try await Self.takeOverRanges(connection, tenant: tenant, job: job, .claimant(claimant), logger: logger)
            }
        }
        return released
            + (try await client.query(
                """
                UPDATE job_item SET claimant = NULL, lease_until_ms = NULL
                WHERE claimant = \(claimant) AND state IN ('pending', 'retrying')
                RETURNING 1
                """, logger: logger
            ).collect().count)
    }

    /// Items leased and still open per claimant: rows, and the items of live claim ranges of
    /// unfinished jobs that have neither a row nor a plain success record.
    public func leasedItemCounts(now: Date) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        let nowMillis = Self.millis(now)
        for row in try await client.query(
            """
            SELECT claimant, count(*) FROM job_item
            WHERE claimant IS NOT NULL AND state IN ('pending', 'retrying') AND lease_until_ms > \(nowMillis)
            GROUP BY claimant
            UNION ALL
            SELECT r.claimant, sum(\(unescaped: Self.openItemsOfRange))::bigint
            FROM job_claim_range r JOIN job j ON j.tenant = r.tenant AND j.id = r.job_id
            WHERE j.state IN ('accepted', 'running') AND r.lease_until_ms > \(nowMillis)
            GROUP BY r.claimant
            """, logger: logger
        ).collect() {
            let cells = row.makeRandomAccess()
            let held = try cells[1].decode(Int.self)
            if held > 0 { counts[try cells[0].decode(String.self), default: 0] += held }
        }
        return counts
    }

    /// The items of a claim range `r` still open: neither a row nor a plain success record.
    static let openItemsOfRange = """
        greatest(0, (r.end_idx - r.first_idx)
            - (SELECT count(*) FROM job_item i
               WHERE i.tenant = r.tenant AND i.job_id = r.job_id AND i.idx >= r.first_idx AND i.idx < r.end_idx)
            - (SELECT count(*) FROM job_sent s, unnest(s.idxs) AS x
               WHERE s.tenant = r.tenant AND s.job_id = r.job_id
                 AND s.block BETWEEN r.first_idx >> \(sentBlockShift) AND (r.end_idx - 1) >> \(sentBlockShift)
                 AND x >= r.first_idx AND x < r.end_idx))
        """

    @discardableResult
    public func renewLeases(tenant: TenantID, job: JobID, claimant: String, leaseUntil: Date) async throws -> Int {
        let until = Self.millis(leaseUntil)
        let ranges = try await client.query(
            """
            UPDATE job_claim_range r SET lease_until_ms = greatest(r.lease_until_ms, \(until))
            WHERE r.claimant = \(claimant) AND r.tenant = \(tenant.rawValue) AND r.job_id = \(job.rawValue)
            RETURNING \(unescaped: Self.openItemsOfRange)
            """, logger: logger
        ).collect().reduce(0) { $0 + ((try? $1.makeRandomAccess()[0].decode(Int.self)) ?? 0) }
        return ranges
            + (try await client.query(
                """
                UPDATE job_item SET lease_until_ms = greatest(lease_until_ms, \(until))
                WHERE claimant = \(claimant) AND tenant = \(tenant.rawValue) AND job_id = \(job.rawValue)
                  AND state IN ('pending', 'retrying')
                RETURNING 1
                """, logger: logger
            ).collect().count)
    }
}

extension PostgresPushStore: JobEndLedger {
    /// The mark and the outbox row in one transaction; the mark's `end_told_ms IS NULL` makes
    /// instances telling the same end at once tell it once (the second waits on the row, then
    /// finds it told).
    public func recordJobEnd(tenant: TenantID, job: JobID, webhook: OutboxWebhook?, at: Date) async throws -> Bool {
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            let marked = try await connection.query(
                """
                UPDATE job SET end_told_ms = \(Self.millis(at))
                WHERE tenant = \(tenant.rawValue) AND id = \(job.rawValue) AND end_told_ms IS NULL
                  AND state IN ('finished', 'cancelled')
                RETURNING id
                """, logger: logger
            ).collect()
            guard !marked.isEmpty else { return false }
            if let webhook { try await Self.insertWebhook(webhook, connection, logger: logger) }
            return true
        }
    }

    public func untoldJobEnds(endedBefore: Date, limit: Int) async throws -> [Job] {
        guard limit > 0 else { return [] }
        let rows = try await client.query(
            """
            SELECT \(unescaped: Self.jobColumns) FROM job
            WHERE end_told_ms IS NULL AND state IN ('finished', 'cancelled') AND updated_at_ms < \(Self.millis(endedBefore))
            ORDER BY updated_at_ms LIMIT \(limit)
            """, logger: logger
        ).collect()
        return try rows.map(Self.job(from:))
    }
}
