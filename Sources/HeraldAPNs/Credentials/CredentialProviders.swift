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
            let field = token.privateKey.origin.hasPrefix("env") ? "auth.token.key" : "auth.token.key_file"
            return try TokenCredentialProvider(
                teamID: tenant.teamID, keyID: token.keyID, privateKey: token.privateKey, policy: tokenRefresh,
                clock: clock, file: tenant.sourceFile, keyField: field, tokenStore: tokenStore)
        case .certificate(let certificate):
            return try CertificateCredentialProvider(
                configuration: certificate, teamID: tenant.teamID, requiredTopics: tenant.topics, clock: clock,
                file: tenant.sourceFile)
        }
    }
}
