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
    private let keyIndex: [ExactText: Int]
    private let cache: Mutex<[ExactText: Result<VerifiedToken, TokenRejection>]>
    private let verifications = Atomic<Int>(0)
    static let cacheLimit = 10_000

    enum TokenRejection: Error, Hashable {
        case invalid
    }

    init(keys: [SandboxTokenKey]) {
        self.keys = keys
        var index: [ExactText: Int] = [:]
        for (i, key) in keys.enumerated() { index[ExactText(key.keyID)] = i }
        self.keyIndex = index
        self.cache = Mutex([:])
    }

    /// How many distinct tokens had their signature checked.
    var verificationCount: Int { verifications.load(ordering: .relaxed) }

    /// The verdict for a JWT (without the `bearer ` prefix): cached after the first time.
    func verify(jwt: String) -> Result<VerifiedToken, TokenRejection> {
        let key = ExactText(jwt)
        if let cached = cache.withLock({ $0[key] }) { return cached }
        let verdict = Self.check(jwt: jwt, keys: keys, keyIndex: keyIndex)
        verifications.add(1, ordering: .relaxed)
        cache.withLock { cache in
            if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
            cache[key] = verdict
        }
        return verdict
    }

    private static func check(
        jwt: String, keys: [SandboxTokenKey], keyIndex: [ExactText: Int]
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
            let kid = header.kid, let index = keyIndex[ExactText(kid)],
            claims.iss == keys[index].teamID,
            let iatValue = claims.iat?.seconds, iatValue.isFinite, abs(iatValue) < 1e12
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

    /// The JOSE header. Other members (`typ: JWT`, which most JWT libraries add) are ignored,
    /// as APNs ignores them.
    private struct Header: Decodable {
        var alg: String?
        var kid: String?
    }

    /// The claims APNs reads. Other claims (a repeated `kid`, `exp`, `jti` …) are ignored.
    private struct Claims: Decodable {
        var iss: String?
        var iat: NumericDate?
    }

    /// `iat` as clients in the wild send it: a JSON number (RFC 7519's NumericDate) or the same
    /// number as a JSON string (`"1700000000"`), which APNs accepts too. Anything else (a
    /// boolean, an object, a string that is not a plain decimal number) is malformed.
    struct NumericDate: Decodable, Equatable {
        var seconds: Double

        init(seconds: Double) { self.seconds = seconds }

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let number = try? container.decode(Double.self) {
                seconds = number
                return
            }
            let text = try container.decode(String.self)
            guard let number = Self.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "iat is neither a number nor a numeric string")
            }
            seconds = number
        }

        /// A plain decimal (`123`, `123.5`, `-1`): no exponent, hex, `inf` or `nan`, no spaces.
        static func parse(_ text: String) -> Double? {
            var digits = 0
            var dots = 0
            for (offset, byte) in text.utf8.enumerated() {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digits += 1
                case UInt8(ascii: "."): dots += 1
                case UInt8(ascii: "-") where offset == 0: continue
                default: return nil
                }
            }
            guard digits > 0, dots <= 1, text.utf8.last != UInt8(ascii: "."), text.utf8.count <= 32 else {
                return nil
            }
            return Double(text)
        }
    }
}

/// APNs' time rules for a verified token: older than its lifetime is `ExpiredProviderToken`;
/// issued in the future (beyond a small allowance for clock skew) is `InvalidProviderToken`.
enum TokenAge {
    /// How far ahead of the sandbox's clock an `iat` may be (seconds): clients' clocks drift.
    static let futureAllowance: TimeInterval = 60

    static func check(issuedAt: Int64, now: Date, lifetime: TimeInterval) -> APNsReason? {
        let age = now.timeIntervalSince1970 - Double(issuedAt)
        if age > lifetime { return .expiredProviderToken }
        if -age > futureAllowance { return .invalidProviderToken }
        return nil
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

/// The strict rule: per key, the tokens accepted within their lifetime are remembered (by their
/// SHA-256, so no token is kept); a token not among them is an update, refused when the key's
/// last update was less than the minimum interval ago. At most `lifetime / interval + 1` tokens
/// a key are alive, and the list is capped below that bound, so memory stays bounded whatever a
/// client sends.
struct StrictTokenTracker: Sendable {
    struct KeyState: Sendable {
        var accepted: [(digest: SHA256Digest, issuedAt: Int64)] = []
        var changedAt: Date
    }

    static let maximumRemembered = 16
    private var keys: [Int: KeyState] = [:]

    /// True when the token may be used; false for `TooManyProviderTokenUpdates`.
    mutating func observe(
        keyIndex: Int, token: Substring, issuedAt: Int64, now: Date, minimumInterval: TimeInterval,
        lifetime: TimeInterval
    ) -> Bool {
        let digest = SHA256.hash(data: Array(token.utf8))
        guard var state = keys[keyIndex] else {
            keys[keyIndex] = KeyState(accepted: [(digest, issuedAt)], changedAt: now)
            return true
        }
        let oldest = Int64((now.timeIntervalSince1970 - lifetime).rounded(.down))
        state.accepted.removeAll { $0.issuedAt < oldest }
        defer { keys[keyIndex] = state }
        if state.accepted.contains(where: { $0.digest == digest }) { return true }
        if now.timeIntervalSince(state.changedAt) < minimumInterval { return false }
        if state.accepted.count >= Self.maximumRemembered { state.accepted.removeFirst() }
        state.accepted.append((digest, issuedAt))
        state.changedAt = now
        return true
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

/// Text as a dictionary key compared by its UTF-8 bytes. `String`'s own `==` and hash are
/// canonical equivalence (U+212A KELVIN SIGN equals `K`), under which a token that differs from
/// a verified one would find that one's verdict, and a key ID would name a key it does not.
struct ExactText: Hashable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (lhs: ExactText, rhs: ExactText) -> Bool {
        lhs.text.utf8.elementsEqual(rhs.text.utf8)
    }

    func hash(into hasher: inout Hasher) {
        for byte in text.utf8 { hasher.combine(byte) }
    }
}
