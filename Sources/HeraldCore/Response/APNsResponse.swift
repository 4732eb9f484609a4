import Foundation

/// APNs' answer to one notification: the `:status`, the `apns-id` and the `apns-unique-id`, and
/// for failures the JSON body's `reason` (and, with 410, its `timestamp`).
///
/// Every send's answer is moved from the connection to its caller through each layer, so a
/// plain answer is kept to a few words: what only a rejection, a `retry-after` or a channel
/// management answer carries is held in one reference, nil for a plain answer.
public struct APNsResponse: Sendable, Hashable {
    public var status: Int
    public var apnsID: NotificationID?
    /// `apns-unique-id`: the development environment's key to the notification in Apple's
    /// delivery log (nil in production, or when the header is not a UUID).
    public var uniqueID: APNsUniqueID?
    /// The rare fields; nil when every one of them is empty.
    private var details: Details?

    /// What only some answers carry, held by reference (replaced whole when one changes).
    private final class Details: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private struct Fields: Sendable, Hashable {
        var reason: APNsReason?
        var timestamp: Date?
        var retryAfter: Duration?
        var channelID: String?
        var body: [UInt8] = []

        var isEmpty: Bool { reason == nil && timestamp == nil && retryAfter == nil && channelID == nil && body.isEmpty }
    }

    private var fields: Fields {
        get { details?.fields ?? Fields() }
        set { details = newValue.isEmpty ? nil : Details(newValue) }
    }

    public var reason: APNsReason? {
        get { details?.fields.reason }
        set { fields.reason = newValue }
    }
    /// With 410: the last time APNs confirmed the token is not valid for the topic any more.
    public var timestamp: Date? {
        get { details?.fields.timestamp }
        set { fields.timestamp = newValue }
    }
    /// A `retry-after` header's wait (delta-seconds, at most ``maximumRetryAfter``): a resend
    /// does not go before it. Apple does not document one; an HTTP server in front of an
    /// endpoint may send it with 429 or 503.
    public var retryAfter: Duration? {
        get { details?.fields.retryAfter }
        set { fields.retryAfter = newValue }
    }
    /// `apns-channel-id` on the answer to a channel creation: the new channel's ID (as APNs
    /// sent it; checked by whoever takes it).
    public var channelID: String? {
        get { details?.fields.channelID }
        set { fields.channelID = newValue }
    }
    /// A successful channel management answer's body (JSON); empty otherwise (an error body is
    /// read into ``reason``).
    public var body: [UInt8] {
        get { details?.fields.body ?? [] }
        set { fields.body = newValue }
    }

    public static func == (left: APNsResponse, right: APNsResponse) -> Bool {
        left.status == right.status && left.apnsID == right.apnsID && left.uniqueID == right.uniqueID
            && (left.details === right.details || left.fields == right.fields)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(status)
        hasher.combine(apnsID)
        hasher.combine(uniqueID)
        hasher.combine(fields)
    }

    /// The longest `retry-after` honoured: a larger value is taken as this.
    public static let maximumRetryAfter: Duration = .seconds(3600)

    /// A `retry-after` header's value as a wait: 1 to 10 ASCII digits of seconds (at most
    /// ``maximumRetryAfter``). The HTTP-date form and anything else are ignored (nil): the
    /// header is untrusted, and the resend then waits by the tenant's backoff alone.
    public static func retryAfter(header bytes: UnsafeRawBufferPointer) -> Duration? {
        guard (1...10).contains(bytes.count) else { return nil }
        var seconds: Int64 = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            seconds = seconds * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        return min(.seconds(seconds), maximumRetryAfter)
    }

    public var isSuccess: Bool { status == 200 }

    /// Any 2xx: channel management answers 201 to a creation and 204 to a deletion.
    public var isSuccessful: Bool { (200...299).contains(status) }

    /// The `apns-id` header's value, or nil when it is not a UUID (the header is untrusted).
    public static func apnsID(header bytes: UnsafeRawBufferPointer) -> NotificationID? {
        UUIDText.parse(bytes).map(NotificationID.init(words:))
    }
}

// Built through the memberwise initializer, as `Notification` is (see there).
extension APNsResponse {
    public init(
        status: Int, apnsID: NotificationID?, reason: APNsReason? = nil, timestamp: Date? = nil,
        uniqueID: APNsUniqueID? = nil, retryAfter: Duration? = nil
    ) {
        let fields = Fields(reason: reason, timestamp: timestamp, retryAfter: retryAfter)
        self.init(status: status, apnsID: apnsID, uniqueID: uniqueID, details: fields.isEmpty ? nil : Details(fields))
    }

    /// Builds a response from the wire: the status, the apns-id and the (possibly empty) body.
    /// A body that is not the JSON APNs documents still yields a response; its reason is then nil.
    public init(
        status: Int, apnsID: NotificationID?, body: [UInt8], uniqueID: APNsUniqueID? = nil, retryAfter: Duration? = nil
    ) {
        let decoded = APNsErrorBody.decode(body)
        self.init(
            status: status, apnsID: apnsID, reason: decoded?.reason, timestamp: decoded?.timestamp, uniqueID: uniqueID,
            retryAfter: retryAfter)
    }
}

/// The JSON body of an APNs error response, or of a GOAWAY frame: `{"reason": "…", "timestamp": 1234}`.
public struct APNsErrorBody: Sendable, Hashable {
    public var reason: APNsReason
    /// Milliseconds since the epoch on the wire.
    public var timestamp: Date?

    public init(reason: APNsReason, timestamp: Date? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }

    /// The latest timestamp an answer may carry: 9999-12-31T23:59:59.999Z, in milliseconds.
    static let maximumTimestampMillis: Double = 253_402_300_799_999

    public static func decode(_ bytes: [UInt8]) -> APNsErrorBody? {
        guard !bytes.isEmpty,
            let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
            let reason = object["reason"] as? String
        else { return nil }
        var timestamp: Date? = nil
        // The answer is untrusted: a timestamp outside 1970...9999 (or not finite) is dropped
        // rather than carried into the store, whose millisecond integers it would overflow.
        if let millis = (object["timestamp"] as? NSNumber)?.doubleValue, millis.isFinite, (0...maximumTimestampMillis).contains(millis) {
            timestamp = Date(timeIntervalSince1970: millis / 1000)
        }
        return APNsErrorBody(reason: APNsReason(wireValue: reason), timestamp: timestamp)
    }

    /// The JSON bytes, as APNs writes them.
    public func encoded() -> [UInt8] {
        var json = "{\"reason\":" + JSONValue.string(reason.wireValue).jsonText
        if let timestamp {
            json += ",\"timestamp\":" + String(Int64((timestamp.timeIntervalSince1970 * 1000).rounded()))
        }
        json += "}"
        return Array(json.utf8)
    }
}
