import Foundation

/// One push notification for one device, or one broadcast on a channel: everything that goes
/// into one HTTP/2 stream to APNs.
///
/// ```swift
/// let note = Notification(
///     deviceToken: try DeviceToken(hex: token),
///     topic: "com.acme.app",
///     pushType: .alert,
///     payload: try Payload(aps: APS(alert: .init(title: "Hi", body: "there"))).encoded()
/// )
/// try note.validate()
///
/// // A Live Activity update to every device on a channel (`POST /4/broadcasts/apps/<topic>`):
/// let broadcast = Notification(channel: try ChannelID(channel), topic: "com.acme.app", payload: update)
/// ```
public struct Notification: Sendable, Hashable {
    /// Where a notification goes: one device (`/3/device/<token>`) or every device on a
    /// broadcast channel (`/4/broadcasts/apps/<topic>` with `apns-channel-id`).
    public enum Destination: Sendable, Hashable {
        case device(DeviceToken)
        case channel(ChannelID)
    }

    public var destination: Destination
    /// `apns-topic`. Required for token connections and multi-topic certificates. For a
    /// broadcast, the bundle ID in the path (no push-type suffix).
    public var topic: String?
    /// `apns-push-type`.
    public var pushType: PushType
    /// `apns-priority`; `nil` leaves it to APNs (10).
    public var priority: Priority?
    /// `apns-expiration`; `nil` omits the header.
    public var expiration: Expiration?
    /// `apns-collapse-id`, at most 64 bytes.
    public var collapseID: String?
    /// `apns-id`: the caller's, kept as given. `nil` until the notification is admitted: the
    /// router then gives a single send one, the store a batch item; every attempt keeps it.
    public var id: NotificationID?
    /// The JSON body, sent as-is.
    public var payload: [UInt8]

    /// The longest `apns-collapse-id` APNs accepts, in bytes.
    public static let maximumCollapseIDLength = 64

    /// The device it goes to; nil for a broadcast.
    public var deviceToken: DeviceToken? {
        if case .device(let token) = destination { return token }
        return nil
    }

    /// The channel it is broadcast on; nil for a device notification.
    public var channelID: ChannelID? {
        if case .channel(let channel) = destination { return channel }
        return nil
    }

    /// True for a broadcast on a channel.
    public var isBroadcast: Bool {
        if case .channel = destination { return true }
        return false
    }

    /// The largest broadcast payload APNs accepts, in bytes.
    public static let maximumBroadcastPayloadSize = 5120

    /// The `:path` of the request.
    public var path: String {
        let (prefix, rest) = pathParts
        return prefix + rest
    }

    /// The `:path` in two parts that are already strings: a constant prefix and the device
    /// token's hex (or the bundle ID). A connection writes them into one buffer of its own, so
    /// that no string is made for each request's path.
    public var pathParts: (prefix: String, rest: String) {
        switch destination {
        case .device(let token): ("/3/device/", token.hex)
        case .channel: ("/4/broadcasts/apps/", topic ?? "")
        }
    }
}

// The initializers are declared apart from the type so that they build it through its memberwise
// initializer: an initializer that sets a value of this size (over about 48 bytes) field by field
// builds it on the stack and copies it out, every string and array in it retained and released
// once more. Other values built once a notification (a job item, its result and change, an
// answer, a push result and error) are built the same way; where the public initializer's labels
// would be the memberwise one's, a field is declared first to tell them apart.
extension Notification {
    public init(
        deviceToken: DeviceToken,
        topic: String? = nil,
        pushType: PushType = .alert,
        priority: Priority? = nil,
        expiration: Expiration? = nil,
        collapseID: String? = nil,
        id: NotificationID? = nil,
        payload: [UInt8]
    ) {
        self.init(
            destination: .device(deviceToken), topic: topic, pushType: pushType, priority: priority, expiration: expiration,
            collapseID: collapseID, id: id, payload: payload)
    }

    public init(
        deviceToken: DeviceToken,
        topic: String? = nil,
        pushType: PushType = .alert,
        priority: Priority? = nil,
        expiration: Expiration? = nil,
        collapseID: String? = nil,
        id: NotificationID? = nil,
        payload: Data
    ) {
        self.init(
            deviceToken: deviceToken, topic: topic, pushType: pushType, priority: priority,
            expiration: expiration, collapseID: collapseID, id: id, payload: Array(payload))
    }

    /// A broadcast on `channel`: a Live Activity update (push type `liveactivity`) to the
    /// devices subscribed to it. APNs requires a priority and an expiration on every broadcast:
    /// `nil` here means 10 and 0 (store nothing).
    public init(
        channel: ChannelID,
        topic: String? = nil,
        priority: Priority? = nil,
        expiration: Expiration? = nil,
        id: NotificationID? = nil,
        payload: [UInt8]
    ) {
        self.init(
            destination: .channel(channel), topic: topic, pushType: .liveactivity, priority: priority ?? .immediate,
            expiration: expiration ?? .immediately, collapseID: nil, id: id, payload: payload)
    }
}
