import Crypto
import Foundation
import HeraldAPNs
import HeraldCore
import NIOSSL
import SwiftASN1
import Testing
import X509

private typealias PKI = CredentialTestPKI

private let appTopics: [(topic: String, kinds: [String])] = [
    ("com.example.app", ["app"]), ("com.example.app.voip", ["voip"]),
    ("com.example.app.complication", ["complication"]),
]

private func testClock() -> ManualWallClock { ManualWallClock(PKI.now) }

private func loadCertificate(_ tenant: TenantConfiguration, clock: ManualWallClock = testClock()) throws
    -> CertificateCredentialProvider
{
    let provider = try CredentialProviders.make(for: tenant, clock: clock)
    return try #require(provider as? CertificateCredentialProvider)
}

private func expectLoaded(_ provider: CertificateCredentialProvider, _ client: PKI.Issued) async throws {
    #expect(provider.kind == .certificate)
    #expect(provider.summary.kind == .certificate)
    #expect(provider.summary.teamID == "TESTTEAM01")
    #expect(provider.summary.keyID == nil)
    #expect(provider.summary.certificateTopics == appTopics.map(\.topic))
    #expect(provider.summary.notAfter == client.certificate.notValidAfter)
    #expect(provider.summary.certificateSubject?.contains("CN=Apple Push Services: test") == true)
    #expect(try await provider.authorization() == nil)

    let configuration = try provider.tlsConfiguration(base: TLSConfiguration.makeClientConfiguration())
    let expectedLeaf = try NIOSSLCertificate(bytes: Array(client.certificatePEM.utf8), format: .pem)
    guard case .certificate(let leaf) = configuration.certificateChain.first else {
        Issue.record("no client certificate in the TLS configuration")
        return
    }
    #expect(leaf == expectedLeaf)
    let expectedKey = try NIOSSLPrivateKey(bytes: Array(client.keyPEM.utf8), format: .pem)
    guard case .privateKey(let key) = configuration.privateKey else {
        Issue.record("no private key in the TLS configuration")
        return
    }
    #expect(try key.derBytes == expectedKey.derBytes)
}

@Suite("Certificate credentials")
struct CertificateCredentialProviderTests {
    @Test func pemCertificateAndKeyLoadWithTopicsFromTheExtension() async throws {
        let ca = try PKI.makeCA()
        let client = try PKI.makeClient(ca: ca, topics: appTopics)
        let comment = "# DEMO KEY for the local APNsSandbox only - never use it with Apple or in production\n"
        let identity = try PKI.pemIdentity(client, keyPEM: comment + client.keyPEM, chain: [ca.certificate])
        let provider = try loadCertificate(try PKI.certificateTenant(identity))
        try await expectLoaded(provider, client)
        #expect(try provider.tlsConfiguration(base: .makeClientConfiguration()).certificateChain.count == 2)
        #expect(provider.topics.entries.map(\.kinds) == [["app"], ["voip"], ["complication"]])
        #expect(provider.topics.fromExtension)
    }

