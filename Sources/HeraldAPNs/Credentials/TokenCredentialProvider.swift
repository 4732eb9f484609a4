import Crypto
import Foundation
import HeraldCore
import NIOSSL
import Synchronization

/// Token-based authentication: an ES256 provider token signed with the tenant's `.p8` key.
///
/// The token is signed on first use and then reused; it is replaced when it is
/// ``TokenRefreshPolicy/refreshAfter`` old (50 minutes by default), never while it is younger than
/// ``TokenRefreshPolicy/minimumInterval`` (20 minutes), except once after APNs rejected it as
/// expired (``tokenRejectedAsExpired(_:)``). Reading the cached token is a lock and a comparison.
///
/// With a ``ProviderTokenStore`` the token is shared: before signing, the provider takes the key's
/// stored token if it is younger than `refreshAfter` (another instance, or this one before a
/// restart, signed it); otherwise it signs one and swaps it in by compare-and-swap, and sends the
/// winner's token if another instance swapped first. When the store cannot be read or written,
/// the provider signs and sends its own token (sending goes on; APNs may then see one extra
/// token update).
public final class TokenCredentialProvider: CredentialProvider {
    public let summary: CredentialSummary
    public let identity: String
    public var kind: AuthKind { .token }

    private let signer: APNsJWTSigner
    private let clock: any WallClock
    private let state: Mutex<StateMachine>
    private let file: String
    private let keyField: String
    private let tokenStore: (any ProviderTokenStore)?
    private let teamID: String
    private let keyID: String
    /// The first 16 hex digits of the SHA-256 of the key's public key.
    private let keyFingerprint: String
    private let created = Mutex(0)

    /// Loads the key and prepares the signer.
    ///
    /// - Parameters:
    ///   - teamID: `iss`, the 10-character team ID.
    ///   - keyID: `kid`, the 10-character key ID.
    ///   - privateKey: the `.p8` key: a P-256 key in PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`); SEC1
    ///     (`-----BEGIN EC PRIVATE KEY-----`) is accepted too. Lines before the block are ignored.
    ///   - file/keyField: where the key is configured, for errors.
    public init(
        teamID: String, keyID: String, privateKey: Secret, policy: TokenRefreshPolicy = TokenRefreshPolicy(),
        clock: any WallClock, file: String, keyField: String = "auth.token.key_file",
        tokenStore: (any ProviderTokenStore)? = nil
    ) throws(CredentialError) {
        let key = try Self.loadKey(privateKey, file: file, field: keyField)
        self.signer = APNsJWTSigner(keyID: keyID, teamID: teamID, privateKey: key)
        self.clock = clock
        self.state = Mutex(StateMachine(policy: policy))
        self.file = file
        self.keyField = keyField
        self.summary = CredentialSummary(kind: .token, keyID: keyID, teamID: teamID)
        let fingerprint = Self.fingerprint(of: key.publicKey)
        self.identity = "token:\(teamID):\(keyID):\(fingerprint)"
        self.tokenStore = tokenStore
        self.teamID = teamID
        self.keyID = keyID
        self.keyFingerprint = fingerprint
    }

    public func authorization() async throws -> String? {
        while true {
            let action = state.withLock { $0.authorization(now: clock.now) }
            switch action {
            case .use(let authorization):
                return authorization
            case .sign(let issuedAt):
                return try await sign(issuedAt: issuedAt)
            case .wait:
                let signed: String? = try await withCheckedThrowingContinuation { continuation in
                    switch state.withLock({ $0.addWaiter(continuation) }) {
                    case .queued: break
                    case .askAgain(let waiter): waiter.resume(returning: nil)
                    }
                }
                if let signed { return signed }
            }
        }
    }

    /// The token to send now, read under the lock with no signing and no waiting: nil when there
    /// is none yet, it is due for replacement, or APNs rejected it (then ``authorization()``).
    /// This is the only token cache: a send reads it directly.
    public func cachedAuthorization() -> String? {
        let now = clock.now
        return state.withLock { $0.usable(now: now) }
    }

    public func tokenRejectedAsExpired(_ rejected: String) async {
        _ = state.withLock { $0.rejectedAsExpired(rejected) }
    }

    public func tlsConfiguration(base: TLSConfiguration) throws -> TLSConfiguration { base }

    /// How many tokens this provider has taken into use (signed here or read from the token store).
    public var tokensSigned: Int { state.withLock { $0.generation } }

    /// How many tokens this provider signed itself (the others came from the token store).
    public var tokensCreated: Int { created.withLock { $0 } }

