import Foundation

/// A provider token (the ES256 JWT of token authentication) kept where every instance signing with
/// the same key finds it, so that they all send the same token and APNs never sees a key's token
/// replaced more often than it allows (`TooManyProviderTokenUpdates`). Also a restarted instance
/// finds the token it signed before.
public struct SharedProviderToken: Sendable, Hashable, CustomStringConvertible {
    public var teamID: String
    public var keyID: String
    /// A digest of the signing key's public key: a different key under the same key ID never
    /// picks up the old key's token.
    public var keyFingerprint: String
    /// The JWT. A credential: never logged (``description`` leaves it out).
    public var token: String
    /// The token's `iat` (whole seconds).
    public var issuedAt: Date

    public init(teamID: String, keyID: String, keyFingerprint: String, token: String, issuedAt: Date) {
        self.teamID = teamID
        self.keyID = keyID
        self.keyFingerprint = keyFingerprint
        self.token = token
        self.issuedAt = issuedAt
    }

    public var description: String {
        "provider token of team \(teamID) key \(keyID) issued at \(issuedAt.timeIntervalSince1970)"
    }
}

/// Where provider tokens are shared: one token per team, key ID and key fingerprint, replaced by
/// compare-and-swap. Herald's stores implement it (SQLite and PostgreSQL); the token credential
/// provider uses it.
public protocol ProviderTokenStore: Sendable {
    /// The stored token of this key, if any.
    func providerToken(teamID: String, keyID: String, keyFingerprint: String) async throws -> SharedProviderToken?

    /// Stores `token` if the key's stored token is still the one issued at `replacing` (nil: the
    /// key has none stored yet); otherwise changes nothing.
    /// - Returns: the key's token after the call: `token` when it was stored, or the one another
    ///   instance stored first (the caller sends that one instead of its own).
    func replaceProviderToken(_ token: SharedProviderToken, replacing: Date?) async throws -> SharedProviderToken
}
