import Foundation
import Herald
import HeraldCore
import Hummingbird
import Logging

/// The tenant lifecycle (`/admin/tenants`…): create a tenant with its credential and first API
/// key, read it, change its settings, delete it, add and remove API keys. Every change goes
/// through ``ReloadCoordinator``'s lifecycle functions (the files, checked in full like a reload,
/// one change at a time), which `herald tenants` uses too.
struct AdminLifecycleHandlers: Sendable {
    let router: Herald.Router
    let reloader: ReloadCoordinator
    let tenants: AdminTenantHandlers
    let audit: AuditTrail
    let logger: Logger

    /// The members of `POST /admin/tenants`.
    static let createMembers = [
        "id", "team_id", "topics", "endpoints", "pool", "plugins", "delivery", "webhook", "proxy", "credential",
        "api_key_name",
    ]
    /// The sections of the tenant file a create may set, besides ID, team and credential.
    static let createSections = ["topics", "endpoints", "pool", "plugins", "delivery", "webhook", "proxy"]
    /// The members of `PATCH /admin/tenants/{id}`.
    static let updateMembers = ["topics", "endpoints", "pool", "plugins", "webhook", "proxy"]
    static let credentialMembers = ["kind", "key_id", "pem", "pkcs12_base64", "passphrase"]

    // MARK: POST /admin/tenants

    struct Created: ResponseEncodable {
        var tenant: TenantView
        /// The tenant's first API key: shown in this answer only (Herald keeps its SHA-256).
        var apiKey: NewAPIKey
    }

    struct NewAPIKey: ResponseEncodable {
        var name: String
        var key: String
    }