    private func sign(issuedAt: Date) async throws -> String {
        let token: StateMachine.Token
        do {
            if let tokenStore {
                token = try await sharedToken(tokenStore, issuedAt: issuedAt)
            } else {
                token = StateMachine.Token(authorization: "bearer \(try await signNew(issuedAt: issuedAt))", issuedAt: issuedAt)
            }
        } catch {
            let waiters = state.withLock { $0.signingFailed() }
            let failure = CredentialError.tokenSigningFailed(
                file: file, field: keyField, message: "signing a provider token failed (\(type(of: error)))")
            for waiter in waiters { waiter.resume(throwing: failure) }
            throw failure
        }
        let waiters = state.withLock { $0.signed(token) }
        for waiter in waiters { waiter.resume(returning: token.authorization) }
        return token.authorization
    }

    private func signNew(issuedAt: Date) async throws -> String {
        let jwt = try await signer.sign(issuedAt: issuedAt)
        created.withLock { $0 += 1 }
        return jwt
    }

    /// The key's token from the store when it is fresh enough, else a new one swapped in.
    private func sharedToken(_ store: any ProviderTokenStore, issuedAt: Date) async throws -> StateMachine.Token {
        let rejected = state.withLock { $0.currentRejected ? $0.current?.authorization : nil }
        let stored: SharedProviderToken?
        do {
            stored = try await store.providerToken(teamID: teamID, keyID: keyID, keyFingerprint: keyFingerprint)
        } catch {
            return StateMachine.Token(authorization: "bearer \(try await signNew(issuedAt: issuedAt))", issuedAt: issuedAt)
        }
        if let stored, isUsable(stored, rejected: rejected) {
            return StateMachine.Token(authorization: "bearer \(stored.token)", issuedAt: stored.issuedAt)
        }
        let jwt = try await signNew(issuedAt: issuedAt)
        let mine = SharedProviderToken(
            teamID: teamID, keyID: keyID, keyFingerprint: keyFingerprint, token: jwt, issuedAt: issuedAt)
        do {
            let winner = try await store.replaceProviderToken(mine, replacing: stored?.issuedAt)
            if winner.token != jwt, isUsable(winner, rejected: rejected) {
                return StateMachine.Token(authorization: "bearer \(winner.token)", issuedAt: winner.issuedAt)
            }
        } catch {
            // The store is unreachable: send this token alone.
        }
        return StateMachine.Token(authorization: "bearer \(jwt)", issuedAt: issuedAt)
    }

    /// A stored token may be sent when it is younger than `refreshAfter` (not from the future by
    /// more than a minute of clock skew) and is not the token APNs just rejected as expired.
    private func isUsable(_ token: SharedProviderToken, rejected: String?) -> Bool {
        let age = clock.now.timeIntervalSince(token.issuedAt)
        let policy = state.withLock { $0.policy }
        return age > -60 && age < policy.refreshAfter && age < policy.maximumAge
            && "bearer \(token.token)" != rejected
    }

    /// The SubjectPublicKeyInfo of a P-256 key up to its point (RFC 5480: id-ecPublicKey,
    /// prime256v1, a 66-byte BIT STRING); the point follows in X9.63 form.
    private static let p256PublicKeyInfoPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48,
        0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]

    /// The key's fingerprint: the first 16 hex digits of the SHA-256 of its public key's DER
    /// (SubjectPublicKeyInfo), hashed from the fixed prefix and the point, without building the
    /// DER through an ASN.1 serializer (a tenant load makes one per key).
    static func fingerprint(of key: P256.Signing.PublicKey) -> String {
        var hash = SHA256()
        hash.update(data: p256PublicKeyInfoPrefix)
        hash.update(data: key.x963Representation)
        return hash.finalize().hexPrefix(16)
    }

    private static func loadKey(_ secret: Secret, file: String, field: String) throws(CredentialError)
        -> P256.Signing.PrivateKey
    {
        let blocks = PEMBlock.all(in: secret.text)
        guard let block = blocks.first(where: { $0.label.hasSuffix("PRIVATE KEY") }) else {
            throw .invalidTokenKey(
                file: file, field: field,
                message: "\(secret.origin) holds no PEM private key (expected a .p8 file: -----BEGIN PRIVATE KEY-----)")
        }
        if block.isEncrypted {
            throw .invalidTokenKey(
                file: file, field: field,
                message: "\(secret.origin) is an encrypted key; APNs .p8 signing keys are not encrypted")
        }
        // From the DER the block holds: swift-crypto's PEM reader splits and joins the text
        // through Foundation, several times the cost of the key itself.
        guard let der = block.der, let key = try? P256.Signing.PrivateKey(derRepresentation: der) else {
            throw .invalidTokenKey(
                file: file, field: field,
                message: "\(secret.origin) is not a P-256 (ES256) private key in PKCS#8 PEM")
        }
        return key
    }
}

extension Sequence where Element == UInt8 {
    /// The first `count` lowercase hex digits of these bytes.
    func hexPrefix(_ count: Int) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(count)
        for byte in self where text.count < count {
            text.append(digits[Int(byte >> 4)])
            if text.count < count { text.append(digits[Int(byte & 0x0F)]) }
        }
        return String(decoding: text, as: UTF8.self)
    }
}
