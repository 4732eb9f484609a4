import Foundation
import HeraldStore
import PostgresNIO

// Admin accounts, their tokens and the audit log (migration v13), shared by every instance on
// the database: a token revoked through one instance stops working on all of them at once.
extension PostgresPushStore: AdminDirectory {
    public func createAdminAccount(_ account: AdminAccount) async throws -> Bool {
        try await !client.query(
            """
            INSERT INTO admin_account (name, role, created_at_ms)
            VALUES (\(account.name), \(account.role.rawValue), \(Self.millis(account.createdAt)))
            ON CONFLICT DO NOTHING RETURNING 1
            """, logger: logger
        ).collect().isEmpty
    }

    public func adminAccounts() async throws -> [AdminAccount] {
        try await client.query("SELECT name, role, created_at_ms, password_hash IS NOT NULL FROM admin_account ORDER BY name", logger: logger)
            .collect().map { try Self.account($0.makeRandomAccess()) }
    }

    public func adminAccount(named name: String) async throws -> AdminAccount? {
        try await client.query(
            "SELECT name, role, created_at_ms, password_hash IS NOT NULL FROM admin_account WHERE name = \(name)", logger: logger
        ).collect().first.map { try Self.account($0.makeRandomAccess()) }
    }

    public func setAdminRole(_ role: AdminRole, account name: String) async throws -> Bool {
        try await !client.query(
            "UPDATE admin_account SET role = \(role.rawValue) WHERE name = \(name) RETURNING 1", logger: logger
        ).collect().isEmpty
    }

    public func deleteAdminAccount(named name: String) async throws -> Bool {
        // The account's tokens go with it (ON DELETE CASCADE).
        try await !client.query("DELETE FROM admin_account WHERE name = \(name) RETURNING 1", logger: logger)
            .collect().isEmpty
    }

    public func setAdminPassword(hash: String?, account name: String) async throws -> Bool {
        try await !client.query(
            """
            UPDATE admin_account SET password_hash = \(hash), failed_logins = 0, locked_until_ms = NULL
            WHERE name = \(name) RETURNING 1
            """, logger: logger
        ).collect().isEmpty
    }

    public func adminLoginState(account name: String) async throws -> AdminLoginState? {
        guard
            let row = try await client.query(
                """
                SELECT name, role, created_at_ms, password_hash IS NOT NULL, password_hash, locked_until_ms
                FROM admin_account WHERE name = \(name)
                """, logger: logger
            ).collect().first
        else { return nil }
        let cells = row.makeRandomAccess()
        return AdminLoginState(
            account: try Self.account(cells), passwordHash: try cells[4].decode(String?.self),
            lockedUntil: try cells[5].decode(Int64?.self).map(Self.date))
    }

    public func recordAdminLoginFailure(account name: String, at: Date, threshold: Int, lockFor: Duration) async throws -> Date? {
        let until = at.addingTimeInterval(Double(OutboxWebhook.millis(lockFor)) / 1000)
        // One statement: the count and the lock move together whatever other instances do.
        let rows = try await client.query(
            """
            UPDATE admin_account SET
                failed_logins = CASE WHEN failed_logins + 1 >= \(Int32(clamping: max(1, threshold))) THEN 0 ELSE failed_logins + 1 END,
                locked_until_ms = CASE WHEN failed_logins + 1 >= \(Int32(clamping: max(1, threshold)))
                    THEN \(Self.millis(until)) ELSE locked_until_ms END
            WHERE name = \(name)
            RETURNING failed_logins = 0
            """, logger: logger
        ).collect()
        guard let row = rows.first, try row.makeRandomAccess()[0].decode(Bool.self) else { return nil }
        return until
    }

    public func recordAdminLoginSuccess(account name: String) async throws {
        try await client.query(
            "UPDATE admin_account SET failed_logins = 0, locked_until_ms = NULL WHERE name = \(name)", logger: logger)
    }

    public func addAdminToken(_ token: AdminTokenRecord, sha256: String) async throws {
        let expires = token.expiresAt.map(Self.millis)
        let inserted = try await client.query(
            """
            INSERT INTO admin_token (id, account, name, sha256, created_at_ms, expires_at_ms)
            SELECT \(token.id), name, \(token.name), \(sha256), \(Self.millis(token.createdAt)), \(expires)
            FROM admin_account WHERE name = \(token.account)
            RETURNING 1
            """, logger: logger
        ).collect()
        guard !inserted.isEmpty else { throw StoreError.notFound("admin account \(token.account)") }
    }

