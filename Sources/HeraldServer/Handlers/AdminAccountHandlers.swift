import Foundation
import HeraldStore
import Hummingbird
import Logging

/// Admin accounts, their tokens and the audit log (`/admin/me`, `/admin/accounts…`,
/// `/admin/audit`). Accounts are the owner's to manage; an account's own tokens are its own to
/// list, make and revoke. Every change is written to the audit log.
struct AdminAccountHandlers: Sendable {
    let directory: any AdminDirectory
    let authenticator: AdminAuthenticator
    let audit: AuditTrail
    let passwords: AdminPasswords
    let now: @Sendable () -> Date
    let logger: Logger

    struct AccountView: ResponseEncodable, Encodable {
        var name: String
        var role: String
        var createdAt: Date
        /// Whether it can log in to the console with a password.
        var passwordSet: Bool

        init(_ account: AdminAccount) {
            name = account.name
            role = account.role.rawValue
            createdAt = account.createdAt
            passwordSet = account.hasPassword
        }
    }

    struct TokenView: ResponseEncodable, Encodable {
        var id: String
        var name: String
        var createdAt: Date
        @Nullable var expiresAt: Date?
        @Nullable var revokedAt: Date?

        init(_ token: AdminTokenRecord) {
            id = token.id
            name = token.name
            createdAt = token.createdAt
            expiresAt = token.expiresAt
            revokedAt = token.revokedAt
        }
    }

    // MARK: GET /admin/me

    struct WhoAmI: ResponseEncodable {
        var account: String
        var role: String
        var permissions: [String]
    }

    func whoAmI(_ request: Request, context: some RequestContext) throws -> WhoAmI {
        guard let actor = AdminActor.current else { throw APIError.unauthorized("an admin token is required") }
        return WhoAmI(
            account: actor.account, role: actor.role.rawValue,
            permissions: AdminPermission.allCases.filter { actor.may($0) }.map(\.rawValue))
    }

    // MARK: /admin/accounts

    struct AccountsAnswer: ResponseEncodable {
        var accounts: [AccountView]
    }

    func list(_ request: Request, context: some RequestContext) async throws -> AccountsAnswer {
        AccountsAnswer(accounts: try await directory.adminAccounts().map(AccountView.init))
    }

