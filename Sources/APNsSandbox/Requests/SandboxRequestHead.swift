import HeraldCore
import NIOHPACK

/// The headers of one request that APNs looks at, read in one pass over the HPACK block.
struct SandboxRequestHead {
    var method: String?
    var path: String?
    var authorization: String?
    var apnsID: String?
    var expiration: String?
    var priority: String?
    var topic: String?
    var collapseID: String?
    var pushType: String?
    /// A header APNs reads appeared more than once.
    var duplicated: Bool = false

    init() {}

    /// Reads the headers; `audit` records HPACK deviations from what Apple asks.
    init(_ headers: HPACKHeaders, audit: inout HPACKAudit) {
        for (name, value, indexing) in headers {
            switch name {
            case ":method": Self.set(&method, value, &duplicated)
            case ":path":
                Self.set(&path, value, &duplicated)
                audit.literalOnly(name, indexing)
            case "authorization":
                Self.set(&authorization, value, &duplicated)
                audit.literalOnly(name, indexing)
            case "apns-id":
                Self.set(&apnsID, value, &duplicated)
                audit.indexedOnce(.apnsID, name, indexing)
            case "apns-expiration":
                Self.set(&expiration, value, &duplicated)
                audit.indexedOnce(.expiration, name, indexing)
            case "apns-collapse-id":
                Self.set(&collapseID, value, &duplicated)
                audit.indexedOnce(.collapseID, name, indexing)
            case "apns-priority": Self.set(&priority, value, &duplicated)
            case "apns-topic": Self.set(&topic, value, &duplicated)
            case "apns-push-type": Self.set(&pushType, value, &duplicated)
            default: continue
            }
        }
    }

    private static func set(_ slot: inout String?, _ value: String, _ duplicated: inout Bool) {
        if slot != nil { duplicated = true }
        slot = value
    }
}

/// One connection's view of how its client encodes headers (RFC 7541), against Apple's advice:
/// `:path` and `authorization` literal without indexing; `apns-id`, `apns-expiration` and
/// `apns-collapse-id` with incremental indexing the first time, then without indexing.
struct HPACKAudit {
    enum Repeated: Int {
        case apnsID = 0, expiration, collapseID
    }

    private var seen: (Bool, Bool, Bool) = (false, false, false)
    /// Violations found since the last `take`.
    private(set) var violations: [String] = []

    /// `.nonIndexable` is what Apple asks; `.neverIndexed` is stricter and accepted;
    /// `.indexable` (indexed or incremental indexing) is a violation.
    mutating func literalOnly(_ name: String, _ indexing: HPACKIndexing) {
        if indexing == .indexable {
            violations.append("\(name) was encoded with indexing; Apple asks for a literal without indexing")
        }
    }

    mutating func indexedOnce(_ which: Repeated, _ name: String, _ indexing: HPACKIndexing) {
        let already: Bool
        switch which {
        case .apnsID:
            already = seen.0
            seen.0 = true
        case .expiration:
            already = seen.1
            seen.1 = true
        case .collapseID:
            already = seen.2
            seen.2 = true
        }
        if already, indexing == .indexable {
            violations.append("\(name) was encoded with indexing after its first use; Apple asks for a literal without indexing")
        }
    }

    mutating func take() -> [String] {
        defer { violations.removeAll() }
        return violations
    }

    var hasViolations: Bool { !violations.isEmpty }
}

/// A value, or the reason APNs refuses the request.
enum Checked<Value> {
    case ok(Value)
    case rejected(APNsReason)

    var value: Value? {
        if case .ok(let value) = self { return value }
        return nil
    }
}

/// The rules APNs applies to a request's headers and body, each as a pure function.
enum SandboxRules {
    static let devicePathPrefix = "/3/device/"

    /// `:path` → the lowercase device token, or the reason APNs gives.
    static func deviceToken(fromPath path: String?) -> Checked<String> {
        guard let path else { return .rejected(.badPath) }
        guard path.hasPrefix(devicePathPrefix) else {
            // "/3/device" without the trailing slash names no device.
            return .rejected(path == "/3/device" ? .missingDeviceToken : .badPath)
        }
        let token = path.utf8.dropFirst(devicePathPrefix.utf8.count)
        guard !token.isEmpty else { return .rejected(.missingDeviceToken) }
        guard token.count % 2 == 0, token.count <= DeviceToken.maximumHexLength else { return .rejected(.badDeviceToken) }
        var lower = [UInt8]()
        lower.reserveCapacity(token.count)
        for byte in token {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): lower.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): lower.append(byte + 32)
            default: return .rejected(.badDeviceToken)
            }
        }
        return .ok(String(decoding: lower, as: UTF8.self))
    }

    /// The push type: omitted is `alert`; an unknown value is APNs' `InvalidPushType`.
    static func pushType(_ value: String?) -> Checked<PushType> {
        guard let value else { return .ok(.alert) }
        guard let type = PushType(rawValue: value) else { return .rejected(.unknown("InvalidPushType")) }
        return .ok(type)
    }

    /// apns-id, apns-priority, apns-expiration and apns-collapse-id, in that order.
    static func optionalHeaders(_ head: SandboxRequestHead) -> APNsReason? {
        if let id = head.apnsID, !isCanonicalUUID(id) { return .badMessageId }
        if let priority = head.priority, priority != "10", priority != "5", priority != "1" { return .badPriority }
        if let expiration = head.expiration, !isUnsignedInteger(expiration) { return .badExpirationDate }
        if let collapseID = head.collapseID, collapseID.utf8.count > Notification.maximumCollapseIDLength {
            return .badCollapseId
        }
        return nil
    }

    /// PayloadEmpty, PayloadTooLarge, a body that is not a JSON object (`BadPayload`), and
    /// priority 10 with an `aps` holding only `content-available` (BadPriority).
    static func payload(_ body: UnsafeRawBufferPointer, pushType: PushType, priority: String?) -> APNsReason? {
        if body.isEmpty { return .payloadEmpty }
        if body.count > pushType.maximumPayloadSize { return .payloadTooLarge }
        if !JSONSyntax.isObject(body) { return .unknown("BadPayload") }
        if priority == "10", JSONSyntax.contains("content-available", in: body),
            PayloadInspection.apsHoldsOnlyContentAvailable(Array(body))
        {
            return .badPriority
        }
        return nil
    }

    /// A UUID in the 8-4-4-4-12 form (either case, as APNs accepts it).
    static func isCanonicalUUID(_ value: String) -> Bool {
        let utf8 = value.utf8
        guard utf8.count == 36 else { return false }
        for (i, byte) in utf8.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
                continue
            }
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
                UInt8(ascii: "A")...UInt8(ascii: "F"):
                continue
            default: return false
            }
        }
        return true
    }

    /// A non-negative integer of UNIX seconds that fits 32 bits (as `Expiration` reads it).
    static func isUnsignedInteger(_ value: String) -> Bool {
        UInt32(value) != nil
    }
}
