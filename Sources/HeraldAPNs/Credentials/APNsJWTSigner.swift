import Crypto
import Foundation

/// Signs APNs provider authentication tokens synchronously with swift-crypto: header
/// `{"alg":"ES256","kid":…,"typ":"JWT"}`, claims exactly `{"iss": team ID, "iat": integer seconds}`,
/// the ES256 signature as the raw 64-byte `r‖s` (JWS, RFC 7518 3.4), all base64url without padding.
///
/// A provider token is one fixed shape of JWT signed once every 50 minutes: swift-crypto does
/// the signing (the part worth a library); the JSON is encoded by `JSONEncoder`. Signing is a
/// plain function call, so a send never waits on an actor or a task to get its token. A test
/// verifies these tokens with jwt-kit, an independent implementation.
struct APNsJWTSigner: Sendable {
    private struct Header: Encodable {
        var alg = "ES256"
        var kid: String
        var typ = "JWT"
    }

    private struct Claims: Encodable {
        var iss: String
        var iat: Int64
    }

    let keyID: String
    let teamID: String
    private let key: P256.Signing.PrivateKey
    /// The encoded header: the same for every token of this key.
    private let encodedHeader: String

    init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) throws {
        self.keyID = keyID
        self.teamID = teamID
        self.key = privateKey
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        self.encodedHeader = Self.base64URL(try encoder.encode(Header(kid: keyID)))
    }

    /// A signed JWT issued at `issuedAt` (whole seconds).
    func sign(issuedAt: Date) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let seconds = issuedAt.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite, seconds >= 0, seconds < 1e15 else { throw SigningError.issuedAtOutOfRange }
        let claims = try encoder.encode(Claims(iss: teamID, iat: Int64(seconds)))
        let signingInput = encodedHeader + "." + Self.base64URL(claims)
        let signature = try key.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Self.base64URL(signature.rawRepresentation)
    }

    enum SigningError: Error {
        case issuedAtOutOfRange
    }

    /// Base64url without padding (RFC 7515 2).
    static func base64URL(_ data: Data) -> String {
        var text = data.base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }
}
