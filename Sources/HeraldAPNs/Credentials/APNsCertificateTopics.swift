import SwiftASN1
import X509

/// The topics an Apple push client certificate allows.
///
/// Apple's universal push certificates carry extension 1.2.840.113635.100.6.3.6, whose value is a
/// DER SEQUENCE of alternating topic strings and SEQUENCEs of kinds:
/// `{ "com.acme.app", { "app" }, "com.acme.app.voip", { "voip" }, "com.acme.app.complication", { "complication" } }`.
/// Older single-topic certificates have no such extension; their topic is the subject's UID.
public struct APNsCertificateTopics: Sendable, Hashable {
    /// One topic and the kinds of push it is for (`app`, `voip`, `complication`, …).
    public struct Entry: Sendable, Hashable {
        public var topic: String
        public var kinds: [String]

        public init(topic: String, kinds: [String]) {
            self.topic = topic
            self.kinds = kinds
        }
    }

    /// 1.2.840.113635.100.6.3.6
    public static let extensionOID: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 6]
    /// 0.9.2342.19200300.100.1.1 (userID), the topic of a single-topic certificate.
    public static let userIDOID: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]

    public var entries: [Entry]
    /// True when the topics came from the 1.2.840.113635.100.6.3.6 extension, false when from the subject's UID.
    public var fromExtension: Bool

    public var topics: [String] { entries.map(\.topic) }

    public init(entries: [Entry], fromExtension: Bool) {
        self.entries = entries
        self.fromExtension = fromExtension
    }

    /// The topics of `certificate`: its topics extension, else the subject's UID, else none.
    public init(certificate: Certificate) throws {
        if let ext = certificate.extensions.first(where: { $0.oid == Self.extensionOID }) {
            try self.init(extensionValue: ext.value)
            return
        }
        var uids: [String] = []
        for rdn in certificate.subject {
            for attribute in rdn where attribute.type == Self.userIDOID {
                if let uid = String(attribute.value) { uids.append(uid) }
            }
        }
        self.init(entries: uids.map { Entry(topic: $0, kinds: ["app"]) }, fromExtension: false)
    }

    /// Decodes the DER value of the 1.2.840.113635.100.6.3.6 extension. Accepts UTF8String, IA5String
    /// and PrintableString; a topic without a following kinds SEQUENCE gets no kinds.
    public init(extensionValue: ArraySlice<UInt8>) throws {
        let root = try DER.parse(extensionValue)
        guard root.identifier == .sequence, case .constructed(let children) = root.content else {
            throw ASN1Error.unexpectedFieldType(root.identifier)
        }
        var entries: [Entry] = []
        for node in children {
            if let topic = try Self.string(node) {
                entries.append(Entry(topic: topic, kinds: []))
            } else if node.identifier == .sequence, case .constructed(let kindNodes) = node.content, !entries.isEmpty {
                for kindNode in kindNodes {
                    if let kind = try Self.string(kindNode) { entries[entries.count - 1].kinds.append(kind) }
                }
            }
        }
        self.init(entries: entries, fromExtension: true)
    }

    private static func string(_ node: ASN1Node) throws -> String? {
        switch node.identifier {
        case ASN1UTF8String.defaultIdentifier: return String(try ASN1UTF8String(derEncoded: node))
        case ASN1IA5String.defaultIdentifier: return String(try ASN1IA5String(derEncoded: node))
        case ASN1PrintableString.defaultIdentifier: return String(try ASN1PrintableString(derEncoded: node))
        default: return nil
        }
    }

    /// True when `topic` is one of the certificate's topics.
    public func allows(_ topic: String) -> Bool { entries.contains { $0.topic == topic } }
}