    @Test func legacyEncryptedPEMKeyLoadsWithItsPassphrase() async throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: appTopics)
        let encrypted = try PKI.legacyEncryptedPEM(client.key, passphrase: "s3cret-pass")
        #expect(encrypted.contains("Proc-Type: 4,ENCRYPTED"))
        let identity = try PKI.pemIdentity(client, keyPEM: encrypted)
        let provider = try loadCertificate(try PKI.certificateTenant(identity, passphrase: "s3cret-pass"))
        try await expectLoaded(provider, client)
    }

    @Test func pkcs8EncryptedPEMKeyLoadsWithItsPassphrase() async throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: appTopics)
        let encrypted = try PKI.pkcs8EncryptedPEM(client.key, passphrase: "another pass")
        #expect(encrypted.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        let identity = try PKI.pemIdentity(client, keyPEM: encrypted)
        let provider = try loadCertificate(try PKI.certificateTenant(identity, passphrase: "another pass"))
        try await expectLoaded(provider, client)
    }

    @Test func encryptedKeyWithWrongOrMissingPassphraseIsAClearError() throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: appTopics)
        for encrypted in [
            try PKI.legacyEncryptedPEM(client.key, passphrase: "right-one"),
            try PKI.pkcs8EncryptedPEM(client.key, passphrase: "right-one"),
        ] {
            let identity = try PKI.pemIdentity(client, keyPEM: encrypted)
            let wrong = try #require(throws: CredentialError.self) {
                try loadCertificate(try PKI.certificateTenant(identity, passphrase: "wrong-one"))
            }
            #expect(wrong.kind == .wrongPassphrase)
            #expect(wrong.field == "auth.certificate.passphrase")
            #expect(
                wrong.description
                    == "tenants/cert-tenant.yaml: auth.certificate.passphrase: the passphrase from env CERT_PASS does not decrypt file certs/client.key"
            )

            let missing = try #require(throws: CredentialError.self) {
                try loadCertificate(try PKI.certificateTenant(identity))
            }
            #expect(missing.kind == .missingPassphrase)
            #expect(missing.field == "auth.certificate.passphrase")
        }
    }

    @Test func pkcs12BundleLoadsWithItsPassphrase() async throws {
        let ca = try PKI.makeCA()
        let client = try PKI.makeClient(ca: ca, topics: appTopics)
        let bundle = try PKI.pkcs12(client, chain: [ca.certificate], passphrase: "p12-pass")
        let identity = CertificateAuthConfiguration.Identity.pkcs12(
            Secret(bytes: bundle, origin: "file certs/client.p12"))
        let provider = try loadCertificate(try PKI.certificateTenant(identity, passphrase: "p12-pass"))
        try await expectLoaded(provider, client)

        let wrong = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(identity, passphrase: "nope"))
        }
        #expect(wrong.kind == .wrongPassphrase)
        #expect(wrong.description.contains("file certs/client.p12"))
        #expect(!wrong.description.contains("nope"))

        let garbage = CertificateAuthConfiguration.Identity.pkcs12(
            Secret(bytes: Array("hello".utf8), origin: "file certs/x.p12"))
        let invalid = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(garbage, passphrase: "p12-pass"))
        }
        #expect(invalid.kind == .invalidPKCS12)
        #expect(invalid.field == "auth.certificate.pkcs12_file")
    }

    @Test func expiredCertificateIsALoadError() throws {
        let client = try PKI.makeClient(
            ca: try PKI.makeCA(), topics: appTopics, notBefore: PKI.now.addingTimeInterval(-10 * 86_400),
            notAfter: PKI.now.addingTimeInterval(-86_400))
        let error = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(client)))
        }
        #expect(error.kind == .certificateExpired)
        #expect(error.field == "auth.certificate.cert_file")
        #expect(error.description.hasPrefix("tenants/cert-tenant.yaml: auth.certificate.cert_file: the certificate "))
        #expect(error.description.contains("expired at 2023-11-13T22:13:20Z"))
    }

    @Test func certificateNotValidYetIsALoadError() throws {
        let client = try PKI.makeClient(
            ca: try PKI.makeCA(), topics: appTopics, notBefore: PKI.now.addingTimeInterval(3_600))
        let error = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(client)))
        }
        #expect(error.kind == .certificateNotYetValid)
    }

    @Test func certificateExpiringAfterLoadStopsGivingATLSConfiguration() throws {
        let client = try PKI.makeClient(
            ca: try PKI.makeCA(), topics: appTopics, notAfter: PKI.now.addingTimeInterval(60))
        let clock = testClock()
        let provider = try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(client)), clock: clock)
        _ = try provider.tlsConfiguration(base: .makeClientConfiguration())
        clock.advance(by: 120)
        let error = try #require(throws: CredentialError.self) {
            try provider.tlsConfiguration(base: .makeClientConfiguration())
        }
        #expect(error.kind == .certificateExpired)
    }

    @Test func tenantTopicNotInTheCertificateIsALoadErrorNamingIt() throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: [("com.example.app", ["app"])])
        let tenant = try PKI.certificateTenant(
            try PKI.pemIdentity(client), topics: ["com.example.app", "com.example.app.voip"])
        let error = try #require(throws: CredentialError.self) { try loadCertificate(tenant) }
        #expect(error.kind == .topicNotAllowed)
        #expect(error.field == "topics")
        #expect(
            error.description
                == "tenants/cert-tenant.yaml: topics: topic 'com.example.app.voip' is not allowed by the certificate from file certs/client.pem (it allows: com.example.app)"
        )
    }

    @Test func singleTopicCertificateUsesTheSubjectUID() throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: nil, uid: "com.example.legacy")
        let provider = try loadCertificate(
            try PKI.certificateTenant(try PKI.pemIdentity(client), topics: ["com.example.legacy"]))
        #expect(provider.summary.certificateTopics == ["com.example.legacy"])
        #expect(provider.summary.certificateSubject?.contains("UID=com.example.legacy") == true)
        #expect(!provider.topics.fromExtension)

        let noTopics = try PKI.makeClient(ca: try PKI.makeCA(), topics: nil)
        let error = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(noTopics), topics: ["com.example.app"]))
        }
        #expect(error.kind == .topicNotAllowed)
        #expect(error.description.contains("(it allows: none)"))
    }

    @Test func keyOfAnotherCertificateIsRejected() throws {
        let ca = try PKI.makeCA()
        let client = try PKI.makeClient(ca: ca, topics: appTopics)
        let other = try PKI.makeClient(ca: ca, topics: appTopics)
        let error = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(client, keyPEM: other.keyPEM)))
        }
        #expect(error.kind == .keyDoesNotMatchCertificate)
        #expect(error.field == "auth.certificate.cert_file")
    }

    @Test func unreadableCertificateOrKeyIsAClearError() throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: appTopics)
        let noCertificate = CertificateAuthConfiguration.Identity.pem(
            certificateChain: Array("just text".utf8),
            privateKey: Secret(bytes: Array(client.keyPEM.utf8), origin: "file k.pem"))
        let certificateError = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(noCertificate))
        }
        #expect(certificateError.kind == .invalidCertificate)
        #expect(certificateError.field == "auth.certificate.cert_file")

        let keyError = try #require(throws: CredentialError.self) {
            try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(client, keyPEM: "no key here")))
        }
        #expect(keyError.kind == .invalidCertificateKey)
        #expect(keyError.field == "auth.certificate.key_file")
        #expect(!keyError.description.contains("no key here"))
    }

    @Test func identityIsTheCertificateFingerprint() throws {
        let ca = try PKI.makeCA()
        let client = try PKI.makeClient(ca: ca, topics: appTopics)
        let a = try loadCertificate(try PKI.certificateTenant(try PKI.pemIdentity(client)))
        let bundle = try PKI.pkcs12(client, passphrase: "x")
        let b = try loadCertificate(
            try PKI.certificateTenant(.pkcs12(Secret(bytes: bundle, origin: "file c.p12")), passphrase: "x"))
        let c = try loadCertificate(
            try PKI.certificateTenant(try PKI.pemIdentity(try PKI.makeClient(ca: ca, topics: appTopics))))
        var der = DER.Serializer()
        try der.serialize(client.certificate)
        let expected = SHA256.hash(data: der.serializedBytes).map { String(format: "%02x", $0) }.joined()
        #expect(a.identity == "certificate:\(expected)")
        #expect(a.identity == b.identity)
        #expect(a.identity != c.identity)
    }
}

