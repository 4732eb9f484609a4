import Foundation

/// A tenant's credential could not be loaded or used.
///
/// The description names the tenant file, the field and the rule that was broken, e.g.
/// `tenants/acme.yaml: auth.certificate.cert_file: the certificate expired at 2024-01-01T00:00:00Z`.
/// It never contains key bytes, tokens or passphrases.
public struct CredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: String, Sendable, Hashable {
        case invalidTokenKey = "invalid_token_key"
        case tokenSigningFailed = "token_signing_failed"
        case invalidCertificate = "invalid_certificate"
        case invalidCertificateKey = "invalid_certificate_key"
        case missingPassphrase = "missing_passphrase"
        case wrongPassphrase = "wrong_passphrase"
        case invalidPKCS12 = "invalid_pkcs12"
        case keyDoesNotMatchCertificate = "key_does_not_match_certificate"
        case certificateExpired = "certificate_expired"
        case certificateNotYetValid = "certificate_not_yet_valid"
        case topicNotAllowed = "topic_not_allowed"
    }

    private let code: Code
    /// The tenant file the credential is configured in.
    public let file: String
    /// The field of the tenant file, e.g. `auth.token.key_file`.
    public let field: String
    /// What is wrong, without secret material.
    public let message: String

    private init(_ code: Code, file: String, field: String, message: String) {
        self.code = code
        self.file = file
        self.field = field
        self.message = message
    }

    /// A short identifier of the kind of error, safe for a metric label.
    public var label: String { code.rawValue }

    public var description: String { "\(file): \(field): \(message)" }

    /// The token signing key is not a P-256 private key in PEM.
    public static func invalidTokenKey(file: String, field: String, message: String) -> Self {
        Self(.invalidTokenKey, file: file, field: field, message: message)
    }

    /// A provider token could not be signed.
    public static func tokenSigningFailed(file: String, field: String, message: String) -> Self {
        Self(.tokenSigningFailed, file: file, field: field, message: message)
    }

    /// The certificate (chain) could not be read.
    public static func invalidCertificate(file: String, field: String, message: String) -> Self {
        Self(.invalidCertificate, file: file, field: field, message: message)
    }

    /// The certificate's private key could not be read.
    public static func invalidCertificateKey(file: String, field: String, message: String) -> Self {
        Self(.invalidCertificateKey, file: file, field: field, message: message)
    }

    /// The key or bundle is encrypted and no passphrase is configured.
    public static func missingPassphrase(file: String, field: String, message: String) -> Self {
        Self(.missingPassphrase, file: file, field: field, message: message)
    }

    /// The configured passphrase does not decrypt the key or bundle.
    public static func wrongPassphrase(file: String, field: String, message: String) -> Self {
        Self(.wrongPassphrase, file: file, field: field, message: message)
    }

    /// The PKCS#12 bundle could not be read.
    public static func invalidPKCS12(file: String, field: String, message: String) -> Self {
        Self(.invalidPKCS12, file: file, field: field, message: message)
    }

    /// The private key is not the certificate's key.
    public static func keyDoesNotMatchCertificate(file: String, field: String, message: String) -> Self {
        Self(.keyDoesNotMatchCertificate, file: file, field: field, message: message)
    }

    /// The client certificate has expired.
    public static func certificateExpired(file: String, field: String, message: String) -> Self {
        Self(.certificateExpired, file: file, field: field, message: message)
    }

    /// The client certificate is not valid yet.
    public static func certificateNotYetValid(file: String, field: String, message: String) -> Self {
        Self(.certificateNotYetValid, file: file, field: field, message: message)
    }

    /// A tenant topic is not among the topics the certificate allows.
    public static func topicNotAllowed(file: String, field: String, message: String) -> Self {
        Self(.topicNotAllowed, file: file, field: field, message: message)
    }
}

extension CredentialError {
    /// The kinds of credential errors.
    public enum Kind: String, Sendable, Hashable {
        case invalidTokenKey, tokenSigningFailed, invalidCertificate, invalidCertificateKey, missingPassphrase
        case wrongPassphrase, invalidPKCS12, keyDoesNotMatchCertificate, certificateExpired, certificateNotYetValid
        case topicNotAllowed
    }

    /// The kind of error, for callers and tests that branch on it.
    public var kind: Kind {
        switch code {
        case .invalidTokenKey: return .invalidTokenKey
        case .tokenSigningFailed: return .tokenSigningFailed
        case .invalidCertificate: return .invalidCertificate
        case .invalidCertificateKey: return .invalidCertificateKey
        case .missingPassphrase: return .missingPassphrase
        case .wrongPassphrase: return .wrongPassphrase
        case .invalidPKCS12: return .invalidPKCS12
        case .keyDoesNotMatchCertificate: return .keyDoesNotMatchCertificate
        case .certificateExpired: return .certificateExpired
        case .certificateNotYetValid: return .certificateNotYetValid
        case .topicNotAllowed: return .topicNotAllowed
        }
    }
}
