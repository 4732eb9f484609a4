import Crypto
import Foundation
import HeraldAPNs
import HeraldCore
import JWTKit
import NIOSSL
import Testing

/// A provider token taken apart without jwt-kit, so that a misuse of jwt-kit cannot be mirrored here.
private struct DecodedJWT {
    var header: [String: Any]
    var claims: [String: Any]
    var claimsJSON: String
    var signingInput: String
    var signature: Data

    init(authorization: String) throws {
        #expect(authorization.hasPrefix("bearer "))
        let jwt = authorization.dropFirst("bearer ".count)
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 3)
        let headerData = try #require(Self.base64URLDecode(parts[0]))
        let claimsData = try #require(Self.base64URLDecode(parts[1]))
        header = try #require(try JSONSerialization.jsonObject(with: headerData) as? [String: Any])
        claims = try #require(try JSONSerialization.jsonObject(with: claimsData) as? [String: Any])
        claimsJSON = String(decoding: claimsData, as: UTF8.self)
        signingInput = parts[0] + "." + parts[1]
        signature = try #require(Self.base64URLDecode(parts[2]))
    }

    /// `iat` exactly as written in the JSON: it must be an integer.
    var issuedAt: Int? {
        struct IAT: Decodable { var iat: Int }
        return try? JSONDecoder().decode(IAT.self, from: Data(claimsJSON.utf8)).iat
    }

    func isSigned(by publicKey: P256.Signing.PublicKey) -> Bool {
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
        return publicKey.isValidSignature(signature, for: Data(signingInput.utf8))
    }

    static func base64URLDecode(_ text: String) -> Data? {
        guard !text.contains("="), !text.contains("+"), !text.contains("/") else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

private func tokenTenant(
    key: String, origin: String = "file tenants/keys/AuthKey_TESTKEY001.p8", keyID: String = "TESTKEY001",
    teamID: String = "TESTTEAM01"
) throws -> TenantConfiguration {
    TenantConfiguration(
        id: try TenantID("token-tenant"), teamID: teamID,
        auth: .token(TokenAuthConfiguration(keyID: keyID, privateKey: Secret(bytes: Array(key.utf8), origin: origin))),
        topics: ["com.example.app"], sourceFile: "tenants/token-tenant.yaml")
}

private let demoComment = "# DEMO KEY for the local APNsSandbox only - never use it with Apple or in production\n"

private func makeProvider(
    key: P256.Signing.PrivateKey = P256.Signing.PrivateKey(), clock: ManualWallClock,
    policy: TokenRefreshPolicy = TokenRefreshPolicy()
) throws -> TokenCredentialProvider {
    let provider = try CredentialProviders.make(
        for: tokenTenant(key: demoComment + key.pemRepresentation), clock: clock, tokenRefresh: policy)
    return try #require(provider as? TokenCredentialProvider)
}

@Suite("Token credentials")
struct TokenCredentialProviderTests {
    @Test func tokenIsAnES256JWTThatVerifiesWithThePublicKey() async throws {
        let key = P256.Signing.PrivateKey()
        let clock = ManualWallClock(Date(timeIntervalSince1970: 1_700_000_000.75))
        let provider = try CredentialProviders.make(
            for: tokenTenant(key: demoComment + key.pemRepresentation), clock: clock)
        #expect(provider.kind == .token)
        #expect(provider.summary == CredentialSummary(kind: .token, keyID: "TESTKEY001", teamID: "TESTTEAM01"))

        let authorization = try #require(try await provider.authorization())
        let jwt = try DecodedJWT(authorization: authorization)
        #expect(jwt.header["alg"] as? String == "ES256")
        #expect(jwt.header["kid"] as? String == "TESTKEY001")
        // typ: JWT as jwt-kit writes it; nothing else may appear.
        #expect(Set(jwt.header.keys).isSubset(of: ["alg", "kid", "typ"]))
        #expect(Set(jwt.claims.keys) == ["iss", "iat"])
        #expect(jwt.claims["iss"] as? String == "TESTTEAM01")
        #expect(jwt.issuedAt == 1_700_000_000)
        #expect(!jwt.claimsJSON.contains("."))
        #expect(jwt.signature.count == 64)
        #expect(jwt.isSigned(by: key.publicKey))
        #expect(!jwt.isSigned(by: P256.Signing.PrivateKey().publicKey))
    }

    /// The token taken apart with swift-crypto alone is the test above (and the sandbox's own
    /// check, end to end); this one reads it back as jwt-kit's verifier does.
    @Test("Herald's tokens verify with jwt-kit's verifier under the key ID, and not under another key")
    func tokenVerifiesWithJWTKit() async throws {
        struct Claims: JWTPayload {
            var iss: IssuerClaim
            var iat: IssuedAtClaim
            func verify(using algorithm: some JWTAlgorithm) async throws {}
        }
        let key = P256.Signing.PrivateKey()
        let clock = ManualWallClock(Date(timeIntervalSince1970: 1_700_000_123))
        let provider = try makeProvider(key: key, clock: clock)
        let authorization = try #require(try await provider.authorization())
        let jwt = String(authorization.dropFirst("bearer ".count))

        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PublicKey(backing: key.publicKey), kid: JWKIdentifier(string: "TESTKEY001"))
        let claims = try await keys.verify(jwt, as: Claims.self)
        #expect(claims.iss.value == "TESTTEAM01")
        #expect(claims.iat.value == Date(timeIntervalSince1970: 1_700_000_123))

        let other = JWTKeyCollection()
        await other.add(ecdsa: try ES256PublicKey(backing: P256.Signing.PrivateKey().publicKey), kid: JWKIdentifier(string: "TESTKEY001"))
        await #expect(throws: (any Error).self) { _ = try await other.verify(jwt, as: Claims.self) }
    }

    @Test("the cached token is read without signing: none before the first, the same until due, none once rejected")
    func cachedAuthorizationIsTheOneCache() async throws {
        let clock = ManualWallClock()
        let provider = try makeProvider(clock: clock)
        #expect(provider.cachedAuthorization() == nil)
        let first = try #require(try await provider.authorization())
        #expect(provider.cachedAuthorization() == first)
        clock.advance(by: 49 * 60 + 59)
        #expect(provider.cachedAuthorization() == first)
        #expect(provider.tokensSigned == 1)
        clock.advance(by: 1)
        // Due: a send goes through authorization(), which signs the replacement.
        #expect(provider.cachedAuthorization() == nil)
        let second = try #require(try await provider.authorization())
        #expect(second != first)
        #expect(provider.cachedAuthorization() == second)
        await provider.tokenRejectedAsExpired(second)
        #expect(provider.cachedAuthorization() == nil)
        #expect(provider.tokensSigned == 2)
    }

    @Test func tamperedClaimsDoNotVerify() async throws {
        let key = P256.Signing.PrivateKey()
        let provider = try makeProvider(key: key, clock: ManualWallClock())
        let authorization = try #require(try await provider.authorization())
        var parts = authorization.split(separator: ".").map(String.init)
        let forged = Data(#"{"iss":"OTHERTEAM1","iat":1700000000}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
        parts[1] = forged
        let jwt = try DecodedJWT(authorization: parts.joined(separator: "."))
        #expect(jwt.claims["iss"] as? String == "OTHERTEAM1")
        #expect(!jwt.isSigned(by: key.publicKey))
    }

    @Test func keyInSEC1PEMAndWithoutCommentLoadsToo() async throws {
        let key = P256.Signing.PrivateKey()
        let sec1 = try CredentialTestPKI.sec1DER(key)
        let pem = "-----BEGIN EC PRIVATE KEY-----\n\(sec1Base64(sec1))\n-----END EC PRIVATE KEY-----\n"
        let provider = try CredentialProviders.make(for: tokenTenant(key: pem), clock: ManualWallClock())
        let jwt = try DecodedJWT(authorization: try #require(try await provider.authorization()))
        #expect(jwt.isSigned(by: key.publicKey))

        let plain = try CredentialProviders.make(for: tokenTenant(key: key.pemRepresentation), clock: ManualWallClock())
        #expect(
            try DecodedJWT(authorization: try #require(try await plain.authorization())).isSigned(by: key.publicKey))
    }

    @Test func tokenIsReusedUntilFiftyMinutesThenReplaced() async throws {
        let clock = ManualWallClock()
        let start = clock.now
        let provider = try makeProvider(clock: clock)
        let first = try #require(try await provider.authorization())
        #expect(provider.tokensSigned == 1)

        clock.advance(by: 49 * 60 + 59)
        #expect(try await provider.authorization() == first)
        #expect(provider.tokensSigned == 1)

        clock.advance(by: 1)
        let second = try #require(try await provider.authorization())
        #expect(second != first)
        #expect(provider.tokensSigned == 2)
        #expect(try DecodedJWT(authorization: second).issuedAt == Int(start.timeIntervalSince1970) + 50 * 60)

        clock.advance(by: 49 * 60)
        #expect(try await provider.authorization() == second)
        #expect(provider.tokensSigned == 2)
    }

    @Test func neverRefreshedInsideTheMinimumIntervalEvenIfConfiguredSooner() async throws {
        let clock = ManualWallClock()
        let provider = try makeProvider(clock: clock, policy: TokenRefreshPolicy(refreshAfter: 5 * 60))
        let first = try #require(try await provider.authorization())
        clock.advance(by: 19 * 60 + 59)
        #expect(try await provider.authorization() == first)
        clock.advance(by: 1)
        #expect(try await provider.authorization() != first)
        #expect(provider.tokensSigned == 2)
    }

    @Test func shorterMinimumIntervalAndRefreshAreHonoured() async throws {
        let clock = ManualWallClock()
        let provider = try makeProvider(
            clock: clock, policy: TokenRefreshPolicy(refreshAfter: 10 * 60, minimumInterval: 5 * 60))
        let first = try #require(try await provider.authorization())
        clock.advance(by: 9 * 60)
        #expect(try await provider.authorization() == first)
        clock.advance(by: 60)
        #expect(try await provider.authorization() != first)
    }

    @Test func rejectedAsExpiredForcesOneRefreshPerRejectedToken() async throws {
        let clock = ManualWallClock()
        let provider = try makeProvider(clock: clock)
        let first = try #require(try await provider.authorization())
        clock.advance(by: 60)

        // An unrelated value changes nothing.
        await provider.tokenRejectedAsExpired("bearer not-our-token")
        #expect(try await provider.authorization() == first)

        // Many streams report the same rejected token: one new token.
        for _ in 0..<5 { await provider.tokenRejectedAsExpired(first) }
        let second = try #require(try await provider.authorization())
        #expect(second != first)
        #expect(provider.tokensSigned == 2)

        // Late reports of the old token do not force another one.
        await provider.tokenRejectedAsExpired(first)
        #expect(try await provider.authorization() == second)
        #expect(provider.tokensSigned == 2)

        // The new token may be rejected in its turn.
        clock.advance(by: 1)
        await provider.tokenRejectedAsExpired(second)
        let third = try #require(try await provider.authorization())
        #expect(third != second)
        #expect(provider.tokensSigned == 3)
    }

    @Test func anHourOldTokenIsNeverSent() async throws {
        let clock = ManualWallClock()
        let provider = try makeProvider(clock: clock)
        let first = try #require(try await provider.authorization())
        clock.advance(by: 2 * 3600)
        let second = try #require(try await provider.authorization())
        #expect(second != first)
        #expect(try DecodedJWT(authorization: second).issuedAt == Int(clock.now.timeIntervalSince1970))
    }

    @Test func concurrentCallersShareOneNewToken() async throws {
        let clock = ManualWallClock()
        let provider = try makeProvider(clock: clock)

        // No token yet: every caller waits for the one being signed.
        let initial = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<64 { group.addTask { try await provider.authorization() } }
            return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
        }
        #expect(initial.count == 1)
        #expect(provider.tokensSigned == 1)
        let first = try #require(initial.first ?? nil)

        // Due for refresh: one caller signs, the others keep sending the still valid token.
        clock.advance(by: 50 * 60)
        let refreshed = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<64 { group.addTask { try await provider.authorization() } }
            return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
        }
        #expect(provider.tokensSigned == 2)
        let second = try await provider.authorization()
        #expect(second != first)
        #expect(refreshed.isSubset(of: [first, second]))

        // Rejected as expired: nobody may send it; all wait for the same replacement.
        let current = try #require(try await provider.authorization())
        await provider.tokenRejectedAsExpired(current)
        let replaced = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<64 { group.addTask { try await provider.authorization() } }
            return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
        }
        #expect(replaced.count == 1)
        #expect(!replaced.contains(current))
        #expect(provider.tokensSigned == 3)
    }

    @Test func identityNamesKeyAndFingerprintButNoSecret() throws {
        let key = P256.Signing.PrivateKey()
        let clock = ManualWallClock()
        let a = try makeProvider(key: key, clock: clock)
        let b = try makeProvider(key: key, clock: clock)
        let c = try makeProvider(clock: clock)
        #expect(a.identity == b.identity)
        #expect(a.identity != c.identity)
        #expect(a.identity.hasPrefix("token:TESTTEAM01:TESTKEY001:"))
        #expect(!a.identity.contains(key.pemRepresentation))
        // The fingerprint: the first 16 hex digits of the SHA-256 of the public key's DER.
        let digest = SHA256.hash(data: key.publicKey.derRepresentation)
        let hex = digest.map { String(format: "%02x", $0) }.joined()
        #expect(a.identity == "token:TESTTEAM01:TESTKEY001:" + hex.prefix(16))
    }

    @Test func tlsConfigurationIsTheBaseForTokens() throws {
        let provider = try makeProvider(clock: ManualWallClock())
        var base = TLSConfiguration.makeClientConfiguration()
        base.applicationProtocols = ["h2"]
        let configuration = try provider.tlsConfiguration(base: base)
        #expect(configuration.certificateChain.isEmpty)
        #expect(configuration.privateKey == nil)
        #expect(configuration.applicationProtocols == ["h2"])
    }

    @Test(arguments: [
        ("not a key at all", CredentialError.Kind.invalidTokenKey, "holds no PEM private key"),
        (P384.Signing.PrivateKey().pemRepresentation, .invalidTokenKey, "is not a P-256 (ES256) private key"),
        (
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n", .invalidTokenKey,
            "encrypted"
        ),
        ("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n", .invalidTokenKey, "is not a P-256"),
    ])
    func badKeysAreClearErrors(key: String, kind: CredentialError.Kind, fragment: String) throws {
        let error = try #require(throws: CredentialError.self) {
            try CredentialProviders.make(for: tokenTenant(key: key), clock: ManualWallClock())
        }
        #expect(error.kind == kind)
        #expect(error.file == "tenants/token-tenant.yaml")
        #expect(error.field == "auth.token.key_file")
        #expect(
            error.description.hasPrefix(
                "tenants/token-tenant.yaml: auth.token.key_file: file tenants/keys/AuthKey_TESTKEY001.p8"))
        #expect(error.description.contains(fragment))
        // Nothing of the key itself.
        for line in key.split(separator: "\n") where !line.hasPrefix("-----") {
            #expect(!error.description.contains(line))
        }
    }

    @Test func keyFromTheEnvironmentIsNamedByItsField() throws {
        let error = try #require(throws: CredentialError.self) {
            try CredentialProviders.make(
                for: tokenTenant(key: "garbage", origin: "env ACME_P8"), clock: ManualWallClock())
        }
        #expect(error.field == "auth.token.key")
        #expect(error.description.contains("env ACME_P8"))
        #expect(!error.description.contains("garbage"))
    }
}

private func sec1Base64(_ der: [UInt8]) -> String {
    Data(der).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
}
