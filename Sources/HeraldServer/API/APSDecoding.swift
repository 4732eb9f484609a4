import HeraldCore

/// Reads the typed `aps` object of a request (Apple's key names) into ``APS``, strictly: an
/// unknown key or a value of the wrong kind is an error naming `aps.<key>`.
enum APSDecoding {
    static let apsKeys = [
        "alert", "badge", "sound", "thread-id", "category", "content-available", "mutable-content", "target-content-id",
        "interruption-level", "relevance-score", "filter-criteria", "stale-date", "content-state", "timestamp", "event",
        "dismissal-date", "attributes-type", "attributes", "input-push-token", "input-push-channel", "content-changed",
    ]
    static let alertKeys = [
        "title", "subtitle", "body", "launch-image", "title-loc-key", "title-loc-args", "subtitle-loc-key", "subtitle-loc-args",
        "loc-key", "loc-args",
    ]
    static let soundKeys = ["critical", "name", "volume"]

    static func aps(_ parent: JSONObjectReader) throws(APIError) -> APS {
        guard let reader = try parent.object("aps", allowed: apsKeys) else {
            throw APIError.missingField(parent.path("aps"))
        }
        var aps = APS()
        if let node = reader["alert"] {
            switch node.value {
            case .string(let text): aps.alert = .text(text)
            case .object:
                let alert = try JSONObjectReader(node, path: reader.path("alert"), allowed: alertKeys)
                aps.alert = .fields(
                    APS.AlertFields(
                        title: try alert.string("title"), subtitle: try alert.string("subtitle"), body: try alert.string("body"),
                        launchImage: try alert.string("launch-image"), titleLocKey: try alert.string("title-loc-key"),
                        titleLocArgs: try alert.strings("title-loc-args"), subtitleLocKey: try alert.string("subtitle-loc-key"),
                        subtitleLocArgs: try alert.strings("subtitle-loc-args"), locKey: try alert.string("loc-key"),
                        locArgs: try alert.strings("loc-args")))
            default:
                throw APIError.invalidField(reader.path("alert"), "must be a string or an object, not \(node.kind)")
            }
        }
        if let badge = try reader.integer("badge", in: 0...Int64(Int32.max)) { aps.badge = Int(badge) }
        if let node = reader["sound"] {
            switch node.value {
            case .string(let name): aps.sound = .named(name)
            case .object:
                let sound = try JSONObjectReader(node, path: reader.path("sound"), allowed: soundKeys)
                guard let name = try sound.string("name", required: true) else { throw APIError.missingField(sound.path("name")) }
                // A critical alert bypasses mute and Do Not Disturb: only an explicit `"critical": 1`
                // (or true) asks for one. Without it the object is a plain sound name.
                let volume = try sound.number("volume")
                if let volume, !(0...1).contains(volume) {
                    throw APIError.invalidField(sound.path("volume"), "must be from 0.0 to 1.0")
                }
                if try sound.flag("critical") == true {
                    aps.sound = .critical(name: name, volume: volume ?? 1)
                } else if volume != nil {
                    throw APIError.invalidField(
                        sound.path("volume"), "applies to critical alerts only; add \"critical\": 1 or leave volume out")
                } else {
                    aps.sound = .named(name)
                }
            default:
                throw APIError.invalidField(reader.path("sound"), "must be a string or an object, not \(node.kind)")
            }
        }
        aps.threadID = try reader.string("thread-id")
        aps.category = try reader.string("category")
        aps.contentAvailable = try reader.flag("content-available") ?? false
        aps.mutableContent = try reader.flag("mutable-content") ?? false
        aps.targetContentID = try reader.string("target-content-id")
        if let text = try reader.string("interruption-level") {
            guard let level = APS.InterruptionLevel(rawValue: text) else {
                throw APIError.invalidField(
                    reader.path("interruption-level"),
                    "must be one of \(APS.InterruptionLevel.allCases.map(\.rawValue).joined(separator: ", ")), not '\(text)'")
            }
            aps.interruptionLevel = level
        }
        if let score = try reader.number("relevance-score") {
            guard (0...1).contains(score) else { throw APIError.invalidField(reader.path("relevance-score"), "must be from 0.0 to 1.0") }
            aps.relevanceScore = score
        }
        aps.filterCriteria = try reader.string("filter-criteria")
        aps.staleDate = try reader.integer("stale-date", in: 0...Int64(UInt32.max)).map { Int($0) }
        aps.contentState = try reader.jsonObject("content-state")
        aps.timestamp = try reader.integer("timestamp", in: 0...Int64(UInt32.max)).map { Int($0) }
        if let text = try reader.string("event") {
            guard let event = APS.LiveActivityEvent(rawValue: text) else {
                throw APIError.invalidField(reader.path("event"), "must be start, update or end, not '\(text)'")
            }
            aps.event = event
        }
        aps.dismissalDate = try reader.integer("dismissal-date", in: 0...Int64(UInt32.max)).map { Int($0) }
        aps.attributesType = try reader.string("attributes-type")
        aps.attributes = try reader.jsonObject("attributes")
        aps.inputPushToken = try reader.flag("input-push-token") ?? false
        aps.inputPushChannel = try reader.string("input-push-channel")
        aps.contentChanged = try reader.flag("content-changed") ?? false
        if let channel = aps.inputPushChannel, channel.isEmpty || channel.utf8.count > 256 {
            throw APIError.invalidField(reader.path("input-push-channel"), "must be a channel ID of 1 to 256 bytes")
        }
        return aps
    }
}
