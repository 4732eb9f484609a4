import Crypto
import Foundation
import HeraldCore
import Synchronization

/// What a provider token (JWT) says, once its signature is checked.
struct VerifiedToken: Sendable, Hashable {
    /// Index into the verifier's keys.
    var keyIndex: Int
    var issuedAt: Int64
}

/// Verifies `authorization: bearer <JWT>` values against the registered keys, once per distinct
/// token: the verdict is cached (bounded) so that signature checks never limit throughput.
final class SandboxTokenVerifier: Sendable {
    let keys: [SandboxTokenKey]
    private let keyIndex: [String: Int]
    private let cache: Mutex<[String: Result<VerifiedToken, TokenRejection>]>
    private let verifications = Atomic<Int>(0)
    static let cacheLimit = 10_000

    enum TokenRejection: Error, Hashable {
        case invalid
    }

    init(keys: [SandboxTokenKey]) {
        self.keys = keys
        var index: [String: Int] = [:]
        for (i, key) in keys.enumerated() { index[key.keyID] = i }
        self.keyIndex = index
        self.cache = Mutex([:])
    }

    /// How many distinct tokens had their signature checked.
    var verificationCount: Int { verifications.load(ordering: .relaxed) }

    /// The verdict for a JWT (without the `bearer ` prefix): cached after the first time.
    func verify(jwt: String) -> Result<VerifiedToken, TokenRejection> {
        if let cached = cache.withLock({ $0[jwt] }) { return cached }
        let verdict = Self.check(jwt: jwt, keys: keys, keyIndex: keyIndex)
        verifications.add(1, ordering: .relaxed)
        cache.withLock { cache in
            if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
            cache[jwt] = verdict
        }
        return verdict
    }

    private static func check(
        jwt: String, keys: [SandboxTokenKey], keyIndex: [String: Int]
    ) -> Result<VerifiedToken, TokenRejection> {
        let parts = jwt.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerBytes = Base64URL.decode(parts[0]),
            let claimsBytes = Base64URL.decode(parts[1]),
            let signatureBytes = Base64URL.decode(parts[2]),
            let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)),
            let claims = try? JSONDecoder().decode(Claims.self, from: Data(claimsBytes))
        else { return .failure(.invalid) }
        // APNs accepts only ES256, with a known key ID, issued by that key's team.
        guard header.alg == "ES256",
            let kid = header.kid, let index = keyIndex[kid],
            claims.iss == keys[index].teamID,
            let iatValue = claims.iat, iatValue.isFinite, abs(iatValue) < 1e12
        else { return .failure(.invalid) }
        // RFC 7519 NumericDate may carry a fraction; APNs reads whole seconds.
        let iat = Int64(iatValue.rounded(.down))
        guard signatureBytes.count == 64,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { return .failure(.invalid) }
        let signingInput = Array(jwt.utf8.prefix(parts[0].count + 1 + parts[1].count))
        guard keys[index].publicKey.isValidSignature(signature, for: signingInput) else {
            return .failure(.invalid)
        }
        return .success(VerifiedToken(keyIndex: index, issuedAt: iat))
    }

    private struct Header: Decodable {
        var alg: String?
        var kid: String?
    }

    private struct Claims: Decodable {
        var iss: String?
        var iat: Double?
    }
}

/// Counts how often a key's token changes: a newer `iat` within the minimum interval of the
/// last change is refused. Older tokens (still within their hour) are accepted as they are.
struct TokenUpdateTracker: Sendable {
    private var current: [Int: (issuedAt: Int64, changedAt: Date)] = [:]

    /// True when the token may be used; false for `TooManyProviderTokenUpdates`.
    mutating func observe(keyIndex: Int, issuedAt: Int64, now: Date, minimumInterval: TimeInterval) -> Bool {
        guard let state = current[keyIndex] else {
            current[keyIndex] = (issuedAt, now)
            return true
        }
        if issuedAt <= state.issuedAt { return true }
        if now.timeIntervalSince(state.changedAt) < minimumInterval { return false }
        current[keyIndex] = (issuedAt, now)
        return true
    }
}

/// Base64url without padding, as JWTs use it.
enum Base64URL {
    static func decode(_ input: some Collection<UInt8>) -> [UInt8]? {
        var text = [UInt8]()
        text.reserveCapacity(input.count + 3)
        for byte in input {
            switch byte {
            case UInt8(ascii: "-"): text.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): text.append(UInt8(ascii: "/"))
            case UInt8(ascii: "="): continue
            default: text.append(byte)
            }
        }
        while text.count % 4 != 0 { text.append(UInt8(ascii: "=")) }
        guard let data = Data(base64Encoded: Data(text)) else { return nil }
        return Array(data)
    }

    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// Makes provider tokens: for `herald sandbox demo-token`, demos and tests.
public enum SandboxJWT {
    /// A signed ES256 provider token (`header.claims.signature`, without `bearer `).
    public static func make(
        teamID: String, keyID: String, privateKey: P256.Signing.PrivateKey, issuedAt: Date
    ) throws -> String {
        let header = "{\"alg\":\"ES256\",\"kid\":" + JSONValue.string(keyID).jsonText + "}"
        let claims =
            "{\"iss\":" + JSONValue.string(teamID).jsonText + ",\"iat\":"
            + String(Int64(issuedAt.timeIntervalSince1970.rounded(.down))) + "}"
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try privateKey.signature(for: Array(input.utf8))
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }
}