@Suite("APNs certificate topics extension")
struct APNsCertificateTopicsTests {
    @Test func decodesTopicsAndKinds() throws {
        let value = try PKI.topicsExtensionValue(appTopics)
        let topics = try APNsCertificateTopics(extensionValue: value[...])
        #expect(topics.topics == ["com.example.app", "com.example.app.voip", "com.example.app.complication"])
        #expect(topics.entries[1] == .init(topic: "com.example.app.voip", kinds: ["voip"]))
        #expect(topics.allows("com.example.app.voip"))
        #expect(!topics.allows("com.example.other"))
    }

    @Test func acceptsIA5AndPrintableStringsAndMissingKinds() throws {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { coder in
            try coder.serialize(ASN1IA5String("com.example.ia5"))
            try coder.appendConstructedNode(identifier: .sequence) { kinds in
                try kinds.serialize(ASN1PrintableString("app"))
            }
            try coder.serialize(ASN1PrintableString("com.example.printable"))
            try coder.serialize(ASN1UTF8String("com.example.nokinds"))
        }
        let topics = try APNsCertificateTopics(extensionValue: serializer.serializedBytes[...])
        #expect(
            topics.entries == [
                .init(topic: "com.example.ia5", kinds: ["app"]), .init(topic: "com.example.printable", kinds: []),
                .init(topic: "com.example.nokinds", kinds: []),
            ])
    }

    @Test func rejectsAValueThatIsNotASequence() {
        var serializer = DER.Serializer()
        #expect(throws: Never.self) { try serializer.serialize(ASN1UTF8String("com.example.app")) }
        #expect(throws: (any Error).self) { try APNsCertificateTopics(extensionValue: serializer.serializedBytes[...]) }
        #expect(throws: (any Error).self) { try APNsCertificateTopics(extensionValue: [0x30, 0x05, 0x01][...]) }
    }

    @Test func readsTheExtensionOfACertificate() throws {
        let client = try PKI.makeClient(ca: try PKI.makeCA(), topics: appTopics, uid: "com.example.ignored")
        let topics = try APNsCertificateTopics(certificate: client.certificate)
        #expect(topics.fromExtension)
        #expect(topics.topics == appTopics.map(\.topic))
    }
}
