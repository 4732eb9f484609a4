import Herald
import HeraldCore

/// The console's lifecycle actions on the admin API's service: ``ReloadCoordinator``'s
/// `createTenant`, `updateTenant` (settings and API keys) and `deleteTenant`, with their refusals turned into
/// form errors (the tenant file's field names mapped to the form's).
///
/// Each change that succeeded is written to the audit log, under the session's account.
struct ReloadCoordinatorLifecycle: ConsoleLifecycle {
    let reloader: ReloadCoordinator
    let audit: AuditTrail

    func create(_ draft: TenantDraft) async throws(ConsoleError) {
        do throws(TenantLifecycleError) {
            try await reloader.createTenant(draft)
        } catch {
            throw Self.formError(error)
        }
        await audit.record(.tenantCreate, tenant: draft.id.rawValue, details: AuditTrail.details(draft))
    }

    func update(tenant: TenantID, sections: [(String, JSONValue?)], webhookSecret: [UInt8]?) async throws(ConsoleError) {
        do throws(TenantLifecycleError) {
            try await reloader.updateTenant(tenant, .sections(sections, webhookSecret: webhookSecret))
        } catch {
            throw Self.formError(error)
        }
        await audit.record(
            .tenantUpdate, tenant: tenant.rawValue, details: AuditTrail.details(sections: sections, webhookSecret: webhookSecret))
    }

    func addAPIKey(tenant: TenantID, name: String, sha256Hex: String) async throws(ConsoleError) {
        do throws(TenantLifecycleError) {
            try await reloader.updateTenant(tenant, .addAPIKey(name: name, sha256Hex: sha256Hex))
        } catch {
            throw Self.formError(error, keyForm: true)
        }
        await audit.record(.apiKeyCreate, tenant: tenant.rawValue, object: name)
    }

    func removeAPIKey(tenant: TenantID, name: String) async throws(ConsoleError) {
        do throws(TenantLifecycleError) {
            try await reloader.updateTenant(tenant, .removeAPIKey(name: name))
        } catch {
            throw Self.formError(error, keyForm: true)
        }
        await audit.record(.apiKeyRevoke, tenant: tenant.rawValue, object: name)
    }

    func delete(tenant: TenantID) async throws(ConsoleError) {
        do throws(TenantLifecycleError) {
            let deletion = try await reloader.deleteTenant(tenant)
            await audit.record(.tenantDelete, tenant: tenant.rawValue, details: ["archive": deletion.archiveDirectory])
        } catch {
            throw Self.formError(error)
        }
    }

    /// The form field a tenant-file field was typed into.
    static func formField(_ field: String, keyForm: Bool) -> String {
        if keyForm { return "name" }
        for (prefix, form) in [
            ("auth.token.key_id", "key_id"), ("auth.certificate.pkcs12_file", "pkcs12_file"),
            ("auth.certificate.passphrase", "passphrase"), ("auth.certificate", "certificate_file"), ("auth", "key_file"),
            ("endpoints.production", "production"), ("endpoints.development", "development"),
            ("endpoints.ca_file", "ca_file"), ("endpoints.default", "default"), ("endpoints", "production"),
            ("pool.max_queued", "max_queued"), ("pool", "connections"), ("topics", "topics"), ("plugins", "plugins"),
            ("api_keys", "api_key_name"), ("team_id", "team_id"), ("id", "id"), ("webhook.secret", "webhook_secret"),
            ("webhook", "webhook_url"), ("proxy", "proxy"),
        ] where field == prefix || field.hasPrefix(prefix + ".") || field.hasPrefix(prefix + "[") {
            return form
        }
        return field
    }

    static func formError(_ error: TenantLifecycleError, keyForm: Bool = false) -> ConsoleError {
        // A conflict names no field: it is the ID (or, on the key form, the key's name).
        let field = error.field.map { formField($0, keyForm: keyForm) } ?? (error.code == .conflict ? (keyForm ? "name" : "id") : nil)
        let message = field.map { "\($0): \(error.message)" } ?? error.message
        switch error.code {
        case .conflict: return ConsoleError(status: .conflict, message: message, field: field)
        case .notFound: return ConsoleError(status: .notFound, message: message, field: field)
        case .invalid: return ConsoleError(status: .unprocessableContent, message: message, field: field)
        case .writeFailed: return ConsoleError(status: .internalServerError, message: message, field: nil)
        }
    }
}