    public func adminTokens(account name: String) async throws -> [AdminTokenRecord] {
        try await client.query(
            """
            SELECT id, account, name, created_at_ms, expires_at_ms, revoked_at_ms FROM admin_token
            WHERE account = \(name) ORDER BY created_at_ms DESC, id
            """, logger: logger
        ).collect().map { try Self.token($0.makeRandomAccess()) }
    }

    public func revokeAdminToken(account name: String, id: String, at: Date) async throws -> Bool {
        try await !client.query(
            """
            UPDATE admin_token SET revoked_at_ms = \(Self.millis(at))
            WHERE account = \(name) AND id = \(id) AND revoked_at_ms IS NULL RETURNING 1
            """, logger: logger
        ).collect().isEmpty
    }

    public func authenticateAdminToken(sha256: String, now: Date) async throws -> (AdminAccount, AdminTokenRecord)? {
        guard
            let row = try await client.query(
                """
                SELECT t.id, t.account, t.name, t.created_at_ms, t.expires_at_ms, t.revoked_at_ms,
                       a.name, a.role, a.created_at_ms, a.password_hash IS NOT NULL
                FROM admin_token t JOIN admin_account a ON a.name = t.account
                WHERE t.sha256 = \(sha256)
                """, logger: logger
            ).collect().first
        else { return nil }
        let cells = row.makeRandomAccess()
        let token = try Self.token(cells)
        let account = try Self.account(cells, from: 6)
        return token.isValid(at: now) ? (account, token) : nil
    }

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) async throws -> Int64 {
        let rows = try await client.query(
            """
            INSERT INTO audit_log (at_ms, account, source, request_id, action, tenant, object, details)
            VALUES (\(Self.millis(entry.at)), \(entry.account), \(entry.source), \(entry.requestID), \(entry.action),
                    \(entry.tenant), \(entry.object), \(entry.detailsJSON))
            RETURNING id
            """, logger: logger
        ).collect()
        guard let row = rows.first else { throw StoreError.corrupt("the audit entry was not given an id") }
        return try row.makeRandomAccess()[0].decode(Int64.self)
    }

    public func auditEntries(_ query: AuditQuery) async throws -> [AuditEntry] {
        // Each filter is a parameter that is either NULL (no filter) or the value: one statement.
        let from = query.from.map(Self.millis)
        let to = query.to.map(Self.millis)
        return try await client.query(
            """
            SELECT id, at_ms, account, source, request_id, action, tenant, object, details FROM audit_log
            WHERE (\(query.tenant)::text IS NULL OR tenant = \(query.tenant))
              AND (\(query.account)::text IS NULL OR account = \(query.account))
              AND (\(query.action)::text IS NULL OR action = \(query.action))
              AND (\(from)::bigint IS NULL OR at_ms >= \(from))
              AND (\(to)::bigint IS NULL OR at_ms < \(to))
              AND (\(query.before)::bigint IS NULL OR id < \(query.before))
            ORDER BY id DESC LIMIT \(max(0, query.limit))
            """, logger: logger
        ).collect().map { row in
            let cells = row.makeRandomAccess()
            return AuditEntry(
                id: try cells[0].decode(Int64.self), at: Self.date(try cells[1].decode(Int64.self)),
                account: try cells[2].decode(String.self), source: try cells[3].decode(String?.self),
                requestID: try cells[4].decode(String?.self), action: try cells[5].decode(String.self),
                tenant: try cells[6].decode(String?.self), object: try cells[7].decode(String?.self),
                details: AuditEntry.details(fromJSON: try cells[8].decode(String.self)))
        }
    }

    public func pruneAudit(before cutoff: Date) async throws -> Int {
        try await client.query("DELETE FROM audit_log WHERE at_ms < \(Self.millis(cutoff)) RETURNING 1", logger: logger)
            .collect().count
    }

    private static func account(_ cells: PostgresRandomAccessRow, from first: Int = 0) throws -> AdminAccount {
        guard let role = AdminRole(rawValue: try cells[first + 1].decode(String.self)) else {
            throw StoreError.corrupt("admin account with an unknown role")
        }
        return AdminAccount(
            name: try cells[first].decode(String.self), role: role, createdAt: date(try cells[first + 2].decode(Int64.self)),
            hasPassword: try cells[first + 3].decode(Bool.self))
    }

    private static func token(_ cells: PostgresRandomAccessRow) throws -> AdminTokenRecord {
        AdminTokenRecord(
            id: try cells[0].decode(String.self), account: try cells[1].decode(String.self),
            name: try cells[2].decode(String.self), createdAt: date(try cells[3].decode(Int64.self)),
            expiresAt: try cells[4].decode(Int64?.self).map(date), revokedAt: try cells[5].decode(Int64?.self).map(date))
    }
}
