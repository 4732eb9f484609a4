import HeraldCore

/// Builds the credential provider a tenant's configuration asks for.
public enum CredentialProviders {
    /// Builds and checks the provider for a tenant: the key loads and can sign ES256 (token); the
    /// certificate and key load and match, it is valid now, and its topics cover every tenant topic
    /// (certificate). Errors are ``CredentialError``s: clear, and never containing secret material.
    ///
    /// ```swift
    /// let provider = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
    /// ```
    public static func make(for tenant: TenantConfiguration, clock: any WallClock) throws -> any CredentialProvider {
        try make(for: tenant, clock: clock, tokenRefresh: TokenRefreshPolicy())
    }

    /// ``make(for:clock:)`` with a token refresh schedule other than the default, and the store
    /// that shares provider tokens between instances and restarts (none: each provider signs its own).
    public static func make(
        for tenant: TenantConfiguration, clock: any WallClock, tokenRefresh: TokenRefreshPolicy,
        tokenStore: (any ProviderTokenStore)? = nil
    ) throws(CredentialError) -> any CredentialProvider {
        switch tenant.auth {
        case .token(let token):
            var providers: [(configuration: TokenKeyConfiguration, provider: TokenCredentialProvider)] = []
            for (index, key) in token.keys.enumerated() {
                let base = token.keys.count > 1 ? "auth.token[\(index)]" : "auth.token"
                let field = key.privateKey.origin.hasPrefix("env") ? base + ".key" : base + ".key_file"
                let provider = try TokenCredentialProvider(
                    teamID: tenant.teamID, keyID: key.keyID, privateKey: key.privateKey, policy: tokenRefresh,
                    clock: clock, file: tenant.sourceFile, keyField: field, tokenStore: tokenStore)
                providers.append((key, provider))
            }
            if !token.isRestricted, let only = providers.first { return only.provider }
            return KeyedTokenCredentialProvider(keys: providers, teamID: tenant.teamID, file: tenant.sourceFile)
        case .certificate(let certificate):
            return try CertificateCredentialProvider(
                configuration: certificate, teamID: tenant.teamID, requiredTopics: tenant.topics, clock: clock,
                file: tenant.sourceFile)
        }
    }
}
