import Crypto
import Foundation
import SwiftASN1
import X509

/// The sandbox's certificate authority: it signs the server certificate issued at start and
/// the client certificates that certificate connections present.
///
/// ```swift
/// let ca = try SandboxCertificateAuthority.generate()
/// let client = try ca.issueClientCertificate(
///     commonName: "Apple Push Services: com.acme.app", topics: ["com.acme.app", "com.acme.app.voip"],
///     notBefore: Date(), notAfter: Date().addingTimeInterval(86_400))
/// ```
public struct SandboxCertificateAuthority: Sendable {
    public let certificate: Certificate
    let privateKey: P256.Signing.PrivateKey

    /// The CA certificate in PEM: what clients trust.
    public let certificatePEM: String
    /// The CA's private key in PEM (PKCS#8). Secret outside the demo.
    public var privateKeyPEM: String { privateKey.pemRepresentation }

    /// A new CA with a fresh P-256 key, valid from an hour ago for ten years.
    public static func generate(commonName: String = "Herald APNsSandbox demo CA") throws -> SandboxCertificateAuthority {
        let key = P256.Signing.PrivateKey()
        let publicKey = Certificate.PublicKey(key.publicKey)
        let name = try DistinguishedName {
            OrganizationName("Herald APNsSandbox")
            CommonName(commonName)
        }
        let now = Date()
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(10 * 365 * 86_400),
            issuer: name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: publicKey)
            },
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
        return try SandboxCertificateAuthority(certificate: certificate, privateKey: key)
    }

    /// Loads a CA from PEM text (text before the PEM blocks, like the demo comment line, is skipped).
    public init(certificatePEM: String, privateKeyPEM: String) throws {
        let certificate = try Certificate(pemEncoded: SandboxPEM.firstBlock(in: certificatePEM))
        let key = try P256.Signing.PrivateKey(pemRepresentation: SandboxPEM.firstBlock(in: privateKeyPEM))
        try self.init(certificate: certificate, privateKey: key)
    }

    init(certificate: Certificate, privateKey: P256.Signing.PrivateKey) throws {
        guard certificate.publicKey == Certificate.PublicKey(privateKey.publicKey) else {
            throw SandboxError.configuration("the CA private key does not belong to the CA certificate")
        }
        self.certificate = certificate
        self.privateKey = privateKey
        self.certificatePEM = try certificate.serializeAsPEM().pemString + "\n"
    }

    /// Issues a TLS server certificate for the given DNS names and IP addresses.
    public func issueServerCertificate(
        dnsNames: [String] = ["localhost"],
        ipAddresses: [[UInt8]] = [[127, 0, 0, 1], [UInt8](repeating: 0, count: 15) + [1]],
        notBefore: Date = Date().addingTimeInterval(-3600),
        notAfter: Date = Date().addingTimeInterval(30 * 86_400)
    ) throws -> (certificatePEM: String, privateKeyPEM: String) {
        let key = P256.Signing.PrivateKey()
        let names = dnsNames.map { GeneralName.dnsName($0) }
            + ipAddresses.map { GeneralName.ipAddress(ASN1OctetString(contentBytes: $0[...])) }
        let publicKey = Certificate.PublicKey(key.publicKey)
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: notBefore,
            notValidAfter: notAfter,
            issuer: self.certificate.subject,
            subject: try DistinguishedName {
                OrganizationName("Herald APNsSandbox")
                CommonName(dnsNames.first ?? "localhost")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(names)
                SubjectKeyIdentifier(hash: publicKey)
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: self.certificate.publicKey).keyIdentifier)
            },
            issuerPrivateKey: Certificate.PrivateKey(privateKey)
        )
        return (try certificate.serializeAsPEM().pemString + "\n", key.pemRepresentation)
    }

    /// Issues an APNs-style client certificate whose 1.2.840.113635.100.6.3.6 extension lists
    /// `topics` (each with its kind: "app", "voip", "complication", …).
    public func issueClientCertificate(
        commonName: String, topics: [String], notBefore: Date, notAfter: Date
    ) throws -> (certificatePEM: String, privateKeyPEM: String) {
        let key = P256.Signing.PrivateKey()
        let publicKey = Certificate.PublicKey(key.publicKey)
        let topicsExtension = Certificate.Extension(
            oid: APNsTopicsExtension.oid, critical: false, value: try APNsTopicsExtension.encode(topics: topics)[...])
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: publicKey,
            notValidBefore: notBefore,
            notValidAfter: notAfter,
            issuer: self.certificate.subject,
            subject: try DistinguishedName {
                if let first = topics.first { UserID(first) }
                CommonName(commonName)
                OrganizationName("Herald APNsSandbox demo")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.clientAuth])
                SubjectKeyIdentifier(hash: publicKey)
                AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: self.certificate.publicKey).keyIdentifier)
                topicsExtension
            },
            issuerPrivateKey: Certificate.PrivateKey(privateKey)
        )
        return (try certificate.serializeAsPEM().pemString + "\n", key.pemRepresentation)
    }
}

/// A `UID` (0.9.2342.19200300.100.1.1) relative distinguished name, as Apple's push
/// certificates carry the bundle ID.
struct UserID: RelativeDistinguishedNameConvertible {
    var value: String
    init(_ value: String) { self.value = value }
    func makeRDN() throws -> RelativeDistinguishedName {
        RelativeDistinguishedName(
            RelativeDistinguishedName.Attribute(type: [0, 9, 2342, 19200300, 100, 1, 1], utf8String: value))
    }
}

/// Apple's push-topics certificate extension (1.2.840.113635.100.6.3.6): a SEQUENCE of
/// alternating UTF8String topics and SEQUENCEs of UTF8String kinds ("app", "voip", …).
public enum APNsTopicsExtension {
    public static let oid: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 3, 6]

    /// The kind Apple lists for a topic, from its suffix.
    public static func kind(of topic: String) -> String {
        if topic.hasSuffix(".voip-ptt") { return "voip-ptt" }
        if topic.hasSuffix(".voip") { return "voip" }
        if topic.hasSuffix(".complication") { return "complication" }
        return "app"
    }

    /// The DER value of the extension for `topics`.
    public static func encode(topics: [String]) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { outer in
            for topic in topics {
                try outer.serialize(ASN1UTF8String(topic))
                try outer.appendConstructedNode(identifier: .sequence) { inner in
                    try inner.serialize(ASN1UTF8String(kind(of: topic)))
                }
            }
        }
        return serializer.serializedBytes
    }

    /// The topics in the extension's DER value (the UTF8Strings at the top level of the sequence).
    public static func decode(_ value: some RandomAccessCollection<UInt8>) throws -> [String] {
        let root = try DER.parse(Array(value))
        guard root.identifier == .sequence, case .constructed(let nodes) = root.content else {
            throw SandboxError.certificate("the push topics extension is not a SEQUENCE")
        }
        var topics: [String] = []
        for node in nodes where node.identifier == .utf8String {
            topics.append(String(try ASN1UTF8String(derEncoded: node)))
        }
        return topics
    }

    /// The push topics of a certificate: its topics extension, or else its subject's UID.
    public static func topics(of certificate: Certificate) throws -> [String] {
        if let ext = certificate.extensions[oid: oid] {
            return try decode(ext.value)
        }
        for rdn in certificate.subject {
            for attribute in rdn where attribute.type == [0, 9, 2342, 19200300, 100, 1, 1] {
                return [String(describing: attribute.value)]
            }
        }
        return []
    }
}
