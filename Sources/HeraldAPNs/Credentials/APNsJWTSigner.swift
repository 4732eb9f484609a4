import Crypto
import Foundation
import JWTKit

/// Signs APNs provider authentication tokens with jwt-kit: header `{"alg":"ES256","kid":…}` (jwt-kit adds
/// `"typ":"JWT"`), claims exactly `{"iss": team ID, "iat": integer seconds}`.
actor APNsJWTSigner {
    private struct Claims: JWTPayload {
        var iss: IssuerClaim
        var iat: IssuedAtClaim

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    nonisolated let keyID: String
    nonisolated let teamID: String
    private let key: ES256PrivateKey
    private let keys: JWTKeyCollection
    private var keyAdded = false

    init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) throws {
        self.keyID = keyID
        self.teamID = teamID
        self.key = try ES256PrivateKey(backing: privateKey)
        // jwt-kit's default encodes dates as fractional seconds; APNs wants `iat` as an integer.
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .integerSecondsSince1970
        self.keys = JWTKeyCollection(defaultJWTSerializer: DefaultJWTSerializer(jsonEncoder: encoder))
    }

    /// A signed JWT issued at `issuedAt` (whole seconds).
    func sign(issuedAt: Date) async throws -> String {
        let kid = JWKIdentifier(string: keyID)
        if !keyAdded {
            await keys.add(ecdsa: key, kid: kid)
            keyAdded = true
        }
        let claims = Claims(iss: IssuerClaim(value: teamID), iat: IssuedAtClaim(value: issuedAt))
        return try await keys.sign(claims, kid: kid)
    }
}
