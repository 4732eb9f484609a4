import HTTP2Engine
import HeraldCore

/// The headers of one request that APNs looks at, read one field at a time as nghttp2 decodes
/// the HPACK block.
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
    /// `apns-request-id` (broadcasts and channel management).
    var requestID: String?
    /// `apns-channel-id` (broadcasts and channel management).
    var channelID: String?
    /// A header APNs reads appeared more than once.
    var duplicated: Bool = false
    /// The header list size as HPACK counts it (name + value + 32 per field).
    var listSize: Int = 0

    init() {}

    /// Reads one header field. Once the list is larger than `limit` (the request will be
    /// refused), values are only counted, not kept.
    mutating func add(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, keepingValuesUpTo limit: Int) {
        listSize += name.count + value.count + 32
        guard listSize <= limit else { return }
        // Dispatch on the name's length first: most names compare once, or never.
        switch name.count {
        case 5 where Self.equals(name, ":path"): Self.set(&path, value, &duplicated)
        case 7 where Self.equals(name, ":method"): Self.set(&method, value, &duplicated)
        case 7 where Self.equals(name, "apns-id"): Self.set(&apnsID, value, &duplicated)
        case 10 where Self.equals(name, "apns-topic"): Self.set(&topic, value, &duplicated)
        case 13 where Self.equals(name, "authorization"): Self.set(&authorization, value, &duplicated)
        case 13 where Self.equals(name, "apns-priority"): Self.set(&priority, value, &duplicated)
        case 14 where Self.equals(name, "apns-push-type"): Self.set(&pushType, value, &duplicated)
        case 15 where Self.equals(name, "apns-expiration"): Self.set(&expiration, value, &duplicated)
        case 15 where Self.equals(name, "apns-request-id"): Self.set(&requestID, value, &duplicated)
        case 15 where Self.equals(name, "apns-channel-id"): Self.set(&channelID, value, &duplicated)
        case 16 where Self.equals(name, "apns-collapse-id"): Self.set(&collapseID, value, &duplicated)
        default: return
        }
    }

    /// Reads a header block as the HTTP/2 engine delivers it (as bytes: a String only for the
    /// fields APNs reads).
    init(_ headers: HTTP2HeaderBlock, keepingValuesUpTo limit: Int = .max) {
        headers.forEachField { name, value, _ in
            add(name: name, value: value, keepingValuesUpTo: limit)
        }
    }

    /// Reads header fields given as Strings (tests).
    init(_ headers: [HTTP2Header], keepingValuesUpTo limit: Int = .max) {
        self.init(HTTP2HeaderBlock(headers), keepingValuesUpTo: limit)
    }

    static func equals(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        guard bytes.count == text.utf8CodeUnitCount else { return false }
        return HTTP2HeaderBlock.bytesEqual(bytes, UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private static func set(_ slot: inout String?, _ value: UnsafeRawBufferPointer, _ duplicated: inout Bool) {
        if slot != nil { duplicated = true }
        slot = String(decoding: value, as: UTF8.self)
    }
}

/// One connection's view of how its client encodes headers (RFC 7541), against Apple's advice:
/// `:path` and `authorization` never enter the dynamic table; `apns-id`, `apns-expiration` and
/// `apns-collapse-id` may enter it the first time they are sent on a connection, never after.
/// What entered the table is read back from an HPACK decoder (``SandboxHPACKAuditor``).
struct HPACKAudit {
    enum Repeated: Int {
        case apnsID = 0, expiration, collapseID
    }

    private var seen: (Bool, Bool, Bool) = (false, false, false)
    /// Violations found since the last `take`.
    private(set) var violations: [String] = []

    /// False for a field name none of the rules is about (checked by length alone).
    static func mayConcern(nameLength: Int) -> Bool {
        switch nameLength {
        case 5, 7, 13, 15, 16: return true
        default: return false
        }
    }

    /// One decoded field: `entered` when it was added to the dynamic table.
    mutating func observe(name: UnsafeRawBufferPointer, entered: Bool) {
        switch name.count {
        case 5 where SandboxRequestHead.equals(name, ":path"): literalOnly(":path", entered)
        case 13 where SandboxRequestHead.equals(name, "authorization"): literalOnly("authorization", entered)
        case 7 where SandboxRequestHead.equals(name, "apns-id"): indexedOnce(.apnsID, "apns-id", entered)
        case 15 where SandboxRequestHead.equals(name, "apns-expiration"): indexedOnce(.expiration, "apns-expiration", entered)
        case 16 where SandboxRequestHead.equals(name, "apns-collapse-id"): indexedOnce(.collapseID, "apns-collapse-id", entered)
        default: return
        }
    }

    /// Literal without indexing is what Apple asks; never-indexed is stricter and accepted.
    mutating func literalOnly(_ name: String, _ entered: Bool) {
        if entered {
            violations.append("\(name) was encoded with indexing; Apple asks for a literal without indexing")
        }
    }

    mutating func indexedOnce(_ which: Repeated, _ name: String, _ entered: Bool) {
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
        if already, entered {
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

    /// The value, or the rejection thrown.
    func get() throws(SandboxRejection) -> Value {
        switch self {
        case .ok(let value): return value
        case .rejected(let reason): throw SandboxRejection(reason)
        }
    }
}

/// A request refused with APNs' reason: a step of an evaluation throws it, the evaluation
/// answers it.
struct SandboxRejection: Error {
    let reason: APNsReason

    init(_ reason: APNsReason) {
        self.reason = reason
    }

    /// Throws a rule's reason, when it found one.
    static func check(_ reason: APNsReason?) throws(SandboxRejection) {
        if let reason { throw SandboxRejection(reason) }
    }
}

/// The rules APNs applies to a request's headers and body, each as a pure function.
enum SandboxRules {
    static let devicePathPrefix = "/3/device/"

    /// `:path` → the lowercase device token, or the reason APNs gives.
    static func deviceToken(fromPath path: String?) -> Checked<String> {
        guard var text = path else { return .rejected(.badPath) }
        return text.withUTF8 { bytes in
            let prefix = devicePathPrefix.utf8.count
            guard bytes.count >= prefix, bytes.starts(with: devicePathPrefix.utf8) else {
                // "/3/device" without the trailing slash names no device.
                return .rejected(bytes.elementsEqual("/3/device".utf8) ? .missingDeviceToken : .badPath)
            }
            let token = UnsafeBufferPointer(rebasing: bytes[prefix...])
            guard !token.isEmpty else { return .rejected(.missingDeviceToken) }
            guard token.count % 2 == 0, token.count <= DeviceToken.maximumHexLength else { return .rejected(.badDeviceToken) }
            var hasUppercase = false
            for byte in token {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
                case UInt8(ascii: "A")...UInt8(ascii: "F"): hasUppercase = true
                default: return .rejected(.badDeviceToken)
                }
            }
            if !hasUppercase { return .ok(String(decoding: token, as: UTF8.self)) }
            return .ok(String(decoding: token.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "F") ? $0 + 32 : $0 }, as: UTF8.self))
        }
    }

    /// The push type: omitted is `alert`; an unknown value is APNs' `InvalidPushType`.
    static func pushType(_ value: String?) -> Checked<PushType> {
        guard let value else { return .ok(.alert) }
        guard let type = PushType(rawValue: value) else { return .rejected(.invalidPushType) }
        return .ok(type)
    }

    /// apns-id, apns-priority, apns-expiration and apns-collapse-id, in that order.
    static func optionalHeaders(_ head: SandboxRequestHead) -> APNsReason? {
        if let id = head.apnsID, !UUIDText.isUUID(id) { return .badMessageId }
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

    /// A topic's syntax, as ``Notification/validateTopic(_:)`` checks it, without Foundation:
    /// letters, digits, '.', '-', '_'; dotted; at most 255 bytes.
    static func topicSyntax(_ topic: String) -> APNsReason? {
        let utf8 = topic.utf8
        if utf8.isEmpty { return .missingTopic }
        if utf8.count > 255 { return .badTopic }
        var previous: UInt8 = UInt8(ascii: ".")
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                break
            case UInt8(ascii: "."):
                // No leading dot, no empty label.
                if previous == UInt8(ascii: ".") { return .badTopic }
            default:
                return .badTopic
            }
            previous = byte
        }
        return previous == UInt8(ascii: ".") ? .badTopic : nil
    }

    /// True when `value` starts with "bearer " in any case.
    static func hasBearerPrefix(_ value: String) -> Bool {
        var iterator = value.utf8.makeIterator()
        for expected in "bearer ".utf8 {
            guard let byte = iterator.next() else { return false }
            let lowered = (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte + 32 : byte
            if lowered != expected { return false }
        }
        return true
    }

    /// A non-negative integer of UNIX seconds that fits 32 bits (as `Expiration` reads it).
    static func isUnsignedInteger(_ value: String) -> Bool {
        UInt32(value) != nil
    }
}
