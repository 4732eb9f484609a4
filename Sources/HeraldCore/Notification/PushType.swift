/// The `apns-push-type` of a notification.
///
/// APNs requires the push type to agree with the topic: VoIP pushes go to `<bundle>.voip`,
/// complications to `<bundle>.complication`, and so on (``requiredTopicSuffix``).
public enum PushType: String, CaseIterable, Sendable, Codable, CustomStringConvertible {
    case alert
    case background
    case location
    case voip
    case complication
    case fileprovider
    case mdm
    case liveactivity
    case pushtotalk
    case widgets

    /// The suffix APNs expects on the topic for this push type, if any.
    public var requiredTopicSuffix: String? {
        switch self {
        case .alert, .background, .mdm: return nil
        case .location: return ".location-query"
        case .voip: return ".voip"
        case .complication: return ".complication"
        case .fileprovider: return ".pushkit.fileprovider"
        case .liveactivity: return ".push-type.liveactivity"
        case .pushtotalk: return ".voip-ptt"
        case .widgets: return ".push-type.widgets"
        }
    }

    /// The largest payload APNs accepts for this push type, in bytes.
    public var maximumPayloadSize: Int {
        self == .voip ? 5120 : 4096
    }

    /// True when `topic` has the suffix this push type needs (or it needs none).
    public func agrees(withTopic topic: String) -> Bool {
        if let suffix = requiredTopicSuffix { return topic.hasSuffix(suffix) }
        // MDM topics are Apple's own (com.apple.mgmt.…); anything goes.
        if self == .mdm { return true }
        // alert and background go to the bundle ID itself, never to a suffixed topic.
        return !PushType.allCases.contains { other in
            other.requiredTopicSuffix.map { topic.hasSuffix($0) } ?? false
        }
    }

    public var description: String { rawValue }
}
