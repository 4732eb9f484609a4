/// The `apns-priority` of a notification.
public enum Priority: Int, CaseIterable, Sendable, Codable, CustomStringConvertible {
    /// Deliver at once (10). Must not be used for a payload whose `aps` holds only `content-available`.
    case immediate = 10
    /// Deliver with the device's power in mind (5).
    case conserve = 5
    /// Lowest (1): APNs may not deliver at all when the device is constrained.
    case low = 1

    public init(value: Int) throws(NotificationValidationError) {
        guard let priority = Priority(rawValue: value) else {
            throw NotificationValidationError(.badPriority, field: "priority", message: "priority must be 10, 5 or 1, not \(value)")
        }
        self = priority
    }

    public var description: String { String(rawValue) }
}
