import HeraldCore
import NIOCore
import Synchronization

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
    /// The notification's payload as it came (an array shares its storage: not copied here; the
    /// engine copies it into DATA frames).
    let payload: [UInt8]
    /// The request gets an answer or fails by then, queue time included.
    let deadline: NIODeadline
    /// The caller may cancel it (``cancel()``): whoever holds it then registers how to let it go.
    let isCancellable: Bool
    private let completion: Completion
    private let state = Mutex(State())

    private struct State {
        var completed = false
        var cancelled = false
        /// How the current holder (the pool's queue, or the connection carrying its stream)
        /// lets go of it when it is cancelled.
        var onCancel: (@Sendable () -> Void)?
    }

    init(
        notification: Notification, apnsID: NotificationID, authorization: String?, deadline: NIODeadline,
        cancellable: Bool = false, completion: @escaping Completion
    ) {
        self.isCancellable = cancellable
        self.path = notification.path
        self.apnsID = apnsID
        self.topic = notification.topic
        self.pushType = notification.pushType.rawValue
        self.priority = notification.priority.map { String($0.rawValue) }
        self.expiration = notification.expiration?.headerValue
        self.collapseID = notification.collapseID
        self.authorization = authorization
        self.payload = notification.payload
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
        self.isCancellable = other.isCancellable
        self.completion = completion
    }

    /// Delivers the outcome, once: whoever holds the request at that moment (the pool's queue or
    /// the connection carrying the stream) calls it; a later call (a cancelled request answered
    /// after all) does nothing.
    func complete(_ result: Result<APNsResponse, APNsTransportError>) {
        let first = state.withLock { state in
            // The cancel handler captures the request: dropping it here breaks the cycle.
            defer {
                state.completed = true
                state.onCancel = nil
            }
            return !state.completed
        }
        if first { completion(result) }
    }

    /// The caller gave up on it: its holder lets it go (out of the queue, or its stream reset)
    /// and completes it with ``APNsTransportError/cancelled(mayHaveBeenProcessed:)``. A request
    /// between holders is marked, and the next holder lets it go at once.
    func cancel() {
        let handler = state.withLock { state -> (@Sendable () -> Void)? in
            guard !state.completed, !state.cancelled else { return nil }
            state.cancelled = true
            defer { state.onCancel = nil }
            return state.onCancel
        }
        handler?()
    }

    /// True once ``cancel()`` was called.
    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// The new holder's way to let the request go when it is cancelled. Returns false (and keeps
    /// nothing) when it is already cancelled: the holder lets it go now. Only for cancellable
    /// requests; the others never call it.
    func setCancelHandler(_ handler: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { state in
            guard !state.cancelled else { return false }
            state.onCancel = state.completed ? nil : handler
            return true
        }
    }
}
