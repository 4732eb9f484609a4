/// Secret material (a private key, a PKCS#12 bundle, a passphrase) loaded from a file or the
/// environment. It prints only where it came from, never its bytes.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The secret bytes. Hand them only to the code that needs them (TLS, signing).
    public let bytes: [UInt8]
    /// Where the secret came from, e.g. `file /etc/herald/keys/AuthKey_X.p8` or `env ACME_PASS`.
    public let origin: String

    public init(bytes: [UInt8], origin: String) {
        self.bytes = bytes
        self.origin = origin
    }

    /// The secret as UTF-8 text (PEM, passphrases).
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    public var description: String { "<secret from \(origin)>" }
    public var debugDescription: String { description }
}
