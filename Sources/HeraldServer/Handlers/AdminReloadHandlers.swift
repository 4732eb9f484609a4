import Foundation
import Herald
import HeraldAPNs
import HeraldConfig
import HeraldCore
import Hummingbird
import Logging

/// The operator's reload routes: the whole tenants directory, one tenant, and a credential
/// upload for one tenant. One at a time, inside ``ReloadCoordinator``.
struct AdminReloadHandlers: Sendable {
    let reloader: ReloadCoordinator
    let audit: AuditTrail
    let logger: Logger

    // MARK: POST /admin/reload

    /// Reads the tenants directory again (``ReloadCoordinator/reloadAll(revoke:trigger:)``): new
    /// and changed tenants are validated in full and swapped in (the old runtime drains, or with
    /// `{"revoke": true}` has its connections closed at once), removed files remove their tenant,
    /// unchanged tenants keep their runtime and connections. A file that fails keeps the tenant's
    /// current runtime and is reported.
    func reloadAll(_ request: Request, context: some RequestContext) async throws -> ReloadAnswer {
        let revoke = try await Self.revokeFlag(request)
        let report: ReloadReport
        do throws(ReloadError) {
            report = try await reloader.reloadAll(revoke: revoke, trigger: .api)
        } catch {
            throw APIError.reload(error)
        }
        await audit.record(.reloadAll, details: AuditTrail.details(report, revoke: revoke))
        return ReloadAnswer(report)
    }

    // MARK: POST /admin/tenants/{id}/reload

    /// Reads one tenant's file again and applies it to that tenant. A file that fails keeps the
    /// current runtime (422). `{"revoke": true}`: the tenant's credential changed because the old
    /// one was revoked; its connections are closed at once and unanswered sends resent once.
    func reloadTenant(_ request: Request, context: some RequestContext) async throws -> ReloadAnswer {
        let id = try TenantPath.id(context)
        let revoke = try await Self.revokeFlag(request)
        let report: ReloadReport
        do throws(ReloadError) {
            report = try await reloader.reload(tenant: id, revoke: revoke, trigger: .api)
        } catch {
            throw APIError.reload(error)
        }
        await audit.record(.tenantReload, tenant: id.rawValue, details: AuditTrail.details(report, revoke: revoke))
        return ReloadAnswer(report)
    }

    // MARK: PUT /admin/tenants/{id}/credentials

    /// The members of the credential upload body.
    static let uploadMembers = ["kind", "key_id", "replaces", "pem", "pkcs12_base64", "revoke"]

    /// Puts a new key or certificate in place for a tenant (next to its file, mode 0600) and
    /// reloads the tenant; when it does not validate, the old files are restored and the tenant
    /// keeps running on its old credential (422). The uploaded material is never echoed.
    ///
    /// Body: `{"kind": "token", "key_id": "NEWKEY0001", "pem": "-----BEGIN PRIVATE KEY-----…"}`
    /// (with `"replaces": "OLDKEY0001"` for a tenant with several keys: the entry it replaces),
    /// `{"kind": "certificate", "pem": "<certificate chain PEM, then its private key PEM>"}` or
    /// `{"kind": "pkcs12", "pkcs12_base64": "…"}`, each with an optional `"revoke": true`.
    func uploadCredentials(_ request: Request, context: some RequestContext) async throws -> ReloadAnswer {
        let id = try TenantPath.id(context)
        let limit = reloader.configuration.maximumUploadBytes * 2 + 4096
        let body = try await RequestBodies.json(request, limit: limit)
        let reader = try JSONObjectReader(body.root, path: "", allowed: Self.uploadMembers)
        let kind = try reader.string("kind", required: true) ?? ""
        let revoke = try reader.bool("revoke") ?? false
        let upload = try CredentialUploadReader.read(reader, kind: kind, path: "")
        do throws(ReloadError) {
            let report = try await reloader.uploadCredentials(tenant: id, upload, revoke: revoke)
            logger.notice("tenant credential replaced through the admin API", metadata: ["herald.tenant": "\(id)"])
            await audit.record(.credentialUpload, tenant: id.rawValue, details: AuditTrail.details(upload, revoke: revoke))
            return ReloadAnswer(report)
        } catch {
            var refusal = APIError.reload(error)
            if error.isUploadRejected || error.isValidationFailure {
                // Name the body member that brought what could not apply.
                refusal.field = CredentialUploadReader.field(of: error, kind: kind, path: "")
            }
            throw refusal
        }
    }

    /// `{"revoke": true}` in an optional JSON body.
    private static func revokeFlag(_ request: Request) async throws(APIError) -> Bool {
        guard let root = try await RequestBodies.optionalJSON(request, limit: 4096) else { return false }
        return try JSONObjectReader(root, path: "", allowed: ["revoke"]).bool("revoke") ?? false
    }
}

/// A credential in a request body: `kind` (token, certificate or pkcs12) with `key_id` and
/// `pem`, `pem`, or `pkcs12_base64` (and, on tenant creation, `passphrase`).
enum CredentialUploadReader {
    static func read(_ reader: JSONObjectReader, kind: String, path: String) throws(APIError) -> CredentialUpload {
        let member = { (name: String) in FieldPaths.join(path, name) }
        switch kind {
        case "token":
            guard let pem = try reader.string("pem", required: true) else { throw APIError.missingField(member("pem")) }
            guard !reader.has("pkcs12_base64") else {
                throw APIError.invalidField(member("pkcs12_base64"), "is for kind pkcs12; a token key goes in pem")
            }
            return .tokenKey(pem: Array(pem.utf8), keyID: try reader.string("key_id"), replacing: try reader.string("replaces"))
        case "certificate":
            guard let pem = try reader.string("pem", required: true) else { throw APIError.missingField(member("pem")) }
            guard !reader.has("key_id"), !reader.has("pkcs12_base64") else {
                throw APIError.invalidField(
                    member(reader.has("key_id") ? "key_id" : "pkcs12_base64"), "is not used with kind certificate")
            }
            return .certificatePEM(Array(pem.utf8))
        case "pkcs12":
            guard let text = try reader.string("pkcs12_base64", required: true) else {
                throw APIError.missingField(member("pkcs12_base64"))
            }
            guard !reader.has("key_id"), !reader.has("pem") else {
                throw APIError.invalidField(member(reader.has("key_id") ? "key_id" : "pem"), "is not used with kind pkcs12")
            }
            guard let bytes = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else {
                throw APIError.invalidField(member("pkcs12_base64"), "must be base64")
            }
            return .pkcs12(Array(bytes))
        default:
            throw APIError.invalidField(member("kind"), "must be token, certificate or pkcs12")
        }
    }

    /// The body member that brought the credential a reload refused.
    static func field(of error: ReloadError, kind: String, path: String) -> String {
        FieldPaths.join(path, error.message.hasPrefix("key_id") ? "key_id" : (kind == "pkcs12" ? "pkcs12_base64" : "pem"))
    }
}

/// The `{id}` of `/admin/tenants/{id}/…`: a tenant ID that cannot exist answers 404 like an
/// unknown one.
enum TenantPath {
    static func id(_ context: some RequestContext) throws(APIError) -> TenantID {
        guard let raw = context.parameters.get("id"), let id = try? TenantID(raw) else { throw APIError.notFound("tenant") }
        return id
    }
}