    func create(_ request: Request, context: some RequestContext) async throws -> EditedResponse<Created> {
        let limit = reloader.configuration.maximumUploadBytes * 2 + 64 * 1024
        let draft: TenantDraft
        let key = APIKeys.generate()
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: limit)
            let reader = try JSONObjectReader(body.root, path: "", allowed: Self.createMembers)
            guard let raw = try reader.string("id", required: true) else { throw APIError.missingField("id") }
            let id: TenantID
            do {
                id = try TenantID(raw)
            } catch {
                throw APIError.invalidField("id", "\(error)")
            }
            guard let teamID = try reader.string("team_id", required: true) else { throw APIError.missingField("team_id") }
            guard let credentialNode = reader["credential"] else { throw APIError.missingField("credential") }
            let credential = try Self.credential(JSONObjectReader(credentialNode, path: "credential", allowed: Self.credentialMembers))
            let keyName = try reader.string("api_key_name") ?? "default"
            var sections: [(String, JSONValue)] = []
            var webhookSecret: [UInt8]? = nil
            for name in Self.createSections {
                guard var value = try reader.json(name) else { continue }
                if name == "webhook" { (value, webhookSecret) = try Self.webhook(value) }
                sections.append((name, value))
            }
            draft = TenantDraft(
                id: id, teamID: teamID, sections: sections, credential: credential, apiKeyName: keyName,
                apiKeySHA256: APIKeys.sha256Hex(of: key), webhookSecret: webhookSecret)
        } catch {
            throw Self.unprocessable(error)
        }
        do throws(TenantLifecycleError) {
            try await reloader.createTenant(draft)
        } catch {
            throw Self.apiError(error, fields: Self.createFieldNames.merging(Self.webhookFieldNames(draft.webhookSecret)) { $1 })
        }
        guard let configuration = router.runtime(for: draft.id)?.configuration else {
            throw APIError.internal("the tenant was written but is not loaded")
        }
        await audit.record(.tenantCreate, tenant: draft.id.rawValue, details: AuditTrail.details(draft))
        RequestID.logger(logger).notice(
            "tenant created through the admin API", metadata: ["herald.tenant": "\(draft.id)", "herald.key": "\(draft.apiKeyName)"])
        var headers = HTTPFields()
        headers[.location] = "/admin/tenants/\(draft.id)"
        return EditedResponse(
            status: .created, headers: headers,
            response: Created(tenant: tenants.view(configuration), apiKey: NewAPIKey(name: draft.apiKeyName, key: key)))
    }

    // MARK: GET /admin/tenants/{id}

    func show(_ request: Request, context: some RequestContext) throws -> TenantView {
        let id = try TenantPath.id(context)
        guard let configuration = router.runtime(for: id)?.configuration else { throw APIError.notFound("tenant") }
        return tenants.view(configuration)
    }

    // MARK: PATCH /admin/tenants/{id}

    func update(_ request: Request, context: some RequestContext) async throws -> TenantView {
        let id = try TenantPath.id(context)
        guard router.runtime(for: id) != nil else { throw APIError.notFound("tenant") }
        var sections: [(String, JSONValue?)] = []
        var webhookSecret: [UInt8]? = nil
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: 64 * 1024)
            let reader = try JSONObjectReader(body.root, path: "", allowed: Self.updateMembers)
            for name in Self.updateMembers {
                guard var value = try reader.json(name) else { continue }
                // null: back to the default (the section is taken out of the file).
                if case .null = value {
                    sections.append((name, nil))
                    continue
                }
                if name == "webhook" { (value, webhookSecret) = try Self.webhook(value) }
                sections.append((name, value))
            }
            guard !sections.isEmpty else {
                throw APIError.missingField("(body)", "give at least one of \(Self.updateMembers.joined(separator: ", "))")
            }
        } catch {
            throw Self.unprocessable(error)
        }
        do throws(TenantLifecycleError) {
            try await reloader.updateTenant(id, .sections(sections, webhookSecret: webhookSecret))
        } catch {
            throw Self.apiError(error, fields: Self.webhookFieldNames(webhookSecret))
        }
        await audit.record(
            .tenantUpdate, tenant: id.rawValue, details: AuditTrail.details(sections: sections, webhookSecret: webhookSecret))
        guard let configuration = router.runtime(for: id)?.configuration else { throw APIError.notFound("tenant") }
        RequestID.logger(logger).notice(
            "tenant settings changed through the admin API",
            metadata: ["herald.tenant": "\(id)", "herald.sections": "\(sections.map(\.0).joined(separator: ","))"])
        return tenants.view(configuration)
    }

    // MARK: DELETE /admin/tenants/{id}

    struct Deleted: ResponseEncodable {
        var deleted: String
        /// Where its files went (inside the tenants directory, `.archive/`).
        var archive: String
        var archivedFiles: Int
    }

    func delete(_ request: Request, context: some RequestContext) async throws -> Deleted {
        let id = try TenantPath.id(context)
        let deletion: TenantDeletion
        do throws(TenantLifecycleError) {
            deletion = try await reloader.deleteTenant(id)
        } catch {
            throw Self.apiError(error, fields: [:])
        }
        await audit.record(.tenantDelete, tenant: id.rawValue, details: ["archive": deletion.archiveDirectory])
        RequestID.logger(logger).notice("tenant deleted through the admin API", metadata: ["herald.tenant": "\(id)"])
        return Deleted(deleted: id.rawValue, archive: deletion.archiveDirectory, archivedFiles: deletion.archivedFiles.count)
    }

    // MARK: POST /admin/tenants/{id}/api-keys

    func addAPIKey(_ request: Request, context: some RequestContext) async throws -> EditedResponse<NewAPIKey> {
        let id = try TenantPath.id(context)
        guard router.runtime(for: id) != nil else { throw APIError.notFound("tenant") }
        let name: String
        do throws(APIError) {
            let body = try await RequestBodies.json(request, limit: 4096)
            let reader = try JSONObjectReader(body.root, path: "", allowed: ["name"])
            guard let given = try reader.string("name", required: true) else { throw APIError.missingField("name") }
            name = given
        } catch {
            throw Self.unprocessable(error)
        }
        let key = APIKeys.generate()
        do throws(TenantLifecycleError) {
            try await reloader.updateTenant(id, .addAPIKey(name: name, sha256Hex: APIKeys.sha256Hex(of: key)))
        } catch {
            throw Self.apiError(error, fields: ["api_keys": "name"])
        }
        await audit.record(.apiKeyCreate, tenant: id.rawValue, object: name)
        RequestID.logger(logger).notice("API key added through the admin API", metadata: ["herald.tenant": "\(id)", "herald.key": "\(name)"])
        return EditedResponse(status: .created, response: NewAPIKey(name: name, key: key))
    }

    // MARK: DELETE /admin/tenants/{id}/api-keys/{name}

    func removeAPIKey(_ request: Request, context: some RequestContext) async throws -> Response {
        let id = try TenantPath.id(context)
        guard let name = context.parameters.get("name") else { throw APIError.notFound("API key") }
        do throws(TenantLifecycleError) {
            try await reloader.updateTenant(id, .removeAPIKey(name: name))
        } catch {
            throw Self.apiError(error, fields: [:])
        }
        await audit.record(.apiKeyRevoke, tenant: id.rawValue, object: name)
        RequestID.logger(logger).notice("API key removed through the admin API", metadata: ["herald.tenant": "\(id)", "herald.key": "\(name)"])
        return Response(status: .noContent)
    }

    // MARK: Reading and refusing

    static func credential(_ reader: JSONObjectReader) throws(APIError) -> NewTenantCredential {
        guard let kind = try reader.string("kind", required: true) else { throw APIError.missingField("credential.kind") }
        switch kind {
        case "token":
            guard let keyID = try reader.string("key_id", required: true) else { throw APIError.missingField("credential.key_id") }
            guard let pem = try reader.string("pem", required: true) else { throw APIError.missingField("credential.pem") }
            try refuse(reader, ["pkcs12_base64", "passphrase"], kind: kind)
            guard PEMKinds.holdsPrivateKey(pem) else {
                throw APIError.invalidField("credential.pem", "is not a .p8 key (expected -----BEGIN PRIVATE KEY-----)")
            }
            return .token(keyID: keyID, pem: Array(pem.utf8))
        case "certificate":
            guard let pem = try reader.string("pem", required: true) else { throw APIError.missingField("credential.pem") }
            try refuse(reader, ["key_id", "pkcs12_base64", "passphrase"], kind: kind)
            guard PEMKinds.holdsCertificate(pem), PEMKinds.holdsPrivateKey(pem) else {
                throw APIError.invalidField(
                    "credential.pem", "must hold the PEM certificate chain (leaf first) and then its PEM private key")
            }
            return .certificatePEM(Array(pem.utf8))
        case "pkcs12":
            guard let text = try reader.string("pkcs12_base64", required: true) else {
                throw APIError.missingField("credential.pkcs12_base64")
            }
            guard let passphrase = try reader.string("passphrase", required: true) else {
                throw APIError.missingField("credential.passphrase")
            }
            try refuse(reader, ["key_id", "pem"], kind: kind)
            guard let bytes = Data(base64Encoded: text, options: .ignoreUnknownCharacters), !bytes.isEmpty else {
                throw APIError.invalidField("credential.pkcs12_base64", "must be base64")
            }
            return .pkcs12(bundle: Array(bytes), passphrase: passphrase)
        default:
            throw APIError.invalidField("credential.kind", "must be token, certificate or pkcs12")
        }
    }

    /// The `webhook` member as the tenant file's `webhook` section, and the secret's value when
    /// the body gives it (`secret_value`, taken out: the lifecycle writes it to a 0600 file the
    /// section then refers to). The section's own keys are the tenant file parser's to check.
    static func webhook(_ value: JSONValue) throws(APIError) -> (section: JSONValue, secret: [UInt8]?) {
        guard case .object(var members) = value, let index = members.firstIndex(where: { $0.0 == "secret_value" }) else {
            return (value, nil)
        }
        guard case .string(let secret) = members[index].1, !secret.isEmpty else {
            throw APIError.invalidField("webhook.secret_value", "must be a string: the webhook's signing secret")
        }
        guard !members.contains(where: { $0.0 == "secret" }) else {
            throw APIError.invalidField(
                "webhook.secret_value", "give either secret (a reference, env:NAME or file:PATH) or secret_value, not both")
        }
        members.remove(at: index)
        return (.object(members), Array(secret.utf8))
    }

    /// With an uploaded webhook secret, the tenant file's `webhook.secret` is the body's `webhook.secret_value`.
    static func webhookFieldNames(_ secret: [UInt8]?) -> [String: String] {
        secret == nil ? [:] : ["webhook.secret": "webhook.secret_value"]
    }

    private static func refuse(_ reader: JSONObjectReader, _ members: [String], kind: String) throws(APIError) {
        for member in members where reader.has(member) {
            throw APIError.invalidField("credential.\(member)", "is not used with kind \(kind)")
        }
    }

    /// Tenant file fields as the create body names them (the rest are the same in both).
    static let createFieldNames: [String: String] = [
        "auth.token.key_id": "credential.key_id",
        "auth.token.key_file": "credential.pem",
        "auth.token": "credential.pem",
        "auth.certificate.cert_file": "credential.pem",
        "auth.certificate.key_file": "credential.pem",
        "auth.certificate.pkcs12_file": "credential.pkcs12_base64",
        "auth.certificate.passphrase": "credential.passphrase",
        "auth.certificate": "credential",
        "auth": "credential",
        "api_keys": "api_key_name",
    ]

    /// A refused body member is a 422 here (the route validates a whole tenant; malformed JSON,
    /// a wrong content type or an oversized body keep their own status).
    static func unprocessable(_ error: APIError) -> APIError {
        var error = error
        if error.status == .badRequest, error.field != nil { error.status = .unprocessableContent }
        return error
    }

    static func apiError(_ error: TenantLifecycleError, fields: [String: String]) -> APIError {
        switch error.code {
        case .conflict:
            return APIError(status: .conflict, code: "conflict", message: error.message)
        case .notFound:
            return APIError(status: .notFound, code: "not_found", message: error.message)
        case .invalid:
            return APIError(
                status: .unprocessableContent, code: "invalid_tenant", message: error.message,
                field: error.field.map { requestField($0, fields: fields) } ?? "(body)")
        case .writeFailed:
            var api = APIError(
                status: .internalServerError, code: "write_failed",
                message: "the tenant's files could not be written; nothing changed; the log has the detail under this answer's x-request-id")
            api.logDetail = error.message
            return api
        }
    }

    /// The request's name for a tenant file field: the longest mapped prefix, or the field itself.
    static func requestField(_ field: String, fields: [String: String]) -> String {
        var path = field
        while !path.isEmpty {
            if let mapped = fields[path] { return mapped }
            guard let cut = path.lastIndex(where: { $0 == "." || $0 == "[" }) else { break }
            path = String(path[..<cut])
        }
        return field
    }
}

/// What PEM text holds (labels only; the blocks are parsed where the credential is loaded).
enum PEMKinds {
    static func holdsPrivateKey(_ text: String) -> Bool {
        text.contains("-----BEGIN PRIVATE KEY-----") || text.contains("-----BEGIN EC PRIVATE KEY-----")
            || text.contains("-----BEGIN RSA PRIVATE KEY-----") || text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    }

    static func holdsCertificate(_ text: String) -> Bool {
        text.contains("-----BEGIN CERTIFICATE-----")
    }
}
