import Foundation
import GRDB
import HeraldCore

// The webhook outbox (`webhook_outbox`, migration v3): plugin webhooks are stored before they
// are posted, so that a burst of them is a bounded table (not a task each) and they survive a
// restart. A fixed number of senders (`WebhookOutbox` in Herald) claims the due ones.

extension SQLitePushStore: WebhookOutboxStore {
    /// Stores deliveries in the outbox, in one transaction.
    public func enqueueWebhooks(_ webhooks: [OutboxWebhook]) async throws {
        guard !webhooks.isEmpty else { return }
        var prepared: [StatementArguments] = []
        for webhook in webhooks { prepared.append(try Self.webhookArguments(webhook)) }
        let rows = prepared
        try await pool.write { db in
            let statement = try db.makeStatement(sql: Self.insertWebhookSQL)
            for row in rows { try statement.execute(arguments: row) }
        }
    }

    static let insertWebhookSQL = """
        INSERT INTO webhook_outbox (tenant, url, headers, body, timeout_ms, allow_private, attempt, max_attempts,
                                    backoff_ms, next_attempt_ms)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    /// The outbox row's values, in ``insertWebhookSQL``'s order.
    static func webhookArguments(_ webhook: OutboxWebhook) throws -> StatementArguments {
        let headers = try JSONEncoder().encode(webhook.request.headers)
        return [
            webhook.tenant.rawValue, webhook.request.url, String(decoding: headers, as: UTF8.self),
            Data(webhook.request.body), Self.durationMillis(webhook.request.timeout),
            webhook.request.allowPrivateAddresses, webhook.attempt, webhook.maxAttempts,
            Self.durationMillis(webhook.backoff), try Self.millis(webhook.nextAttemptAt, field: "next_attempt_at"),
        ]
    }

    /// Claims up to `limit` deliveries due at `now` (oldest due first) until `claimUntil`.
    public func claimDueWebhooks(now: Date, claimUntil: Date, limit: Int) async throws -> [OutboxWebhook] {
        guard limit > 0 else { return [] }
        let nowMillis = try Self.millis(now, field: "now")
        let until = try Self.millis(claimUntil, field: "claim_until")
        return try await pool.write { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM webhook_outbox INDEXED BY webhook_outbox_due
                    WHERE next_attempt_ms <= ? AND (claimed_until_ms IS NULL OR claimed_until_ms <= ?)
                    ORDER BY next_attempt_ms, id LIMIT ?
                    """,
                arguments: [nowMillis, nowMillis, limit])
            var claimed: [OutboxWebhook] = []
            for row in rows {
                let id: Int64 = row["id"]
                try db.execute(
                    sql: "UPDATE webhook_outbox SET claimed_until_ms = ? WHERE id = ?", arguments: [until, id])
                if let webhook = Self.outboxWebhook(row) {
                    claimed.append(webhook)
                } else {
                    // A row this version cannot read is dropped rather than retried forever.
                    try db.execute(sql: "DELETE FROM webhook_outbox WHERE id = ?", arguments: [id])
                }
            }
            return claimed
        }
    }

    /// Removes a delivery (delivered, refused, or out of attempts).
    public func removeWebhook(id: Int64) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM webhook_outbox WHERE id = ?", arguments: [id])
        }
    }

    /// Records a failed attempt: the delivery is due again at `nextAttemptAt`, with `backoff`.
    public func rescheduleWebhook(id: Int64, attempt: Int, backoff: Duration, nextAttemptAt: Date) async throws {
        let next = try Self.millis(nextAttemptAt, field: "next_attempt_at")
        try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE webhook_outbox SET attempt = ?, backoff_ms = ?, next_attempt_ms = ?, claimed_until_ms = NULL
                    WHERE id = ?
                    """,
                arguments: [attempt, Self.durationMillis(backoff), next, id])
        }
    }

    /// Releases every claim (at start: the process that made them is gone).
    @discardableResult
    public func releaseWebhookClaims() async throws -> Int {
        try await pool.write { db in
            try db.execute(sql: "UPDATE webhook_outbox SET claimed_until_ms = NULL WHERE claimed_until_ms IS NOT NULL")
            return db.changesCount
        }
    }

    /// Deliveries waiting in the outbox, per tenant.
    public func outboxCounts() async throws -> [TenantID: Int] {
        try await pool.read { db in
            var counts: [TenantID: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT tenant, count(*) AS n FROM webhook_outbox GROUP BY tenant") {
                let raw: String = row["tenant"]
                if let tenant = try? TenantID(raw) { counts[tenant] = row["n"] }
            }
            return counts
        }
    }

    static func durationMillis(_ duration: Duration) -> Int64 { OutboxWebhook.millis(duration) }

    private static func outboxWebhook(_ row: Row) -> OutboxWebhook? {
        let tenantRaw: String = row["tenant"]
        let headersRaw: String = row["headers"]
        guard let tenant = try? TenantID(tenantRaw),
            let headers = try? JSONDecoder().decode([String: String].self, from: Data(headersRaw.utf8))
        else { return nil }
        let body: Data = row["body"]
        let timeout: Int64 = row["timeout_ms"]
        let backoff: Int64 = row["backoff_ms"]
        let next: Int64 = row["next_attempt_ms"]
        return OutboxWebhook(
            id: row["id"], tenant: tenant,
            request: WebhookRequest(
                url: row["url"], headers: headers, body: [UInt8](body), timeout: .milliseconds(timeout),
                allowPrivateAddresses: row["allow_private"]),
            attempt: row["attempt"], maxAttempts: row["max_attempts"], backoff: .milliseconds(backoff),
            nextAttemptAt: date(next))
    }
}

extension SQLitePushStore: JobEndLedger {
    public func recordJobEnd(tenant: TenantID, job: JobID, webhook: OutboxWebhook?, at: Date) async throws -> Bool {
        let at = try Self.millis(at, field: "end_told_at")
        let arguments = try webhook.map(Self.webhookArguments)
        return try await pool.write { db in
            try db.execute(
                sql: """
                    UPDATE job SET end_told_ms = ?
                    WHERE tenant = ? AND id = ? AND end_told_ms IS NULL AND state IN ('finished', 'cancelled')
                    """,
                arguments: [at, tenant.rawValue, job.rawValue])
            guard db.changesCount > 0 else { return false }
            if let arguments { try db.execute(sql: Self.insertWebhookSQL, arguments: arguments) }
            return true
        }
    }

    public func untoldJobEnds(endedBefore: Date, limit: Int) async throws -> [Job] {
        guard limit > 0 else { return [] }
        let before = try Self.millis(endedBefore, field: "ended_before")
        return try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM job INDEXED BY job_end_untold
                    WHERE end_told_ms IS NULL AND state IN ('finished', 'cancelled') AND updated_at_ms < ?
                    ORDER BY updated_at_ms LIMIT ?
                    """,
                arguments: [before, limit]
            ).map { try Self.job(from: $0) }
        }
    }
}
