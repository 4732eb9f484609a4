import Foundation

/// One push notification for one device: everything that goes into one HTTP/2 stream to APNs.
///
/// ```swift
/// let note = Notification(
///     deviceToken: try DeviceToken(hex: token),
///     topic: "com.acme.app",
///     pushType: .alert,
///     payload: try Payload(aps: APS(alert: .init(title: "Hi", body: "there"))).encoded()
/// )
/// try note.validate()
/// ```
public struct Notification: Sendable, Hashable {
    public var deviceToken: DeviceToken
    /// `apns-topic`. Required for token connections and multi-topic certificates.
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
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.id = id
        self.payload = payload
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

    /// The `:path` of the request.
    public var path: String { "/3/device/" + deviceToken.hex }
}
