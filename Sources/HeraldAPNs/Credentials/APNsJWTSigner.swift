import Crypto
import Foundation
import HeraldCore
import JWTKit
import Synchronization

/// Signs APNs provider authentication tokens with jwt-kit: ES256 with the tenant's `.p8` key,
/// the key ID as the header's `kid`, and the claims APNs reads, `iss` (the team ID) and `iat`
/// (whole seconds).
///
/// The key is the one the credential loaded (and so checked) when its tenant loaded; jwt-kit's
/// copy of it is made at the first signature, not at load: a provider signs about once every
/// 50 minutes, and loading 10,000 tenants signs nothing.
final class APNsJWTSigner: Sendable {
    let keyID: String
    let teamID: String
    private let key: P256.Signing.PrivateKey
    /// jwt-kit's keys, made at the first ``sign(issuedAt:)``.
    private let keys = Mutex<JWTKeyCollection?>(nil)

    init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) {
        self.keyID = keyID
        self.teamID = teamID
        self.key = privateKey
    }

    /// A provider token issued at `issuedAt` (rounded down to whole seconds).
    /// - Throws: ``SigningError/issuedAtOutOfRange`` for a time no token can carry, or jwt-kit's
    ///   signing error.
    func sign(issuedAt: Date) async throws -> String {
        let seconds = issuedAt.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite, seconds >= 0, seconds < 1e15 else { throw SigningError.issuedAtOutOfRange }
        let claims = ProviderClaims(
            iss: IssuerClaim(value: teamID), iat: IssuedAtClaim(value: Date(timeIntervalSince1970: seconds)))
        return try await keyCollection().sign(claims, kid: JWKIdentifier(string: keyID))
    }

    private func keyCollection() async throws -> JWTKeyCollection {
        if let made = keys.withLock({ $0 }) { return made }
        let made = await JWTKeyCollection().add(ecdsa: try ES256PrivateKey(backing: key), kid: JWKIdentifier(string: keyID))
        // Two first signatures at once make one each; the first kept is used from then on.
        return keys.withLock { keys in
            if let kept = keys { return kept }
            keys = made
            return made
        }
    }

    /// The claims of an APNs provider token.
    private struct ProviderClaims: JWTPayload {
        var iss: IssuerClaim
        var iat: IssuedAtClaim

        /// Herald signs these; it never verifies one.
        func verify(using algorithm: some JWTAlgorithm) throws {}
    }

    enum SigningError: Error {
        case issuedAtOutOfRange
    }
}
