import Foundation
import HeraldCore
import NIOSSL

/// A tenant's several token keys, or keys Apple restricted to one environment or to some
/// topics: one ``TokenCredentialProvider`` per key (its own cached token, its own shared token in
/// the store), and each send signed by the first key that fits its environment and topic
/// (``HeraldCore/TokenAuthConfiguration/key(for:topic:)``). The tenant's admission refuses a send
/// no key fits, so a send here always finds one; the first key answers the calls that name no
/// environment and topic.
public final class KeyedTokenCredentialProvider: CredentialProvider {
    private let keys: [(configuration: TokenKeyConfiguration, provider: TokenCredentialProvider)]
    public let summary: CredentialSummary
    public let identity: String
    public var kind: AuthKind { .token }
    private let file: String

    /// - Parameter keys: the keys in the tenant file's order, each with its provider; not empty.
    public init(keys: [(configuration: TokenKeyConfiguration, provider: TokenCredentialProvider)], teamID: String, file: String) {
        self.keys = keys
        self.file = file
        summary = CredentialSummary(
            kind: .token, keyID: keys.map(\.configuration.keyID).joined(separator: ", "), teamID: teamID)
        identity = "tokens[" + keys.map(\.provider.identity).joined(separator: ",") + "]"
    }

    private func provider(environment: APNsEnvironment, topic: String) -> TokenCredentialProvider? {
        keys.first { $0.configuration.fits(environment: environment, topic: topic) }?.provider
    }

    public func authorization() async throws -> String? {
        try await keys.first?.provider.authorization()
    }

    public func cachedAuthorization() -> String? {
        keys.first?.provider.cachedAuthorization()
    }

    public func authorization(environment: APNsEnvironment, topic: String) async throws -> String? {
        guard let provider = provider(environment: environment, topic: topic) else {
            throw CredentialError.tokenSigningFailed(
                file: file, field: "auth.token", message: "no token key may sign for \(environment) and topic '\(topic)'")
        }
        return try await provider.authorization()
    }

    public func cachedAuthorization(environment: APNsEnvironment, topic: String) -> String? {
        provider(environment: environment, topic: topic)?.cachedAuthorization()
    }

    /// Each key's provider drops the token if it is the one rejected.
    public func tokenRejectedAsExpired(_ rejected: String) async {
        for key in keys { await key.provider.tokenRejectedAsExpired(rejected) }
    }

    public func tlsConfiguration(base: TLSConfiguration) throws -> TLSConfiguration { base }

    /// The key IDs and what each is restricted to, for messages.
    public var keySummaries: [(keyID: String, restriction: String)] {
        keys.map { ($0.configuration.keyID, $0.configuration.restrictionText) }
    }
}
