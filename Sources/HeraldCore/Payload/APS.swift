/// The `aps` dictionary of a notification payload, typed.
///
/// ```swift
/// let aps = APS(alert: .init(title: "Order shipped", body: "Arrives Tuesday"), badge: 1, sound: .named("default"))
/// let bytes = Payload(aps: aps, custom: [("order", .string("A-17"))]).encoded()
/// ```
public struct APS: Sendable, Hashable {
    public var alert: Alert?
    public var badge: Int?
    public var sound: Sound?
    public var threadID: String?
    public var category: String?
    public var contentAvailable: Bool
    public var mutableContent: Bool
    public var targetContentID: String?
    public var interruptionLevel: InterruptionLevel?
    public var relevanceScore: Double?
    public var filterCriteria: String?
    /// Live Activities: UNIX seconds after which the activity is stale.
    public var staleDate: Int?
    /// Live Activities: the activity's dynamic content.
    public var contentState: JSONValue?
    /// Live Activities: UNIX seconds of this update.
    public var timestamp: Int?
    /// Live Activities: start, update or end.
    public var event: LiveActivityEvent?
    /// Live Activities: UNIX seconds at which an ended activity leaves the lock screen.
    public var dismissalDate: Int?
    /// Live Activities (start): the attributes type name and its attributes.
    public var attributesType: String?
    public var attributes: JSONValue?
    /// Live Activities (push-to-start): ask the system for the new activity's push token.
    public var inputPushToken: Bool
    /// Live Activities (push-to-start): subscribe the new activity to this broadcast channel.
    public var inputPushChannel: String?
    /// Widgets (push type `widgets`): the widget's content changed; reload its timeline.
    public var contentChanged: Bool

    public init(
        alert: Alert? = nil, badge: Int? = nil, sound: Sound? = nil, threadID: String? = nil,
        category: String? = nil, contentAvailable: Bool = false, mutableContent: Bool = false,
        targetContentID: String? = nil, interruptionLevel: InterruptionLevel? = nil,
        relevanceScore: Double? = nil, filterCriteria: String? = nil, staleDate: Int? = nil,
        contentState: JSONValue? = nil, timestamp: Int? = nil, event: LiveActivityEvent? = nil,
        dismissalDate: Int? = nil, attributesType: String? = nil, attributes: JSONValue? = nil,
        inputPushToken: Bool = false, inputPushChannel: String? = nil, contentChanged: Bool = false
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.targetContentID = targetContentID
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.filterCriteria = filterCriteria
        self.staleDate = staleDate
        self.contentState = contentState
        self.timestamp = timestamp
        self.event = event
        self.dismissalDate = dismissalDate
        self.attributesType = attributesType
        self.attributes = attributes
        self.inputPushToken = inputPushToken
        self.inputPushChannel = inputPushChannel
        self.contentChanged = contentChanged
    }

    /// The alert: a plain string, or a dictionary with title, subtitle, body and localized forms.
    public enum Alert: Sendable, Hashable {
        case text(String)
        case fields(AlertFields)

        public init(title: String? = nil, subtitle: String? = nil, body: String? = nil) {
            self = .fields(AlertFields(title: title, subtitle: subtitle, body: body))
        }
    }

    public struct AlertFields: Sendable, Hashable {
        public var title: String?
        public var subtitle: String?
        public var body: String?
        public var launchImage: String?
        public var titleLocKey: String?
        public var titleLocArgs: [String]?
        public var subtitleLocKey: String?
        public var subtitleLocArgs: [String]?
        public var locKey: String?
        public var locArgs: [String]?

        public init(
            title: String? = nil, subtitle: String? = nil, body: String? = nil, launchImage: String? = nil,
            titleLocKey: String? = nil, titleLocArgs: [String]? = nil, subtitleLocKey: String? = nil,
            subtitleLocArgs: [String]? = nil, locKey: String? = nil, locArgs: [String]? = nil
        ) {
            self.title = title
            self.subtitle = subtitle
            self.body = body
            self.launchImage = launchImage
            self.titleLocKey = titleLocKey
            self.titleLocArgs = titleLocArgs
            self.subtitleLocKey = subtitleLocKey
            self.subtitleLocArgs = subtitleLocArgs
            self.locKey = locKey
            self.locArgs = locArgs
        }
    }

    /// The sound: a file name, or the critical-alert dictionary.
    public enum Sound: Sendable, Hashable {
        case named(String)
        /// A critical alert sound; `volume` from 0.0 to 1.0.
        case critical(name: String, volume: Double)
    }

