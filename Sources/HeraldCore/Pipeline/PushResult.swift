/// The outcome of one notification that reached APNs: APNs' answer (success or rejection), the
/// apns-id it was sent with and how many attempts it took.
///
/// A notification refused before the wire, or lost on the way, is a thrown ``PushError`` instead.
public struct PushResult: Sendable, Hashable {
    /// The apns-id used on every attempt.
    public var notificationID: NotificationID
    public var environment: APNsEnvironment
    /// APNs' answer to the last attempt.
    public var response: APNsResponse
    /// How many times the notification went on the wire.
    public var attempts: Int

    public init(notificationID: NotificationID, environment: APNsEnvironment, response: APNsResponse, attempts: Int = 1)
    {
        self.notificationID = notificationID
        self.environment = environment
        self.response = response
        self.attempts = attempts
    }

    /// The HTTP status APNs answered with.
    public var status: Int { response.status }
    /// APNs' reason for a rejection.
    public var reason: APNsReason? { response.reason }
    public var isSuccess: Bool { response.isSuccess }
}
