import Foundation
import HeraldCore

/// What started a reload (for logs and the report).
public enum ReloadTrigger: String, Sendable, Hashable, CustomStringConvertible {
    /// The first load, when the server starts.
    case startup
    /// An admin API call (`POST /admin/reload`, `POST /admin/tenants/{id}/reload`).
    case api
    /// SIGHUP.
    case signal
    /// The tenants directory watcher saw a file change.
    case watcher
    /// A credential upload (`PUT /admin/tenants/{id}/credentials`).
    case upload
    /// Another instance on the shared store changed the tenants through its admin API (a
    /// reload, an upload or a revoke): this one reads the shared tenants directory again.
    case peer

    public var description: String { rawValue }
}

/// A tenant file, or one tenant of it, that could not be applied. The tenant (if it was
/// running) keeps its previous runtime.
public struct ReloadFailure: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    /// The tenant, when the file names one (or its file name gives one).
    public var tenant: TenantID?
    /// What is wrong, one error per line, each naming file:line:column or file and field. Never
    /// secret material.
    public var message: String
    public var at: Date

    public init(file: String, tenant: TenantID?, message: String, at: Date) {
        self.file = file
        self.tenant = tenant
        self.message = message
        self.at = at
    }

    public var description: String { message }
}

/// What one reload did. Every tenant the reload looked at is in exactly one list.
public struct ReloadReport: Sendable, Hashable {
    public var trigger: ReloadTrigger
    /// Tenants that were not loaded before and are now.
    public var added: [TenantID] = []
    /// Tenants whose configuration changed: a new runtime took over, the old one drained.
    public var reloaded: [TenantID] = []
    /// Of ``added`` and ``reloaded``: tenants whose old runtime was revoked (its connections
    /// closed at once, unanswered sends resent once on the new credential).
    public var revoked: [TenantID] = []
    /// Tenants whose file is gone: they take no more sends; their runtime drained and closed.
    public var removed: [TenantID] = []
    /// Tenants whose configuration did not change: untouched (their connections stay open).
    public var unchanged: [TenantID] = []
    /// Files and tenants that failed; a tenant among them keeps its previous runtime.
    public var failures: [ReloadFailure] = []

    public init(trigger: ReloadTrigger) {
        self.trigger = trigger
    }

    /// True when the reload changed which runtimes serve which tenants.
    public var changedRuntimes: Bool { !added.isEmpty || !reloaded.isEmpty || !removed.isEmpty }
}

/// One tenant's reload state, for the admin API's tenant health.
public struct TenantReloadStatus: Sendable, Hashable {
    public var tenant: TenantID
    /// The file the running configuration came from.
    public var file: String?
    /// When the running runtime was installed.
    public var loadedAt: Date?
    /// The running credential's identity (key ID and key fingerprint, or certificate fingerprint).
    public var credentialIdentity: String?
    /// When a reload last looked at this tenant.
    public var lastReloadAt: Date?
    /// Why the last reload of this tenant failed, nil when it succeeded (or was unchanged).
    public var lastError: String?
    public var lastErrorAt: Date?
    /// Reloads of this tenant that failed in a row.
    public var consecutiveFailures: Int = 0
    /// How many times a new runtime took over for this tenant.
    public var swaps: Int = 0

    public init(tenant: TenantID) {
        self.tenant = tenant
    }
}

/// Why a reload or an upload was refused as a whole.
public struct ReloadError: Error, Sendable, Hashable, CustomStringConvertible {
    enum Code: String, Sendable, Hashable {
        case directoryUnreadable = "directory_unreadable"
        case unknownTenant = "unknown_tenant"
        case validationFailed = "validation_failed"
        case credentialUnchanged = "credential_unchanged"
        case uploadRejected = "upload_rejected"
        case wouldRemoveEveryTenant = "would_remove_every_tenant"
        case directoryChanging = "directory_changing"
    }

    let code: Code
    /// What went wrong, without secret material.
    public let message: String
    /// The failures, for ``validationFailed(_:)``.
    public let failures: [ReloadFailure]

    init(_ code: Code, _ message: String, failures: [ReloadFailure] = []) {
        self.code = code
        self.message = message
        self.failures = failures
    }

    /// A short label, safe for metrics and API error codes.
    public var label: String { code.rawValue }

    /// The tenants directory (or a tenant file) could not be read at all.
    public static func directoryUnreadable(_ message: String) -> ReloadError {
        ReloadError(.directoryUnreadable, message)
    }
    /// No tenant file names this tenant.
    public static func unknownTenant(_ tenant: TenantID) -> ReloadError {
        ReloadError(.unknownTenant, "no tenant file holds tenant '\(tenant)'")
    }
    /// The new configuration did not validate; the running one stays.
    public static func validationFailed(_ failures: [ReloadFailure]) -> ReloadError {
        ReloadError(.validationFailed, failures.map(\.message).joined(separator: "\n"), failures: failures)
    }
    /// `revoke` was asked but the tenant's credential is the one already running.
    public static func credentialUnchanged(_ tenant: TenantID) -> ReloadError {
        ReloadError(
            .credentialUnchanged,
            "tenant '\(tenant)' still has the credential it is running with; put the new key or certificate in place first"
        )
    }
    /// The uploaded credential cannot be used for this tenant (wrong kind, not PEM, too large, …).
    public static func uploadRejected(_ message: String) -> ReloadError { ReloadError(.uploadRejected, message) }

    /// The directory holds no tenant file at all (emptied, or a mount that is not there) while
    /// tenants are running: taken as a mistake, not as "remove every tenant".
    public static func wouldRemoveEveryTenant(directory: String, running: Int) -> ReloadError {
        ReloadError(
            .wouldRemoveEveryTenant,
            "\(directory) holds no tenant file, which would remove all \(running) running tenants; refused (the running tenants stay)"
        )
    }
    /// The tenant files kept changing while they were read; nothing was applied.
    public static func directoryChanging(_ directory: String) -> ReloadError {
        ReloadError(
            .directoryChanging,
            "the files in \(directory) changed while they were read; nothing was applied (try again)")
    }

    public var isValidationFailure: Bool { code == .validationFailed }
    public var isWouldRemoveEveryTenant: Bool { code == .wouldRemoveEveryTenant }
    public var isDirectoryChanging: Bool { code == .directoryChanging }
    public var isUnknownTenant: Bool { code == .unknownTenant }
    public var isCredentialUnchanged: Bool { code == .credentialUnchanged }
    public var isUploadRejected: Bool { code == .uploadRejected }
    public var isDirectoryUnreadable: Bool { code == .directoryUnreadable }

    public var description: String { message }
}
