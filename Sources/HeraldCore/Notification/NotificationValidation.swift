/// A notification that APNs would refuse, found before it goes on the wire.
///
/// `reason` is the reason APNs itself would give; `field` names the offending field as the
/// API and CLI call it; `message` says which rule was broken. No secret ever goes in here.
public struct NotificationValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: APNsReason
    public var field: String
    public var message: String

    public init(_ reason: APNsReason, field: String, message: String) {
        self.reason = reason
        self.field = field
        self.message = message
    }

    public var description: String { "\(field): \(message) (\(reason.wireValue))" }
}

extension Notification {
    /// Checks the notification against the rules APNs enforces, in the order APNs reports them.
    ///
    /// - Parameters:
    ///   - requireTopic: true for token connections and multi-topic certificates, where APNs
    ///     answers `MissingTopic` without one.
    ///   - topicIsWellFormed: true when the topic is known to pass ``validateTopic(_:)`` (one of
    ///     the tenant's, checked when its runtime was built: ``TopicRules``).
    public func validate(requireTopic: Bool = true, topicIsWellFormed: Bool = false) throws(NotificationValidationError) {
        if isBroadcast {
            try validateBroadcast()
            return
        }
        if let topic {
            if !topicIsWellFormed { try Notification.validateTopic(topic) }
        } else if requireTopic {
            throw NotificationValidationError(.missingTopic, field: "topic", message: "a topic (apns-topic) is required")
        }
        if let collapseID {
            if collapseID.utf8.count > Notification.maximumCollapseIDLength {
                throw NotificationValidationError(
                    .badCollapseId, field: "collapse_id",
                    message: "collapse ID is \(collapseID.utf8.count) bytes; at most \(Notification.maximumCollapseIDLength) are allowed")
            }
            if let problem = Notification.headerValueProblem(collapseID) {
                throw NotificationValidationError(.badCollapseId, field: "collapse_id", message: "the collapse ID \(problem)")
            }
        }
        if payload.isEmpty {
            throw NotificationValidationError(.payloadEmpty, field: "payload", message: "the payload is empty")
        }
        let limit = pushType.maximumPayloadSize
        if payload.count > limit {
            throw NotificationValidationError(
                .payloadTooLarge, field: "payload",
                message: "the payload is \(payload.count) bytes; \(pushType.rawValue) notifications allow at most \(limit)")
        }
        if priority == .immediate, PayloadInspection.apsHoldsOnlyContentAvailable(payload) {
            throw NotificationValidationError(
                .badPriority, field: "priority",
                message: "priority 10 is not allowed for a payload whose aps holds only content-available; use 5")
        }
    }

    /// A broadcast's rules (Apple's broadcast request): the bundle ID in the path, with no
    /// push-type suffix; push type `liveactivity`; a priority and an expiration; no collapse
    /// ID; a JSON payload of at most 5,120 bytes whose `aps` is a Live Activity update or end
    /// (`event`, a numeric `timestamp`, and `content-state` with an update). A channel's
    /// storage policy (expiration 0 only on a no-storage channel) is checked where the channel
    /// is known.
    private func validateBroadcast() throws(NotificationValidationError) {
        guard let topic else {
            throw NotificationValidationError(
                .missingTopic, field: "topic", message: "a broadcast needs the app's bundle ID (topic)")
        }
        try Notification.validateTopic(topic)
        if PushType.allCases.contains(where: { $0.requiredTopicSuffix.map { topic.hasSuffix($0) } ?? false }) {
            throw NotificationValidationError(
                .topicDisallowed, field: "topic",
                message: "a broadcast goes to the bundle ID itself, without a push-type suffix")
        }
        guard pushType == .liveactivity else {
            throw NotificationValidationError(
                .invalidPushType, field: "push_type", message: "a broadcast's push type is liveactivity")
        }
        guard priority != nil else {
            throw NotificationValidationError(.badPriority, field: "priority", message: "a broadcast needs a priority")
        }
        guard expiration != nil else {
            throw NotificationValidationError(
                .badExpirationDate, field: "expiration", message: "a broadcast needs an expiration (0 stores nothing)")
        }
        if collapseID != nil {
            throw NotificationValidationError(
                .badRequestParams, field: "collapse_id", message: "a broadcast takes no collapse ID")
        }
        if payload.isEmpty {
            throw NotificationValidationError(.payloadEmpty, field: "payload", message: "the payload is empty")
        }
        if payload.count > Notification.maximumBroadcastPayloadSize {
            throw NotificationValidationError(
                .payloadTooLarge, field: "payload",
                message: "the payload is \(payload.count) bytes; a broadcast allows at most \(Notification.maximumBroadcastPayloadSize)")
        }
        try PayloadInspection.checkLiveActivityUpdate(payload)
    }

    /// Why `value` cannot be an HTTP/2 header value, or nil when it can: no control characters
    /// (tab excepted) and no whitespace at either end (RFC 9113 §8.2.1). The transport applies
    /// the same rule to every header it writes; the API applies it up front, so that a bad value
    /// is a 400 naming the field instead of a failed send.
    public static func headerValueProblem(_ value: String) -> String? {
        let bytes = value.utf8
        if let first = bytes.first, let last = bytes.last,
            first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") || last == UInt8(ascii: " ") || last == UInt8(ascii: "\t")
        {
            return "must not start or end with whitespace"
        }
        if bytes.contains(where: { ($0 < 0x20 && $0 != UInt8(ascii: "\t")) || $0 == 0x7F }) {
            return "must not contain control characters"
        }
        return nil
    }

    /// A topic is a bundle ID with an optional push-type suffix: dot-separated, no spaces,
    /// at most 255 bytes.
    public static func validateTopic(_ topic: String) throws(NotificationValidationError) {
        guard !topic.isEmpty else {
            throw NotificationValidationError(.missingTopic, field: "topic", message: "the topic is empty")
        }
        guard topic.utf8.count <= 255 else {
            throw NotificationValidationError(.badTopic, field: "topic", message: "the topic is longer than 255 bytes")
        }
        // Byte by byte, with the ".." check in the same pass (Foundation's `contains` costs more
        // on the send path).
        var previous: UInt8 = 0
        var doubleDot = false
        for byte in topic.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                break
            case UInt8(ascii: "."):
                if previous == UInt8(ascii: ".") { doubleDot = true }
            default:
                throw NotificationValidationError(
                    .badTopic, field: "topic", message: "the topic may hold only letters, digits, '.', '-' and '_'")
            }
            previous = byte
        }
        if doubleDot || topic.utf8.first == UInt8(ascii: ".") || topic.utf8.last == UInt8(ascii: ".") {
            throw NotificationValidationError(.badTopic, field: "topic", message: "the topic is not a dotted bundle ID")
        }
    }
}
