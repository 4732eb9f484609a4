import Crypto
import Foundation
import HeraldCore
import NIOSSL
import SwiftASN1
import X509
import _CryptoExtras

/// Certificates, keys and files made inside the tests: a CA, client certificates with the APNs topics
/// extension, plain and encrypted PEM keys, PKCS#12 bundles. Nothing here is committed anywhere.
enum CredentialTestPKI {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    struct Issued {
        var certificate: Certificate
        var key: P256.Signing.PrivateKey
        var certificatePEM: String { (try? certificate.serializeAsPEM().pemString) ?? "" }
        /// PKCS#8 PEM.
        var keyPEM: String { key.pemRepresentation }
    }

    static func makeCA(name: String = "Herald Test CA") throws -> Issued {
        let key = P256.Signing.PrivateKey()
        let subject = try DistinguishedName { CommonName(name) }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(),
            publicKey: .init(key.publicKey), notValidBefore: now.addingTimeInterval(-86_400),
            notValidAfter: now.addingTimeInterval(365 * 86_400), issuer: subject, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                KeyUsage(keyCertSign: true)
            },
            issuerPrivateKey: .init(key))
        return Issued(certificate: certificate, key: key)
    }

    /// The DER value of the 1.2.840.113635.100.6.3.6 extension, as Apple writes it.
    static func topicsExtensionValue(_ entries: [(topic: String, kinds: [String])]) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { coder in
            for entry in entries {
                try coder.serialize(ASN1UTF8String(entry.topic))
                try coder.appendConstructedNode(identifier: .sequence) { kinds in
                    for kind in entry.kinds { try kinds.serialize(ASN1UTF8String(kind)) }
                }
            }
        }
        return serializer.serializedBytes
    }

    /// A client certificate signed by `ca`. `topics` nil leaves the topics extension out.
    static func makeClient(
        ca: Issued, topics: [(topic: String, kinds: [String])]?, uid: String? = nil,
        notBefore: Date = now.addingTimeInterval(-3_600), notAfter: Date = now.addingTimeInterval(30 * 86_400)
    ) throws -> Issued {
        let key = P256.Signing.PrivateKey()
        var rdns: [RelativeDistinguishedName] = []
        if let uid {
            rdns.append(RelativeDistinguishedName(.init(type: APNsTestOIDs.userID, utf8String: uid)))
        }
        rdns.append(
            RelativeDistinguishedName(
                .init(type: .RDNAttributeType.commonName, utf8String: "Apple Push Services: test")))
        rdns.append(
            RelativeDistinguishedName(.init(type: .RDNAttributeType.organizationalUnitName, utf8String: "TESTTEAM01")))
        var extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            KeyUsage(digitalSignature: true)
            try ExtendedKeyUsage([.clientAuth])
        }
        if let topics {
            let value = try topicsExtensionValue(topics)
            try extensions.append(Certificate.Extension(oid: APNsTestOIDs.topics, critical: false, value: value[...]))
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter, issuer: ca.certificate.subject,
            subject: DistinguishedName(rdns), signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: .init(ca.key))
        return Issued(certificate: certificate, key: key)
    }

    // MARK: - Encrypted keys

    /// The key as SEC1 DER (`EC PRIVATE KEY`, with the curve), as BoringSSL writes it.
    static func sec1DER(_ key: P256.Signing.PrivateKey) throws -> [UInt8] {
        try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem).derBytes
    }

    /// A legacy OpenSSL encrypted PEM (`Proc-Type: 4,ENCRYPTED`, `DEK-Info: AES-128-CBC,…`): the key
    /// is MD5(passphrase ‖ first 8 bytes of the IV), as OpenSSL's EVP_BytesToKey with one round does.
    static func legacyEncryptedPEM(_ key: P256.Signing.PrivateKey, passphrase: String) throws -> String {
        let iv = (0..<16).map { _ in UInt8.random(in: 0...255) }
        var md5 = Insecure.MD5()
        md5.update(data: Array(passphrase.utf8))
        md5.update(data: Array(iv.prefix(8)))
        let symmetricKey = SymmetricKey(data: Array(md5.finalize()))
        let ciphertext = try AES._CBC.encrypt(try sec1DER(key), using: symmetricKey, iv: AES._CBC.IV(ivBytes: iv))
        let ivHex = iv.map { String(format: "%02X", $0) }.joined()
        return """
            -----BEGIN EC PRIVATE KEY-----
            Proc-Type: 4,ENCRYPTED
            DEK-Info: AES-128-CBC,\(ivHex)

            \(wrap(Data(ciphertext).base64EncodedString()))
            -----END EC PRIVATE KEY-----

            """
    }

    /// An encrypted PKCS#8 PEM (`ENCRYPTED PRIVATE KEY`): PBES2 with PBKDF2-HMAC-SHA256 and AES-256-CBC.
    static func pkcs8EncryptedPEM(_ key: P256.Signing.PrivateKey, passphrase: String, rounds: Int = 2_048) throws
        -> String
    {
        let salt = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let iv = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let symmetricKey = try KDF.Insecure.PBKDF2.deriveKey(
            from: Array(passphrase.utf8), salt: salt, using: .sha256, outputByteCount: 32, unsafeUncheckedRounds: rounds
        )
        let ciphertext = try AES._CBC.encrypt(key.derRepresentation, using: symmetricKey, iv: AES._CBC.IV(ivBytes: iv))
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { info in
            try info.appendConstructedNode(identifier: .sequence) { algorithm in
                try algorithm.serialize(ASN1ObjectIdentifier("1.2.840.113549.1.5.13"))  // PBES2
                try algorithm.appendConstructedNode(identifier: .sequence) { params in
                    try params.appendConstructedNode(identifier: .sequence) { kdf in
                        try kdf.serialize(ASN1ObjectIdentifier("1.2.840.113549.1.5.12"))  // PBKDF2
                        try kdf.appendConstructedNode(identifier: .sequence) { pbkdf2 in
                            try pbkdf2.serialize(ASN1OctetString(contentBytes: salt[...]))
                            try pbkdf2.serialize(rounds)
                            try pbkdf2.appendConstructedNode(identifier: .sequence) { prf in
                                try prf.serialize(ASN1ObjectIdentifier("1.2.840.113549.2.9"))  // hmacWithSHA256
                                try prf.serialize(ASN1Null())
                            }
                        }
                    }
                    try params.appendConstructedNode(identifier: .sequence) { scheme in
                        try scheme.serialize(ASN1ObjectIdentifier("2.16.840.1.101.3.4.1.42"))  // aes256-CBC
                        try scheme.serialize(ASN1OctetString(contentBytes: iv[...]))
                    }
                }
            }
            try info.serialize(ASN1OctetString(contentBytes: ArraySlice(ciphertext)))
        }
        return PEMDocument(type: "ENCRYPTED PRIVATE KEY", derBytes: serializer.serializedBytes).pemString + "\n"
    }

    /// A PKCS#12 bundle of the certificate (leaf first) and key, encrypted with `passphrase`.
    static func pkcs12(_ issued: Issued, chain: [Certificate] = [], passphrase: String) throws -> [UInt8] {
        let certificates = try ([issued.certificate] + chain).map {
            try NIOSSLCertificate(bytes: Array($0.serializeAsPEM().pemString.utf8), format: .pem)
        }
        let key = try NIOSSLPrivateKey(bytes: Array(issued.keyPEM.utf8), format: .pem)
        return try NIOSSLPKCS12Bundle(certificateChain: certificates, privateKey: key).serialize(
            passphrase: Array(passphrase.utf8))
    }

    private static func wrap(_ base64: String) -> String {
        var lines: [Substring] = []
        var rest = base64[...]
        while !rest.isEmpty {
            lines.append(rest.prefix(64))
            rest = rest.dropFirst(64)
        }
        return lines.joined(separator: "\n")
    }

    // MARK: - Tenants

    static func certificateTenant(
        _ identity: CertificateAuthConfiguration.Identity, passphrase: String? = nil,
        topics: [String] = ["com.example.app", "com.example.app.voip"]
    ) throws -> TenantConfiguration {
        TenantConfiguration(
            id: try TenantID("cert-tenant"), teamID: "TESTTEAM01",
            auth: .certificate(
                CertificateAuthConfiguration(
                    identity: identity,
                    passphrase: passphrase.map { Secret(bytes: Array($0.utf8), origin: "env CERT_PASS") },
                    origin: "file certs/client.pem")),
            topics: topics, sourceFile: "tenants/cert-tenant.yaml")
    }

    static func pemIdentity(_ issued: Issued, keyPEM: String? = nil, chain: [Certificate] = []) throws
        -> CertificateAuthConfiguration.Identity
    {
        let chainPEM = try ([issued.certificate] + chain).map { try $0.serializeAsPEM().pemString + "\n" }.joined()
        return .pem(
            certificateChain: Array(chainPEM.utf8),
            privateKey: Secret(bytes: Array((keyPEM ?? issued.keyPEM).utf8), origin: "file certs/client.key"))
    }
}

enum APNsTestOIDs {
    static let topics: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 6]
    static let userID: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]
}
