import Foundation

/// What an admin account may do. Each role includes the ones below it.
public enum AdminRole: String, Sendable, CaseIterable, Comparable {
    /// Reads tenants and their health, jobs, instances, the audit log and `/metrics`.
    case viewer
    /// Also changes tenants, credentials and API keys, reloads, and cancels jobs.
    case `operator`
    /// Also manages admin accounts and their tokens.
    case owner

    private var rank: Int {
        switch self {
        case .viewer: return 0
        case .operator: return 1
        case .owner: return 2
        }
    }

    public static func < (lhs: AdminRole, rhs: AdminRole) -> Bool { lhs.rank < rhs.rank }
}

/// A named operator: the admin API is called as one of these (with one of its tokens) or with the
/// break-glass admin token.
public struct AdminAccount: Sendable, Hashable {
    /// 1 to 64 of `a-z 0-9 . _ -`, starting with a letter or digit (``AdminAccount/validName(_:)``).
    public var name: String
    public var role: AdminRole
    public var createdAt: Date
    /// Whether it has a console password (only its bcrypt hash is stored).
    public var hasPassword: Bool

    public init(name: String, role: AdminRole, createdAt: Date, hasPassword: Bool = false) {
        self.name = name
        self.role = role
        self.createdAt = createdAt
        self.hasPassword = hasPassword
    }

    /// Whether `name` is an account name: 1 to 64 of `a-z 0-9 . _ -`, starting with a letter or
    /// digit. Names appear in the audit log and in paths, so nothing else is allowed.
    public static func validName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count), let first = bytes.first, isLowerAlphanumeric(first) else { return false }
        return bytes.allSatisfy { isLowerAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    private static func isLowerAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}

/// One API token of an admin account. The token itself is shown once, when it is made; the
/// store keeps only its SHA-256.
public struct AdminTokenRecord: Sendable, Hashable {
    /// The token's public handle (`at_` and 16 hex digits): what lists show and revoke names.
    public var id: String
    public var account: String
    /// What the account's owner calls it (1 to 64 printable characters).
    public var name: String
    public var createdAt: Date
    /// After this the token no longer works; nil: it does not expire.
    public var expiresAt: Date?
    /// When it was revoked; a revoked token never works again.
    public var revokedAt: Date?

    public init(id: String, account: String, name: String, createdAt: Date, expiresAt: Date?, revokedAt: Date? = nil) {
        self.id = id
        self.account = account
        self.name = name
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
    }

    /// Whether the token works at `now`.
    public func isValid(at now: Date) -> Bool {
        revokedAt == nil && (expiresAt.map { now < $0 } ?? true)
    }
}

/// One change made through the admin API, the console or `herald admin`, as the audit log keeps it.
public struct AuditEntry: Sendable, Hashable {
    /// Assigned by the store, increasing: entries are listed newest first and paged by it.
    public var id: Int64
    public var at: Date
    /// The account that made the change; ``AuditEntry/breakGlass`` for the admin token,
    /// ``AuditEntry/storeDirect`` for `herald admin … --store` run on the store itself.
    public var account: String
    /// The caller's address, when the change came over HTTP.
    public var source: String?
    /// The request's `x-request-id`, when the change came over HTTP.
    public var requestID: String?
    /// What was done: `tenant.create`, `credential.upload`, `api_key.revoke`, `login.failed`…
    public var action: String
    /// The tenant it concerns, if any.
    public var tenant: String?
    /// The object within (an API key's or token's name, a job ID, an account name).
    public var object: String?
    /// What changed: field names and their non-secret values, never a key, password or token.
    public var details: [String: String]

    public static let breakGlass = "admin-token"
    public static let storeDirect = "store"

    public init(
        id: Int64 = 0, at: Date, account: String, source: String? = nil, requestID: String? = nil, action: String,
        tenant: String? = nil, object: String? = nil, details: [String: String] = [:]
    ) {
        self.id = id
        self.at = at
        self.account = account
        self.source = source
        self.requestID = requestID
        self.action = action
        self.tenant = tenant
        self.object = object
        self.details = details
    }

    /// The details as the stores keep them: a JSON object of strings, keys in order.
    public var detailsJSON: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(details)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// The details read back from the stores' JSON; what is not an object of strings is kept
    /// under `"unreadable"` rather than lost or trapped on.
    public static func details(fromJSON text: String) -> [String: String] {
        (try? JSONDecoder().decode([String: String].self, from: Data(text.utf8))) ?? ["unreadable": text]
    }
}

