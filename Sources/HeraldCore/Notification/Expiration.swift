import Foundation

/// The `apns-expiration` of a notification.
public enum Expiration: Hashable, Sendable, CustomStringConvertible {
    /// `0`: deliver once if the device is reachable now; APNs does not store it.
    case immediately
    /// A UNIX time (seconds, UTC) until which APNs stores the notification and retries delivery.
    case at(UInt32)

    /// Parses the header's value: a non-negative integer of UNIX seconds.
    public init(headerValue: String) throws(NotificationValidationError) {
        guard let seconds = UInt32(headerValue) else {
            throw NotificationValidationError(.badExpirationDate, field: "expiration", message: "expiration must be 0 or a UNIX time in seconds")
        }
        self = seconds == 0 ? .immediately : .at(seconds)
    }

    public init(date: Date) {
        let seconds = max(0, min(date.timeIntervalSince1970.rounded(.down), Double(UInt32.max)))
        self = seconds == 0 ? .immediately : .at(UInt32(seconds))
    }

    /// The value of the `apns-expiration` header.
    public var headerValue: String {
        switch self {
        case .immediately: return "0"
        case .at(let seconds): return String(seconds)
        }
    }

    public var description: String { headerValue }
}
