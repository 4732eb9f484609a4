import Foundation
import Herald
import HeraldCore
import HeraldStore
import Logging

/// Appends admin changes to the store's audit log (``AdminDirectory``), with the actor of the
/// request or console action being served (``AdminActor/current``), its address and request ID.
///
/// An entry is written after its change succeeded; if the store then refuses it, the change
/// stands and the entry's fields are logged at error level instead (nothing secret is ever in
/// them: callers pass field names and non-secret values only).
struct AuditTrail: Sendable {
    let directory: any AdminDirectory
    let now: @Sendable () -> Date
    let logger: Logger

    typealias Action = AuditAction

    func record(
        _ action: Action, tenant: String? = nil, object: String? = nil, details: [String: String] = [:],
        actor: AdminActor? = AdminActor.current
    ) async {
        let entry = AuditEntry(
            at: now(), account: actor?.account ?? "unknown", source: actor?.source, requestID: RequestID.current,
            action: action.rawValue, tenant: tenant, object: object, details: details)
        do {
            try await directory.appendAudit(entry)
        } catch {
            var metadata: Logger.Metadata = [
                "herald.audit.action": "\(entry.action)", "herald.audit.account": "\(entry.account)",
                "herald.error": "\(error)",
            ]
            if let tenant { metadata["herald.tenant"] = "\(tenant)" }
            if let object { metadata["herald.audit.object"] = "\(object)" }
            for (key, value) in details { metadata["herald.audit.\(key)"] = "\(value)" }
            RequestID.logger(logger).error("audit entry not stored", metadata: metadata)
        }
    }

    /// What a reload changed, for its entry: the tenants by outcome (their IDs), failures counted.
    static func details(_ report: ReloadReport, revoke: Bool) -> [String: String] {
        var details: [String: String] = [:]
        for (name, tenants) in [
            ("added", report.added), ("reloaded", report.reloaded), ("revoked", report.revoked), ("removed", report.removed),
        ] where !tenants.isEmpty {
            details[name] = tenants.map(\.rawValue).joined(separator: ",")
        }
        if !report.failures.isEmpty { details["failures"] = String(report.failures.count) }
        if revoke { details["revoke"] = "true" }
        return details
    }

    /// What a credential upload put in place: its kind and key ID, never the material.
    static func details(_ upload: CredentialUpload, revoke: Bool) -> [String: String] {
        var details: [String: String]
        switch upload {
        case .tokenKey(_, let keyID, let replacing):
            details = ["kind": "token"]
            if let keyID { details["key_id"] = keyID }
            if let replacing { details["replaces"] = replacing }
        case .certificatePEM: details = ["kind": "certificate"]
        case .pkcs12: details = ["kind": "pkcs12"]
        }
        if revoke { details["revoke"] = "true" }
        return details
    }

    /// What a tenant's creation set: its team, credential kind (and key ID), first API key's
    /// name and the sections it was given, never key material or secrets.
    static func details(_ draft: TenantDraft) -> [String: String] {
        var details = ["team_id": draft.teamID, "api_key_name": draft.apiKeyName]
        switch draft.credential {
        case .token(let keyID, _):
            details["credential"] = "token"
            details["key_id"] = keyID
        case .certificatePEM: details["credential"] = "certificate"
        case .pkcs12: details["credential"] = "pkcs12"
        }
        if !draft.sections.isEmpty { details["sections"] = draft.sections.map(\.0).joined(separator: ",") }
        if draft.webhookSecret != nil { details["webhook_secret"] = "set" }
        return details
    }

    /// What a settings change did: each section named as `set` or `reset` (back to the default).
    static func details(sections: [(String, JSONValue?)], webhookSecret: [UInt8]?) -> [String: String] {
        var details: [String: String] = [:]
        for (name, value) in sections { details[name] = value == nil ? "reset" : "set" }
        if webhookSecret != nil { details["webhook_secret"] = "replaced" }
        return details
    }
}
