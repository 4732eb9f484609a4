import Crypto
import Foundation
import HeraldCore
import NIOSSL
import SwiftASN1
import X509

/// Certificate-based authentication: the tenant's client certificate and key, presented in the TLS
/// handshake. APNs takes the topics it may push to from the certificate.
///
/// Loading checks that the certificate and key are readable (PEM, encrypted PEM with a passphrase,
/// or PKCS#12), that they belong together, that the certificate is valid now, and that its topics
/// cover every topic the tenant pushes to.
public final class CertificateCredentialProvider: CredentialProvider {
    public let summary: CredentialSummary
    public let identity: String
    public var kind: AuthKind { .certificate }
    /// The topics the certificate allows.
    public let topics: APNsCertificateTopics
    public let notBefore: Date
    public let notAfter: Date

    private let chain: [NIOSSLCertificate]
    private let key: NIOSSLPrivateKey
    private let clock: any WallClock
    private let file: String
    private let certificateField: String

    /// Loads and checks a client certificate.
    ///
    /// - Parameters:
    ///   - configuration: the certificate, key and passphrase as configured.
    ///   - teamID: the tenant's team ID, for the summary.
    ///   - requiredTopics: topics the certificate must allow (the tenant's `topics`).
    ///   - file: the tenant file, for errors.
    public init(
        configuration: CertificateAuthConfiguration, teamID: String, requiredTopics: [String], clock: any WallClock,
        file: String
    ) throws(CredentialError) {
        let loaded = try Self.load(configuration, file: file)
        let leaf: Certificate
        do {
            leaf = try Certificate(derEncoded: loaded.chain[0].toDERBytes())
        } catch {
            throw .invalidCertificate(
                file: file, field: loaded.certificateField,
                message: "\(loaded.origin) holds a certificate that cannot be parsed as X.509")
        }
        let now = clock.now
        if now > leaf.notValidAfter {
            throw .certificateExpired(
                file: file, field: loaded.certificateField,
                message:
                    "the certificate \(Self.describe(leaf.subject)) from \(loaded.origin) expired at \(Self.format(leaf.notValidAfter))"
            )
        }
        if now < leaf.notValidBefore {
            throw .certificateNotYetValid(
                file: file, field: loaded.certificateField,
                message:
                    "the certificate \(Self.describe(leaf.subject)) from \(loaded.origin) is not valid before \(Self.format(leaf.notValidBefore))"
            )
        }
        let topics: APNsCertificateTopics
        do {
            topics = try APNsCertificateTopics(certificate: leaf)
        } catch {
            throw .invalidCertificate(
                file: file, field: loaded.certificateField,
                message: "the certificate's topics extension (1.2.840.113635.100.6.3.6) cannot be decoded")
        }
        for topic in requiredTopics where !topics.allows(topic) {
            let allowed = topics.topics.isEmpty ? "none" : topics.topics.joined(separator: ", ")
            throw .topicNotAllowed(
                file: file, field: "topics",
                message:
                    "topic '\(topic)' is not allowed by the certificate from \(loaded.origin) (it allows: \(allowed))")
        }
        self.chain = loaded.chain
        self.key = loaded.key
        self.clock = clock
        self.file = file
        self.certificateField = loaded.certificateField
        self.topics = topics
        self.notBefore = leaf.notValidBefore
        self.notAfter = leaf.notValidAfter
        self.summary = CredentialSummary(
            kind: .certificate, teamID: teamID, certificateSubject: Self.describe(leaf.subject),
            notAfter: leaf.notValidAfter,
            certificateTopics: topics.topics)
        let fingerprint = (try? loaded.chain[0].toDERBytes()).map { SHA256.hash(data: $0).hexPrefix(64) } ?? ""
        self.identity = "certificate:\(fingerprint)"
    }

    public func authorization() async throws -> String? { nil }

    public func tokenRejectedAsExpired(_ rejected: String) async {}

    /// `base` plus this certificate chain and key. Throws when the certificate has expired since it was loaded.
    public func tlsConfiguration(base: TLSConfiguration) throws -> TLSConfiguration {
        if clock.now > notAfter {
            throw CredentialError.certificateExpired(
                file: file, field: certificateField,
                message: "the certificate \(summary.certificateSubject ?? "") expired at \(Self.format(notAfter))")
        }
        var configuration = base
        configuration.certificateChain = chain.map { .certificate($0) }
        configuration.privateKey = .privateKey(key)
        return configuration
    }

    // MARK: - Loading

    private struct Loaded {
        var chain: [NIOSSLCertificate]
        var key: NIOSSLPrivateKey
        /// The field the certificate came from, and its origin, for messages.
        var certificateField: String
        var origin: String
    }

    /// When the configured client certificate expires, read without checking its validity (an
    /// expired certificate still answers), for credential health.
    public static func expiry(of configuration: CertificateAuthConfiguration, file: String) throws(CredentialError)
        -> Date
    {
        let loaded = try load(configuration, file: file)
        do {
            return try Certificate(derEncoded: loaded.chain[0].toDERBytes()).notValidAfter
        } catch {
            throw .invalidCertificate(
                file: file, field: loaded.certificateField,
                message: "\(loaded.origin) holds a certificate that cannot be parsed as X.509")
        }
    }

    private static func load(_ configuration: CertificateAuthConfiguration, file: String) throws(CredentialError)
        -> Loaded
    {
        let loaded: Loaded
        switch configuration.identity {
        case .pem(let chainPEM, let privateKey):
            loaded = try loadPEM(
                chainPEM: chainPEM, privateKey: privateKey, passphrase: configuration.passphrase,
                origin: configuration.origin, file: file)
        case .pkcs12(let bundle):
            loaded = try loadPKCS12(bundle, passphrase: configuration.passphrase, file: file)
        }
        try checkKeyMatches(loaded, file: file)
        return loaded
    }