    public enum InterruptionLevel: String, Sendable, Hashable, CaseIterable {
        case passive, active
        case timeSensitive = "time-sensitive"
        case critical
    }

    public enum LiveActivityEvent: String, Sendable, Hashable, CaseIterable {
        case start, update, end
    }

    /// The dictionary as a JSON value, keys in Apple's spelling.
    public var jsonValue: JSONValue {
        var members: [(String, JSONValue)] = []
        func add(_ key: String, _ value: JSONValue?) { if let value { members.append((key, value)) }}
        func strings(_ list: [String]?) -> JSONValue? { list.map { .array($0.map(JSONValue.string)) } }
        switch alert {
        case .text(let text)?: add("alert", .string(text))
        case .fields(let f)?:
            var a: [(String, JSONValue)] = []
            func put(_ key: String, _ value: JSONValue?) { if let value { a.append((key, value)) } }
            put("title", f.title.map(JSONValue.string))
            put("subtitle", f.subtitle.map(JSONValue.string))
            put("body", f.body.map(JSONValue.string))
            put("launch-image", f.launchImage.map(JSONValue.string))
            put("title-loc-key", f.titleLocKey.map(JSONValue.string))
            put("title-loc-args", strings(f.titleLocArgs))
            put("subtitle-loc-key", f.subtitleLocKey.map(JSONValue.string))
            put("subtitle-loc-args", strings(f.subtitleLocArgs))
            put("loc-key", f.locKey.map(JSONValue.string))
            put("loc-args", strings(f.locArgs))
            add("alert", .object(a))
        case nil: break
        }
        add("badge", badge.map { .int(Int64($0)) })
        switch sound {
        case .named(let name)?: add("sound", .string(name))
        case .critical(let name, let volume)?:
            add("sound", .object([("critical", .int(1)), ("name", .string(name)), ("volume", .double(volume))]))
        case nil: break
        }
        add("thread-id", threadID.map(JSONValue.string))
        add("category", category.map(JSONValue.string))
        if contentAvailable { add("content-available", .int(1)) }
        if mutableContent { add("mutable-content", .int(1)) }
        add("target-content-id", targetContentID.map(JSONValue.string))
        add("interruption-level", interruptionLevel.map { .string($0.rawValue) })
        add("relevance-score", relevanceScore.map(JSONValue.double))
        add("filter-criteria", filterCriteria.map(JSONValue.string))
        add("stale-date", staleDate.map { .int(Int64($0)) })
        add("content-state", contentState)
        add("timestamp", timestamp.map { .int(Int64($0)) })
        add("event", event.map { .string($0.rawValue) })
        add("dismissal-date", dismissalDate.map { .int(Int64($0)) })
        add("attributes-type", attributesType.map(JSONValue.string))
        add("attributes", attributes)
        if inputPushToken { add("input-push-token", .int(1)) }
        add("input-push-channel", inputPushChannel.map(JSONValue.string))
        if contentChanged { add("content-changed", .bool(true)) }
        return .object(members)
    }
}

/// A whole notification payload: the `aps` dictionary plus custom top-level keys, or raw JSON.
public struct Payload: Sendable, Hashable {
    public enum Content: Sendable, Hashable {
        case typed(aps: APS, custom: [String: JSONValue])
        /// JSON bytes sent exactly as given (checked to be a JSON object).
        case raw([UInt8])
    }

    public var content: Content

    public init(aps: APS, custom: [String: JSONValue] = [:]) {
        self.content = .typed(aps: aps, custom: custom)
    }

    /// Raw JSON passthrough. Throws `PayloadEmpty` for no bytes and `BadPayload`-style
    /// validation errors for text that is not a JSON object.
    public init(rawJSON bytes: [UInt8]) throws(NotificationValidationError) {
        guard !bytes.isEmpty else {
            throw NotificationValidationError(.payloadEmpty, field: "payload", message: "the payload is empty")
        }
        guard PayloadInspection.isJSONObject(bytes) else {
            throw NotificationValidationError(.unknown("BadPayload"), field: "payload", message: "the payload must be a JSON object")
        }
        self.content = .raw(bytes)
    }

    /// The bytes that go into the request body.
    public func encoded() -> [UInt8] {
        switch content {
        case .raw(let bytes): return bytes
        case .typed(let aps, let custom):
            var members: [(String, JSONValue)] = [("aps", aps.jsonValue)]
            for key in custom.keys.sorted() where key != "aps" { members.append((key, custom[key]!)) }
            return JSONValue.object(members).jsonBytes
        }
    }
}
