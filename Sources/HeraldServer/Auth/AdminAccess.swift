import Foundation
import HeraldCore
import HeraldStore
import Hummingbird
import NIOCore
import Synchronization

/// Who is making an admin call: an account (with one of its tokens, or a console session opened
/// with one), or the break-glass admin token (``AuditEntry/breakGlass``, an owner).
struct AdminActor: Sendable, Hashable {
    var account: String
    var role: AdminRole
    /// The caller's address, as the audit log records it.
    var source: String?

    /// The actor of the admin request or console action being served: set by
    /// ``AdminAuthMiddleware`` and the console's session guard, read by ``AuditTrail`` and the
    /// routes' permission checks.
    @TaskLocal static var current: AdminActor?

    static func breakGlass(source: String?) -> AdminActor {
        AdminActor(account: AuditEntry.breakGlass, role: .owner, source: source)
    }

    func may(_ permission: AdminPermission) -> Bool { role >= permission.role }

    /// The caller's address as text (no port), from a context that knows it.
    static func source(of context: some RequestContext) -> String? {
        guard let address = (context as? any RemoteAddressRequestContext)?.remoteAddress else { return nil }
        return address.ipAddress ?? "\(address)"
    }
}

/// What an admin route or console action needs; a role has the permissions of the roles below it.
public enum AdminPermission: String, Sendable, CaseIterable {
    /// `viewer`: tenants and their health, jobs, instances, the audit log, `/metrics`.
    case read = "admin:read"
    /// `operator`: tenants, credentials, API keys, reloads, job cancels.
    case operate = "admin:operate"
    /// `owner`: admin accounts and their tokens.
    case accounts = "admin:accounts"

    public var role: AdminRole {
        switch self {
        case .read: return .viewer
        case .operate: return .operator
        case .accounts: return .owner
        }
    }

    /// 403 naming the permission the caller lacks.
    func refusal(_ actor: AdminActor) -> APIError {
        APIError.forbidden(
            "\(rawValue) is required (account \(actor.account) has the \(actor.role.rawValue) role; it takes \(role.rawValue))")
    }
}

/// Checks admin credentials: the break-glass admin token (held as its SHA-256), or an admin
/// account's token, looked up in the store on every call so that a revoked or expired token stops
/// working at once on every instance.
///
/// The admin routes and the console exist while the admin token is set or the store holds an
/// account; otherwise they answer 404 like any unknown path.
final class AdminAuthenticator: Sendable {
    let breakGlass: AdminToken?
    let directory: any AdminDirectory
    /// Failed admin API credentials per source address (10, then 10 a minute): past that, 429.
    let failures: FailedAttempts
    private let now: @Sendable () -> Date
    /// Set once an account is seen (or made): the store need not be asked again.
    private let accountsSeen = Atomic<Bool>(false)

    init(
        breakGlass: AdminToken?, directory: any AdminDirectory, now: @escaping @Sendable () -> Date,
        instant: @escaping @Sendable () -> PushInstant = { PushInstant.now }
    ) {
        self.breakGlass = breakGlass
        self.directory = directory
        self.now = now
        failures = FailedAttempts(now: instant)
    }

    /// Whether the admin routes exist.
    func isEnabled() async throws -> Bool {
        if breakGlass != nil || accountsSeen.load(ordering: .relaxed) { return true }
        let any = try await !directory.adminAccounts().isEmpty
        if any { accountsSeen.store(true, ordering: .relaxed) }
        return any
    }

    /// Whether the routes existed when last asked, without asking the store (the 405 answer).
    var wasEnabled: Bool { breakGlass != nil || accountsSeen.load(ordering: .relaxed) }

    func accountCreated() { accountsSeen.store(true, ordering: .relaxed) }

    /// The actor `presented` authenticates, or nil.
    func authenticate(_ presented: String, source: String?) async throws -> AdminActor? {
        if let breakGlass, breakGlass.matches(presented) { return .breakGlass(source: source) }
        guard presented.hasPrefix(AdminTokens.prefix), presented.utf8.count <= 128 else { return nil }
        guard let (account, _) = try await directory.authenticateAdminToken(sha256: APIKeys.sha256Hex(of: presented), now: now())
        else { return nil }
        return AdminActor(account: account.name, role: account.role, source: source)
    }
}

/// Admin account tokens: `hat_` and 32 random bytes (base64url), shown once; the store keeps
/// their SHA-256 and a public handle (`at_` and 16 hex digits) that lists and revokes name.
public enum AdminTokens {
    public static let prefix = "hat_"

    /// A new token and its public handle.
    public static func generate() -> (token: String, id: String) {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let handle = UInt64.random(in: 0...UInt64.max, using: &generator)
        let hex = String(handle, radix: 16)
        return (prefix + APIKeys.base64URL(bytes), "at_" + String(repeating: "0", count: 16 - hex.count) + hex)
    }
}
