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
public final class TokenCredentialProvider: CredentialProvider {
    public let summary: CredentialSummary
    public let identity: String
    public var kind: AuthKind { .token }

    private let signer: APNsJWTSigner
    private let clock: any WallClock
    private let state: Mutex<StateMachine>
    private let file: String
    private let keyField: String

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
        clock: any WallClock, file: String, keyField: String = "auth.token.key_file"
    ) throws(CredentialError) {
        let key = try Self.loadKey(privateKey, file: file, field: keyField)
        do {
            self.signer = try APNsJWTSigner(keyID: keyID, teamID: teamID, privateKey: key)
        } catch {
            throw .invalidTokenKey(
                file: file, field: keyField, message: "\(privateKey.origin) cannot be used to sign ES256 tokens")
        }
        self.clock = clock
        self.state = Mutex(StateMachine(policy: policy))
        self.file = file
        self.keyField = keyField
        self.summary = CredentialSummary(kind: .token, keyID: keyID, teamID: teamID)
        let fingerprint = SHA256.hash(data: key.publicKey.derRepresentation).hexPrefix(16)
        self.identity = "token:\(teamID):\(keyID):\(fingerprint)"
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

    public func tokenRejectedAsExpired(_ rejected: String) async {
        _ = state.withLock { $0.rejectedAsExpired(rejected) }
    }

    public func tlsConfiguration(base: TLSConfiguration) throws -> TLSConfiguration { base }

    /// How many tokens this provider has signed.
    public var tokensSigned: Int { state.withLock { $0.generation } }

    private func sign(issuedAt: Date) async throws -> String {
        let jwt: String
        do {
            jwt = try await signer.sign(issuedAt: issuedAt)
        } catch {
            let waiters = state.withLock { $0.signingFailed() }
            let failure = CredentialError.tokenSigningFailed(
                file: file, field: keyField, message: "signing a provider token failed (\(type(of: error)))")
            for waiter in waiters { waiter.resume(throwing: failure) }
            throw failure
        }
        let token = StateMachine.Token(authorization: "bearer \(jwt)", issuedAt: issuedAt)
        let waiters = state.withLock { $0.signed(token) }
        for waiter in waiters { waiter.resume(returning: token.authorization) }
        return token.authorization
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
        do {
            return try P256.Signing.PrivateKey(pemRepresentation: block.text)
        } catch {
            throw .invalidTokenKey(
                file: file, field: field,
                message: "\(secret.origin) is not a P-256 (ES256) private key in PKCS#8 PEM")
        }
    }
}

extension Sequence where Element == UInt8 {
    /// The first `count` hex digits of these bytes.
    func hexPrefix(_ count: Int) -> String {
        String(
            map { byte in
                let hex = String(byte, radix: 16)
                return byte < 16 ? "0" + hex : hex
            }.joined().prefix(count))
    }
}
