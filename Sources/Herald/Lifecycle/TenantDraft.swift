import Foundation
import HeraldCore

/// A new tenant's credential, as uploaded. Written beside the new tenant file (mode 0600).
public enum NewTenantCredential: Sendable {
    /// A `.p8` token signing key (PKCS#8 PEM) and its 10-character key ID.
    case token(keyID: String, pem: [UInt8])
    /// A PEM client certificate (leaf first, then intermediates) followed by its private key.
    case certificatePEM([UInt8])
    /// A PKCS#12 bundle and its passphrase (written to a 0600 file the tenant file points at;
    /// a passphrase is never written in the tenant file).
    case pkcs12(bundle: [UInt8], passphrase: String)

    var byteCount: Int {
        switch self {
        case .token(_, let pem): return pem.count
        case .certificatePEM(let pem): return pem.count
        case .pkcs12(let bundle, let passphrase): return bundle.count + passphrase.utf8.count
        }
    }
}

/// A tenant to create (``ReloadCoordinator/createTenant(_:)``): the tenant file's settings, its
/// credential and its first API key (as its SHA-256: Herald never stores a key).
public struct TenantDraft: Sendable {
    public var id: TenantID
    public var teamID: String
    /// Further top-level sections of the tenant file, in the file's own terms (`topics`,
    /// `endpoints`, `pool`, `plugins`, `delivery`, `webhook`), in order. The tenant file parser
    /// checks them exactly as it checks a hand-written file.
    public var sections: [(String, JSONValue)]
    public var credential: NewTenantCredential
    public var apiKeyName: String
    public var apiKeySHA256: String
    /// The webhook's signing secret, as uploaded: written to `<id>/webhook.secret` (mode 0600),
    /// which the `webhook` section (required with it, without a `secret` of its own) then refers
    /// to. nil: the `webhook` section, if any, gives its `secret` as a reference.
    public var webhookSecret: [UInt8]?

    public init(
        id: TenantID, teamID: String, sections: [(String, JSONValue)], credential: NewTenantCredential, apiKeyName: String,
        apiKeySHA256: String, webhookSecret: [UInt8]? = nil
    ) {
        self.id = id
        self.teamID = teamID
        self.sections = sections
        self.credential = credential
        self.apiKeyName = apiKeyName
        self.apiKeySHA256 = apiKeySHA256
        self.webhookSecret = webhookSecret
    }
}

/// A change to an existing tenant's file (``ReloadCoordinator/updateTenant(_:_:)``).
public enum TenantFileChange: Sendable {
    /// Sets top-level sections (`topics`, `endpoints`, `pool`, `plugins`, `webhook`); nil removes
    /// one (its default applies). A `webhook` without a `secret` keeps the file's current one.
    /// With `webhookSecret`, that secret is written to `<id>/webhook.secret` (mode 0600) beside
    /// the tenant file and the `webhook` section (required, without a `secret` of its own)
    /// refers to it.
    case sections([(String, JSONValue?)], webhookSecret: [UInt8]? = nil)
    /// Lists a new API key (by its SHA-256) under `name`.
    case addAPIKey(name: String, sha256Hex: String)
    /// Removes the API key listed under `name`.
    case removeAPIKey(name: String)
}

/// What deleting a tenant did.
public struct TenantDeletion: Sendable {
    public var report: ReloadReport
    /// Where the tenant file and its own credential files went.
    public var archiveDirectory: String
    /// The files moved there (their old paths).
    public var archivedFiles: [String]
}
