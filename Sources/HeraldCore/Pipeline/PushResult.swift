/// The outcome of one notification that reached APNs: APNs' answer (success or rejection), the
/// apns-id it was sent with and how many attempts it took.
///
/// A notification refused before the wire, or lost on the way, is a thrown ``PushError`` instead.
public struct PushResult: Sendable, Hashable {
    /// APNs' answer to the last attempt.
    public var response: APNsResponse
    /// The apns-id used on every attempt.
    public var notificationID: NotificationID
    public var environment: APNsEnvironment
    /// How many times the notification went on the wire.
    public var attempts: Int

    /// The HTTP status APNs answered with.
    public var status: Int { response.status }
    /// APNs' reason for a rejection.
    public var reason: APNsReason? { response.reason }
    public var isSuccess: Bool { response.isSuccess }
}

// Built through the memberwise initializer, as `Notification` is (see there).
extension PushResult {
    public init(notificationID: NotificationID, environment: APNsEnvironment, response: APNsResponse, attempts: Int = 1)
    {
        self.init(response: response, notificationID: notificationID, environment: environment, attempts: attempts)
    }
}