/// What an audit entry records (``AuditEntry/action``).
public enum AuditAction: String, Sendable, CaseIterable {
    case tenantCreate = "tenant.create"
    case tenantUpdate = "tenant.update"
    case tenantDelete = "tenant.delete"
    case tenantReload = "tenant.reload"
    case reloadAll = "tenants.reload"
    case credentialUpload = "credential.upload"
    case apiKeyCreate = "api_key.create"
    case apiKeyRevoke = "api_key.revoke"
    case jobCancel = "job.cancel"
    case testSend = "notification.test"
    case channelCreate = "channel.create"
    case channelDelete = "channel.delete"
    case channelSync = "channel.sync"
    case testBroadcast = "broadcast.test"
    case accountCreate = "account.create"
    case accountUpdate = "account.update"
    case accountDelete = "account.delete"
    case tokenCreate = "token.create"
    case tokenRevoke = "token.revoke"
    case passwordSet = "account.password"
    case login = "login"
    case loginFailed = "login.failed"
    case accountLocked = "account.locked"
    case logout = "logout"
}

/// What a console password login needs of an account.
public struct AdminLoginState: Sendable, Hashable {
    public var account: AdminAccount
    /// The password's bcrypt hash; nil when the account has no password.
    public var passwordHash: String?
    /// While in the future, password logins are refused (tokens keep working).
    public var lockedUntil: Date?

    public init(account: AdminAccount, passwordHash: String?, lockedUntil: Date?) {
        self.account = account
        self.passwordHash = passwordHash
        self.lockedUntil = lockedUntil
    }
}

/// Which audit entries to list: every filter is optional; newest first, `limit` at a time,
/// `before` an entry's ID to page on.
public struct AuditQuery: Sendable, Hashable {
    public var tenant: String?
    public var account: String?
    public var action: String?
    public var from: Date?
    public var to: Date?
    public var before: Int64?
    public var limit: Int

    public init(
        tenant: String? = nil, account: String? = nil, action: String? = nil, from: Date? = nil, to: Date? = nil,
        before: Int64? = nil, limit: Int = 100
    ) {
        self.tenant = tenant
        self.account = account
        self.action = action
        self.from = from
        self.to = to
        self.before = before
        self.limit = limit
    }
}

/// Admin accounts, their tokens and the audit log, shared by every instance on the store.
///
/// No call edits or deletes an audit entry; only ``pruneAudit(before:)`` drops the ones older
/// than the configured retention.
public protocol AdminDirectory: Sendable {
    /// Adds `account`; false when an account of that name exists (nothing changes).
    func createAdminAccount(_ account: AdminAccount) async throws -> Bool
    func adminAccounts() async throws -> [AdminAccount]
    func adminAccount(named name: String) async throws -> AdminAccount?
    /// Changes an account's role; false when there is no such account.
    func setAdminRole(_ role: AdminRole, account name: String) async throws -> Bool
    /// Deletes an account and its tokens; false when there is no such account.
    func deleteAdminAccount(named name: String) async throws -> Bool
    /// Sets (or with nil removes) an account's console password hash, and ends any lock; false
    /// when there is no such account.
    func setAdminPassword(hash: String?, account name: String) async throws -> Bool
    /// The account's password hash and lock, for a console login; nil when there is no such account.
    func adminLoginState(account name: String) async throws -> AdminLoginState?
    /// Counts a failed password login at `at`; the `threshold`-th failure in a row locks password
    /// logins until `at + lockFor` (and starts the count again). Returns the lock's end when this
    /// failure set one.
    func recordAdminLoginFailure(account name: String, at: Date, threshold: Int, lockFor: Duration) async throws -> Date?
    /// A successful login: the count of failures starts again.
    func recordAdminLoginSuccess(account name: String) async throws
    /// Stores a new token of an existing account, kept as `sha256` (64 lowercase hex digits).
    /// - Throws: ``StoreError/notFound(_:)`` when the account does not exist.
    func addAdminToken(_ token: AdminTokenRecord, sha256: String) async throws
    /// The account's tokens, newest first (revoked and expired ones included).
    func adminTokens(account name: String) async throws -> [AdminTokenRecord]
    /// Revokes a token at `at`; false when the account has no such token or it was revoked.
    func revokeAdminToken(account name: String, id: String, at: Date) async throws -> Bool
    /// The account and token a presented token's SHA-256 belongs to, if that token works at `now`.
    func authenticateAdminToken(sha256: String, now: Date) async throws -> (AdminAccount, AdminTokenRecord)?
    /// Appends an entry (its ID is assigned by the store) and returns that ID.
    @discardableResult
    func appendAudit(_ entry: AuditEntry) async throws -> Int64
    func auditEntries(_ query: AuditQuery) async throws -> [AuditEntry]
    /// Drops entries from before `cutoff`; returns how many.
    func pruneAudit(before cutoff: Date) async throws -> Int
}