    private static func loadPEM(
        chainPEM: [UInt8], privateKey: Secret, passphrase: Secret?, origin: String, file: String
    ) throws(CredentialError) -> Loaded {
        let certificateField = "auth.certificate.cert_file"
        let keyField = privateKey.origin.hasPrefix("env") ? "auth.certificate.key" : "auth.certificate.key_file"
        let certificateBlocks = PEMBlock.all(in: String(decoding: chainPEM, as: UTF8.self)).filter {
            $0.label == "CERTIFICATE" || $0.label == "TRUSTED CERTIFICATE"
        }
        guard !certificateBlocks.isEmpty else {
            throw .invalidCertificate(
                file: file, field: certificateField,
                message: "\(origin) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(Array(certificateBlocks.map(\.text).joined().utf8))
        } catch {
            throw .invalidCertificate(
                file: file, field: certificateField, message: "\(origin) holds a PEM certificate that cannot be parsed")
        }
        guard !chain.isEmpty else {
            throw .invalidCertificate(file: file, field: certificateField, message: "\(origin) holds no certificate")
        }

        guard let keyBlock = PEMBlock.all(in: privateKey.text).first(where: { $0.label.hasSuffix("PRIVATE KEY") })
        else {
            throw .invalidCertificateKey(
                file: file, field: keyField,
                message: "\(privateKey.origin) holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
        }
        let keyBytes = Array(keyBlock.text.utf8)
        let key: NIOSSLPrivateKey
        if keyBlock.isEncrypted {
            guard let passphrase else {
                throw .missingPassphrase(
                    file: file, field: "auth.certificate.passphrase",
                    message: "\(privateKey.origin) is an encrypted private key; set auth.certificate.passphrase")
            }
            let secretBytes = passphrase.bytes
            do {
                key = try NIOSSLPrivateKey(bytes: keyBytes, format: .pem) { setPassphrase in setPassphrase(secretBytes)
                }
            } catch {
                throw .wrongPassphrase(
                    file: file, field: "auth.certificate.passphrase",
                    message: "the passphrase from \(passphrase.origin) does not decrypt \(privateKey.origin)")
            }
        } else {
            do {
                // A callback that supplies nothing, so that BoringSSL never prompts on a terminal.
                key = try NIOSSLPrivateKey(bytes: keyBytes, format: .pem) { (_: NIOSSLPassphraseSetter<[UInt8]>) in }
            } catch {
                throw .invalidCertificateKey(
                    file: file, field: keyField,
                    message: "\(privateKey.origin) holds a PEM private key that cannot be parsed")
            }
        }
        return Loaded(chain: chain, key: key, certificateField: certificateField, origin: origin)
    }

    private static func loadPKCS12(_ bundle: Secret, passphrase: Secret?, file: String) throws(CredentialError)
        -> Loaded
    {
        let field = "auth.certificate.pkcs12_file"
        let parsed: NIOSSLPKCS12Bundle
        do {
            parsed = try NIOSSLPKCS12Bundle(buffer: bundle.bytes, passphrase: passphrase?.bytes)
        } catch {
            guard looksLikePKCS12(bundle.bytes) else {
                throw .invalidPKCS12(file: file, field: field, message: "\(bundle.origin) is not a PKCS#12 bundle")
            }
            if let passphrase {
                throw .wrongPassphrase(
                    file: file, field: "auth.certificate.passphrase",
                    message: "the passphrase from \(passphrase.origin) does not decrypt \(bundle.origin)")
            }
            throw .missingPassphrase(
                file: file, field: "auth.certificate.passphrase",
                message: "\(bundle.origin) cannot be read without a passphrase; set auth.certificate.passphrase")
        }
        guard !parsed.certificateChain.isEmpty else {
            throw .invalidPKCS12(file: file, field: field, message: "\(bundle.origin) holds no certificate")
        }
        return Loaded(
            chain: parsed.certificateChain, key: parsed.privateKey, certificateField: field, origin: bundle.origin)
    }

    /// A PKCS#12 PFX is `SEQUENCE { INTEGER 3, ContentInfo, ... }`.
    private static func looksLikePKCS12(_ bytes: [UInt8]) -> Bool {
        guard let root = try? DER.parse(bytes), case .constructed(let children) = root.content,
            let first = children.first(where: { _ in true }), let version = try? Int(derEncoded: first)
        else { return false }
        return version == 3
    }

    /// BoringSSL refuses a private key that does not match the certificate already set; building a
    /// context with both is the check.
    private static func checkKeyMatches(_ loaded: Loaded, file: String) throws(CredentialError) {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .none
        configuration.certificateChain = loaded.chain.map { .certificate($0) }
        configuration.privateKey = .privateKey(loaded.key)
        do {
            _ = try NIOSSLContext(configuration: configuration)
        } catch {
            throw .keyDoesNotMatchCertificate(
                file: file, field: loaded.certificateField,
                message: "the private key does not belong to the certificate from \(loaded.origin)")
        }
    }

    /// The subject as swift-certificates prints it, with the userID attribute shown as `UID`.
    private static func describe(_ name: DistinguishedName) -> String {
        name.description.replacingOccurrences(of: "0.9.2342.19200300.100.1.1=", with: "UID=")
    }

    private static func format(_ date: Date) -> String {
        date.formatted(.iso8601)
    }
}