    func create(_ request: Request, context: some RequestContext) async throws -> EditedResponse<AccountView> {
        let (name, role): (String, AdminRole)
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: 4096)
            let reader = try JSONObjectReader(body.root, path: "", allowed: ["name", "role"])
            guard let given = try reader.string("name", required: true) else { throw APIError.missingField("name") }
            guard AdminAccount.validName(given) else {
                throw APIError.invalidField("name", "must be 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit")
            }
            name = given
            role = try Self.role(reader)
        } catch {
            throw AdminLifecycleHandlers.unprocessable(error)
        }
        let account = AdminAccount(name: name, role: role, createdAt: now())
        guard try await directory.createAdminAccount(account) else {
            throw APIError.conflict("an admin account named \(name) exists")
        }
        authenticator.accountCreated()
        await audit.record(.accountCreate, object: name, details: ["role": role.rawValue])
        RequestID.logger(logger).notice("admin account created", metadata: ["herald.account": "\(name)", "herald.role": "\(role)"])
        return EditedResponse(status: .created, response: AccountView(account))
    }

    func update(_ request: Request, context: some RequestContext) async throws -> AccountView {
        let name = try Self.accountName(context)
        let role: AdminRole
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: 4096)
            role = try Self.role(JSONObjectReader(body.root, path: "", allowed: ["role"]))
        } catch {
            throw AdminLifecycleHandlers.unprocessable(error)
        }
        guard let before = try await directory.adminAccount(named: name) else { throw APIError.notFound("admin account") }
        if before.role == .owner, role != .owner { try await refuseLosingTheLastOwner(name) }
        guard try await directory.setAdminRole(role, account: name) else { throw APIError.notFound("admin account") }
        await audit.record(.accountUpdate, object: name, details: ["role": role.rawValue, "previous_role": before.role.rawValue])
        return AccountView(AdminAccount(name: name, role: role, createdAt: before.createdAt, hasPassword: before.hasPassword))
    }

    struct DeletedAccount: ResponseEncodable {
        var deleted: String
    }

    func delete(_ request: Request, context: some RequestContext) async throws -> DeletedAccount {
        let name = try Self.accountName(context)
        guard let account = try await directory.adminAccount(named: name) else { throw APIError.notFound("admin account") }
        if account.role == .owner { try await refuseLosingTheLastOwner(name) }
        guard try await directory.deleteAdminAccount(named: name) else { throw APIError.notFound("admin account") }
        await audit.record(.accountDelete, object: name, details: ["role": account.role.rawValue])
        RequestID.logger(logger).notice("admin account deleted", metadata: ["herald.account": "\(name)"])
        return DeletedAccount(deleted: name)
    }

    /// The last owner account stays: without it, only the break-glass token could manage accounts.
    private func refuseLosingTheLastOwner(_ name: String) async throws {
        let owners = try await directory.adminAccounts().filter { $0.role == .owner }
        if owners.map(\.name) == [name] {
            throw APIError.conflict("\(name) is the last owner account; make another owner first")
        }
    }

    // MARK: PUT /admin/accounts/{name}/password

    /// Sets the account's console password (kept as its bcrypt hash) and ends a lock.
    func setPassword(_ request: Request, context: some RequestContext) async throws -> Response {
        let name = try Self.accountName(context)
        let password: String
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: 4096)
            let reader = try JSONObjectReader(body.root, path: "", allowed: ["password"])
            guard let given = try reader.string("password", required: true) else { throw APIError.missingField("password") }
            if let refusal = AdminPasswords.refusal(given) { throw APIError.invalidField("password", refusal) }
            password = given
        } catch {
            throw AdminLifecycleHandlers.unprocessable(error)
        }
        let hash = try await passwords.hash(password)
        guard try await directory.setAdminPassword(hash: hash, account: name) else { throw APIError.notFound("admin account") }
        await audit.record(.passwordSet, object: name)
        return Response(status: .noContent)
    }

    // MARK: /admin/accounts/{name}/tokens

    struct TokensAnswer: ResponseEncodable {
        var tokens: [TokenView]
    }

    func tokens(_ request: Request, context: some RequestContext) async throws -> TokensAnswer {
        let name = try Self.accountName(context)
        guard try await directory.adminAccount(named: name) != nil else { throw APIError.notFound("admin account") }
        return TokensAnswer(tokens: try await directory.adminTokens(account: name).map(TokenView.init))
    }

    struct NewToken: ResponseEncodable {
        var token: TokenView
        /// The token itself: shown in this answer only (Herald keeps its SHA-256).
        var secret: String
    }

    /// Longest a token may be made to last, in days (ten years).
    static let maxExpiryDays: Int64 = 3650
    /// Tokens an account may hold that still work (an account makes its own: a bound it cannot raise).
    static let maxLiveTokens = 100
    /// Tokens an account may hold in all, revoked and expired ones included (they are kept for the
    /// record until the account is deleted).
    static let maxTokens = 1000

    func createToken(_ request: Request, context: some RequestContext) async throws -> EditedResponse<NewToken> {
        let account = try Self.accountName(context)
        let (name, days): (String, Int64?)
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: 4096)
            let reader = try JSONObjectReader(body.root, path: "", allowed: ["name", "expires_in_days"])
            guard let given = try reader.string("name", required: true) else { throw APIError.missingField("name") }
            guard (1...64).contains(given.unicodeScalars.count), given.unicodeScalars.allSatisfy({ (0x20...0x7e).contains($0.value) })
            else { throw APIError.invalidField("name", "must be 1 to 64 printable ASCII characters") }
            name = given
            days = try reader.integer("expires_in_days", in: 1...Self.maxExpiryDays)
        } catch {
            throw AdminLifecycleHandlers.unprocessable(error)
        }
        let created = now()
        guard try await directory.adminAccount(named: account) != nil else { throw APIError.notFound("admin account") }
        let held = try await directory.adminTokens(account: account)
        guard held.filter({ $0.isValid(at: created) }).count < Self.maxLiveTokens, held.count < Self.maxTokens else {
            throw APIError.conflict(
                "account \(account) holds its most tokens (\(Self.maxLiveTokens) that work, \(Self.maxTokens) in all); revoke one first")
        }
        let (secret, id) = AdminTokens.generate()
        let record = AdminTokenRecord(
            id: id, account: account, name: name, createdAt: created,
            expiresAt: days.map { created.addingTimeInterval(Double($0) * 86_400) })
        do {
            try await directory.addAdminToken(record, sha256: APIKeys.sha256Hex(of: secret))
        } catch let error as StoreError where error.isNotFound {
            throw APIError.notFound("admin account")
        }
        var details = ["name": name]
        if let days { details["expires_in_days"] = String(days) }
        await audit.record(.tokenCreate, object: "\(account)/\(id)", details: details)
        return EditedResponse(status: .created, response: NewToken(token: TokenView(record), secret: secret))
    }

    func revokeToken(_ request: Request, context: some RequestContext) async throws -> TokenView {
        let account = try Self.accountName(context)
        guard let id = context.parameters.get("token") else { throw APIError.notFound("admin token") }
        guard try await directory.revokeAdminToken(account: account, id: id, at: now()),
            let token = try await directory.adminTokens(account: account).first(where: { $0.id == id })
        else { throw APIError.notFound("admin token (or it was revoked already)") }
        await audit.record(.tokenRevoke, object: "\(account)/\(id)", details: ["name": token.name])
        return TokenView(token)
    }

    // MARK: GET /admin/audit

    struct AuditAnswer: ResponseEncodable {
        struct Entry: Encodable, Sendable {
            var id: Int64
            var at: Date
            var account: String
            @Nullable var source: String?
            @Nullable var requestId: String?
            var action: String
            @Nullable var tenant: String?
            @Nullable var object: String?
            var details: [String: String]
        }

        var entries: [Entry]
        /// The next page's `before` (nil on the last page).
        @Nullable var nextBefore: Int64?
    }

    /// The largest entry ID a page may start before (2^53 - 1: what any JSON reader keeps exact).
    static let maxEntryID = 9_007_199_254_740_991
    static let auditQueryMembers = ["tenant", "account", "action", "from", "to", "before", "limit"]

    func audit(_ request: Request, context: some RequestContext) async throws -> AuditAnswer {
        let parameters = request.uri.queryParameters
        for (key, _) in parameters where !Self.auditQueryMembers.contains(String(key)) {
            throw APIError.invalidQuery(String(key), "is not a filter of the audit log (\(Self.auditQueryMembers.joined(separator: ", ")))")
        }
        func text(_ name: String) throws(APIError) -> String? {
            guard let value = parameters[name[...]].map(String.init) else { return nil }
            guard (1...256).contains(value.unicodeScalars.count) else {
                throw APIError.invalidQuery(name, "must be 1 to 256 characters")
            }
            return value
        }
        func date(_ name: String) throws(APIError) -> Date? {
            guard let value = try text(name) else { return nil }
            guard let date = Timestamps.parseQuery(value) else {
                throw APIError.invalidQuery(name, "must be an RFC 3339 time (2026-11-29T12:00:00Z) or decimal UNIX seconds")
            }
            return date
        }
        let limit = try QueryParameters.integer(try text("limit"), name: "limit", in: 1...500) ?? 100
        let before = try QueryParameters.integer(try text("before"), name: "before", in: 1...Self.maxEntryID)
        var entries = try await directory.auditEntries(
            AuditQuery(
                tenant: try text("tenant"), account: try text("account"), action: try text("action"), from: try date("from"),
                to: try date("to"), before: before.map(Int64.init), limit: limit + 1))
        var next: Int64? = nil
        if entries.count > limit {
            entries.removeLast(entries.count - limit)
            next = entries.last?.id
        }
        return AuditAnswer(
            entries: entries.map { entry in
                AuditAnswer.Entry(
                    id: entry.id, at: entry.at, account: entry.account, source: entry.source, requestId: entry.requestID,
                    action: entry.action, tenant: entry.tenant, object: entry.object, details: entry.details)
            },
            nextBefore: next)
    }

    // MARK: Reading

    static func accountName(_ context: some RequestContext) throws(APIError) -> String {
        guard let name = context.parameters.get("name"), AdminAccount.validName(name) else {
            throw APIError.notFound("admin account")
        }
        return name
    }

    static func role(_ reader: JSONObjectReader) throws(APIError) -> AdminRole {
        guard let text = try reader.string("role", required: true) else { throw APIError.missingField("role") }
        guard let role = AdminRole(rawValue: text) else {
            throw APIError.invalidField("role", "must be one of owner, operator, viewer")
        }
        return role
    }
}
