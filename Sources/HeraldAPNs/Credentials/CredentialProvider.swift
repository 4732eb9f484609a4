import Foundation
import HeraldCore
import NIOSSL

/// The credential a tenant authenticates to APNs with: an ES256 provider token or a client certificate.
///
/// Built by ``CredentialProviders/make(for:clock:)`` from the tenant's configuration; the tenant's YAML
/// (`auth.token` or `auth.certificate`) picks the implementation.
///
/// ```swift
/// let provider = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
/// let tls = try provider.tlsConfiguration(base: base)         // client identity for certificates
/// if let authorization = try await provider.authorization() {  // "bearer <jwt>" for tokens
///     headers.add(name: "authorization", value: authorization)
/// }
/// ```
public protocol CredentialProvider: Sendable {
    /// Token or certificate.
    var kind: AuthKind { get }
    /// What the credential is, for `herald tenants validate|list` and logs. Never secret.
    var summary: CredentialSummary { get }
    /// `bearer <jwt>` for token auth (cached; regenerated per the refresh schedule), nil for certificates.
    func authorization() async throws -> String?
    /// The `authorization` value to send now when it is known without signing or waiting (a
    /// cached token that is not due), else nil: then ``authorization()``. Certificates: nil.
    func cachedAuthorization() -> String?
    /// The `authorization` for a send to `topic` in `environment`: with several token keys, the
    /// first that fits it signs (``KeyedTokenCredentialProvider``). Defaults to ``authorization()``.
    func authorization(environment: APNsEnvironment, topic: String) async throws -> String?
    /// ``cachedAuthorization()`` for a send to `topic` in `environment`.
    func cachedAuthorization(environment: APNsEnvironment, topic: String) -> String?
    /// After APNs answered 403 ExpiredProviderToken for `rejected` (the header value that was sent):
    /// make the next ``authorization()`` return a fresh token, even inside the minimum refresh interval,
    /// but only once per rejected token (many in-flight streams report the same expiry).
    func tokenRejectedAsExpired(_ rejected: String) async
    /// The client TLS configuration for this credential: the base (trust roots, ALPN set by the
    /// transport) plus the client identity for certificate auth.
    func tlsConfiguration(base: TLSConfiguration) throws -> TLSConfiguration
    /// Identifies the credential (key ID + a fingerprint of the key, or the certificate's fingerprint),
    /// never secret, so pools can be keyed "per tenant × endpoint × credential" and rotation detected.
    var identity: String { get }
}

/// A description of a loaded credential that is safe to print.
public struct CredentialSummary: Sendable, Hashable {
    public var kind: AuthKind
    /// The token signing key's ID (`kid`); nil for certificates.
    public var keyID: String?
    /// The tenant's Apple team ID (`iss` of the tokens).
    public var teamID: String
    /// The client certificate's subject, e.g. `CN=Apple Push Services: com.acme.app,UID=com.acme.app`.
    public var certificateSubject: String?
    /// When the client certificate expires.
    public var notAfter: Date?
    /// The topics the client certificate allows (its 1.2.840.113635.100.6.3.6 extension, or the
    /// subject's UID for an old single-topic certificate).
    public var certificateTopics: [String]?

    public init(
        kind: AuthKind, keyID: String? = nil, teamID: String, certificateSubject: String? = nil,
        notAfter: Date? = nil, certificateTopics: [String]? = nil
    ) {
        self.kind = kind
        self.keyID = keyID
        self.teamID = teamID
        self.certificateSubject = certificateSubject
        self.notAfter = notAfter
        self.certificateTopics = certificateTopics
    }
}

/// When a cached provider token is replaced.
///
/// APNs rejects a token older than an hour (403 ExpiredProviderToken) and one that changes more often
/// than every 20 minutes (429 TooManyProviderTokenUpdates). The defaults refresh at 50 minutes.
public struct TokenRefreshPolicy: Sendable, Hashable {
    /// A token this old (seconds) is replaced by the next ``CredentialProvider/authorization()``.
    public var refreshAfter: TimeInterval = 50 * 60
    /// A token younger than this (seconds) is never replaced, except after APNs rejected it as expired.
    public var minimumInterval: TimeInterval = 20 * 60
    /// A token this old (seconds) is never sent again: callers wait for its replacement.
    public var maximumAge: TimeInterval = 60 * 60

    public init() {}

    public init(refreshAfter: TimeInterval, minimumInterval: TimeInterval = 20 * 60, maximumAge: TimeInterval = 60 * 60)
    {
        self.refreshAfter = refreshAfter
        self.minimumInterval = minimumInterval
        self.maximumAge = maximumAge
    }
}

extension CredentialProvider {
    public func cachedAuthorization() -> String? { nil }

    public func authorization(environment: APNsEnvironment, topic: String) async throws -> String? {
        try await authorization()
    }

    public func cachedAuthorization(environment: APNsEnvironment, topic: String) -> String? {
        cachedAuthorization()
    }
}
