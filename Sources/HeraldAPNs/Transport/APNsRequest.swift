import HeraldCore
import NIOCore

/// One notification on its way to APNs: the header values the connection writes, the payload
/// bytes, the deadline, and where the outcome goes. Built once by the sender; a resend after
/// REFUSED_STREAM or GOAWAY reuses it as is (same apns-id).
final class APNsRequest: Sendable {
    typealias Completion = @Sendable (Result<APNsResponse, APNsTransportError>) -> Void

    /// `:path`, `/3/device/<hex>`.
    let path: String
    /// `apns-id`; always sent, so that resends and the server's record match.
    let apnsID: NotificationID
    let topic: String?
    let pushType: String
    let priority: String?
    let expiration: String?
    let collapseID: String?
    /// `bearer <jwt>` for token tenants; nil for certificate tenants.
    let authorization: String?
    let payload: ByteBuffer
    /// The request gets an answer or fails by then, queue time included.
    let deadline: NIODeadline
    private let completion: Completion

    init(
        notification: Notification, apnsID: NotificationID, authorization: String?, deadline: NIODeadline,
        allocator: ByteBufferAllocator = ByteBufferAllocator(), completion: @escaping Completion
    ) {
        self.path = notification.path
        self.apnsID = apnsID
        self.topic = notification.topic
        self.pushType = notification.pushType.rawValue
        self.priority = notification.priority.map { String($0.rawValue) }
        self.expiration = notification.expiration?.headerValue
        self.collapseID = notification.collapseID
        self.authorization = authorization
        self.payload = allocator.buffer(bytes: notification.payload)
        self.deadline = deadline
        self.completion = completion
    }

    /// The same request with another completion (used for the one resend after ExpiredProviderToken).
    init(copying other: APNsRequest, authorization: String?, completion: @escaping Completion) {
        self.path = other.path
        self.apnsID = other.apnsID
        self.topic = other.topic
        self.pushType = other.pushType
        self.priority = other.priority
        self.expiration = other.expiration
        self.collapseID = other.collapseID
        self.authorization = authorization
        self.payload = other.payload
        self.deadline = other.deadline
        self.completion = completion
    }

    /// Delivers the outcome. Called exactly once, by whoever holds the request at that moment
    /// (the pool's queue or the connection carrying the stream).
    func complete(_ result: Result<APNsResponse, APNsTransportError>) {
        completion(result)
    }
}
