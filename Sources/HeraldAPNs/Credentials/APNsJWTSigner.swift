import Crypto
import Foundation
import HeraldCore

/// Signs APNs provider authentication tokens synchronously with swift-crypto: header
/// `{"alg":"ES256","kid":…,"typ":"JWT"}`, claims exactly `{"iss": team ID, "iat": integer seconds}`,
/// the ES256 signature as the raw 64-byte `r‖s` (JWS, RFC 7518 3.4), all base64url without padding.
///
/// A provider token is one fixed shape of JWT signed once every 50 minutes: swift-crypto does
/// the signing (the part worth a library); the JSON is written by `JSONValue`, keys in sorted
/// order. Signing is a plain function call, so a send never waits on an actor or a task to get
/// its token. A test verifies these tokens with jwt-kit, an independent implementation.
struct APNsJWTSigner: Sendable {
    let keyID: String
    let teamID: String
    private let key: P256.Signing.PrivateKey
    /// The encoded header: the same for every token of this key.
    private let encodedHeader: String

    init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) throws {
        self.keyID = keyID
        self.teamID = teamID
        self.key = privateKey
        let header = JSONValue.object([("alg", .string("ES256")), ("kid", .string(keyID)), ("typ", .string("JWT"))])
        self.encodedHeader = Base64URL.encode(header.jsonText.utf8)
    }

    /// A signed JWT issued at `issuedAt` (whole seconds).
    func sign(issuedAt: Date) throws -> String {
        let seconds = issuedAt.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite, seconds >= 0, seconds < 1e15 else { throw SigningError.issuedAtOutOfRange }
        let claims = JSONValue.object([("iat", .int(Int64(seconds))), ("iss", .string(teamID))])
        let signingInput = encodedHeader + "." + Base64URL.encode(claims.jsonText.utf8)
        let signature = try key.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    enum SigningError: Error {
        case issuedAtOutOfRange
    }
}
