import Foundation
import GRDB

// Admin accounts, their tokens and the audit log (migration v13).
extension SQLitePushStore: AdminDirectory {
    public func createAdminAccount(_ account: AdminAccount) async throws -> Bool {
        let created = try Self.millis(account.createdAt, field: "created_at")
        return try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO admin_account (name, role, created_at_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [account.name, account.role.rawValue, created])
            return db.changesCount == 1
        }
    }

    public func adminAccounts() async throws -> [AdminAccount] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT name, role, created_at_ms, password_hash IS NOT NULL FROM admin_account ORDER BY name").map { try Self.account($0) }
        }
    }

    public func adminAccount(named name: String) async throws -> AdminAccount? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT name, role, created_at_ms, password_hash IS NOT NULL FROM admin_account WHERE name = ?", arguments: [name])
                .map { try Self.account($0) }
        }
    }

    public func setAdminRole(_ role: AdminRole, account name: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "UPDATE admin_account SET role = ? WHERE name = ?", arguments: [role.rawValue, name])
            return db.changesCount == 1
        }
    }

    public func deleteAdminAccount(named name: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM admin_token WHERE account = ?", arguments: [name])
            try db.execute(sql: "DELETE FROM admin_account WHERE name = ?", arguments: [name])
            return db.changesCount == 1
        }
    }

    public func setAdminPassword(hash: String?, account name: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE admin_account SET password_hash = ?, failed_logins = 0, locked_until_ms = NULL WHERE name = ?",
                arguments: [hash, name])
            return db.changesCount == 1
        }
    }

    public func adminLoginState(account name: String) async throws -> AdminLoginState? {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT name, role, created_at_ms, password_hash IS NOT NULL, password_hash, locked_until_ms
                        FROM admin_account WHERE name = ?
                        """,
                    arguments: [name])
            else { return nil }
            let locked: Int64? = row[5]
            return AdminLoginState(account: try Self.account(row), passwordHash: row[4], lockedUntil: locked.map(Self.date))
        }
    }

    public func recordAdminLoginFailure(account name: String, at: Date, threshold: Int, lockFor: Duration) async throws -> Date? {
        let until = at.addingTimeInterval(Double(OutboxWebhook.millis(lockFor)) / 1000)
        let untilMillis = Self.clampedMillis(until)
        return try await pool.write { db -> Date? in
            try db.execute(sql: "UPDATE admin_account SET failed_logins = failed_logins + 1 WHERE name = ?", arguments: [name])
            guard let failed = try Int.fetchOne(db, sql: "SELECT failed_logins FROM admin_account WHERE name = ?", arguments: [name]),
                failed >= max(1, threshold)
            else { return nil }
            try db.execute(
                sql: "UPDATE admin_account SET failed_logins = 0, locked_until_ms = ? WHERE name = ?", arguments: [untilMillis, name])
            return until
        }
    }

    public func recordAdminLoginSuccess(account name: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE admin_account SET failed_logins = 0, locked_until_ms = NULL WHERE name = ?", arguments: [name])
        }
    }

    public func addAdminToken(_ token: AdminTokenRecord, sha256: String) async throws {
        let created = try Self.millis(token.createdAt, field: "created_at")
        let expires = try token.expiresAt.map { date throws(StoreError) in try Self.millis(date, field: "expires_at") }
        try await pool.write { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM admin_account WHERE name = ?", arguments: [token.account]) != nil
            else { throw StoreError.notFound("admin account \(token.account)") }
            try db.execute(
                sql: """
                    INSERT INTO admin_token (id, account, name, sha256, created_at_ms, expires_at_ms)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [token.id, token.account, token.name, sha256, created, expires])
        }
    }

    public func adminTokens(account name: String) async throws -> [AdminTokenRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, account, name, created_at_ms, expires_at_ms, revoked_at_ms FROM admin_token
                    WHERE account = ? ORDER BY created_at_ms DESC, id
                    """,
                arguments: [name]
            ).map(Self.token)
        }
    }

    public func revokeAdminToken(account name: String, id: String, at: Date) async throws -> Bool {
        let revoked = Self.clampedMillis(at)
        return try await pool.write { db in
            try db.execute(
                sql: "UPDATE admin_token SET revoked_at_ms = ? WHERE account = ? AND id = ? AND revoked_at_ms IS NULL",
                arguments: [revoked, name, id])
            return db.changesCount == 1
        }
    }

    public func authenticateAdminToken(sha256: String, now: Date) async throws -> (AdminAccount, AdminTokenRecord)? {
        let found = try await pool.read { db -> (AdminAccount, AdminTokenRecord)? in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT t.id, t.account, t.name, t.created_at_ms, t.expires_at_ms, t.revoked_at_ms,
                               a.name, a.role, a.created_at_ms, a.password_hash IS NOT NULL
                        FROM admin_token t JOIN admin_account a ON a.name = t.account
                        WHERE t.sha256 = ?
                        """,
                    arguments: [sha256])
            else { return nil }
            let token = try Self.token(row)
            let account = try Self.account(row, from: 6)
            return (account, token)
        }
        guard let found, found.1.isValid(at: now) else { return nil }
        return found
    }

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) async throws -> Int64 {
        let at = Self.clampedMillis(entry.at)
        return try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO audit_log (at_ms, account, source, request_id, action, tenant, object, details)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    at, entry.account, entry.source, entry.requestID, entry.action, entry.tenant, entry.object,
                    entry.detailsJSON,
                ])
            return db.lastInsertedRowID
        }
    }

    public func auditEntries(_ query: AuditQuery) async throws -> [AuditEntry] {
        var conditions: [String] = []
        var arguments: StatementArguments = []
        if let tenant = query.tenant {
            conditions.append("tenant = ?")
            arguments += [tenant]
        }
        if let account = query.account {
            conditions.append("account = ?")
            arguments += [account]
        }
        if let action = query.action {
            conditions.append("action = ?")
            arguments += [action]
        }
        if let from = query.from {
            conditions.append("at_ms >= ?")
            arguments += [Self.clampedMillis(from)]
        }
        if let to = query.to {
            conditions.append("at_ms < ?")
            arguments += [Self.clampedMillis(to)]
        }
        if let before = query.before {
            conditions.append("id < ?")
            arguments += [before]
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        arguments += [max(0, query.limit)]
        let sql = """
            SELECT id, at_ms, account, source, request_id, action, tenant, object, details FROM audit_log
            \(filter) ORDER BY id DESC LIMIT ?
            """
        let bound = arguments
        return try await pool.read { db in
            try Row.fetchAll(db, sql: sql, arguments: bound).map { row in
                AuditEntry(
                    id: row[0], at: Self.date(row[1]), account: row[2], source: row[3], requestID: row[4], action: row[5],
                    tenant: row[6], object: row[7], details: AuditEntry.details(fromJSON: row[8]))
            }
        }
    }

    public func pruneAudit(before cutoff: Date) async throws -> Int {
        let cutoffMillis = Self.clampedMillis(cutoff)
        return try await pool.write { db in
            try db.execute(sql: "DELETE FROM audit_log WHERE at_ms < ?", arguments: [cutoffMillis])
            return db.changesCount
        }
    }

    /// The account in `row`'s columns `first` (name), `first + 1` (role), `first + 2` (created)
    /// and `first + 3` (whether it has a password).
    private static func account(_ row: Row, from first: Int = 0) throws -> AdminAccount {
        let role: String = row[first + 1]
        guard let parsed = AdminRole(rawValue: role) else { throw StoreError.corrupt("admin account with an unknown role") }
        return AdminAccount(name: row[first], role: parsed, createdAt: date(row[first + 2]), hasPassword: row[first + 3])
    }

    private static func token(_ row: Row) throws -> AdminTokenRecord {
        let expires: Int64? = row[4]
        let revoked: Int64? = row[5]
        return AdminTokenRecord(
            id: row[0], account: row[1], name: row[2], createdAt: date(row[3]), expiresAt: expires.map(date),
            revokedAt: revoked.map(date))
    }
}
