import HeraldCore
import NIOCore
import Synchronization

/// One request on its way to APNs: the header values the connection writes, the body bytes,
/// the deadline, and where the outcome goes. Built once by the sender; a resend after
/// REFUSED_STREAM or GOAWAY reuses it as is (same apns-id).
///
/// Three kinds share it: a notification to a device (`POST /3/device/…`, `apns-id`), a
/// broadcast on a channel (`POST /4/broadcasts/apps/…`, `apns-request-id` and
/// `apns-channel-id`), and a channel management call (`POST`, `GET` or `DELETE` on
/// `/1/apps/…`, `apns-request-id`, whose answer keeps its body and `apns-channel-id`).
final class APNsRequest: Sendable {
    typealias Completion = @Sendable (consuming Result<APNsResponse, APNsTransportError>) -> Void

    /// `:method`.
    let method: String
    /// `:path` (`/3/device/<hex>`, `/4/broadcasts/apps/<bundle>` or `/1/apps/<bundle>/…`) in two
    /// parts, each a string that exists already (a constant, the device token's hex): the
    /// connection writes them into its own buffer (``APNsHeaderIndexing``).
    let pathPrefix: String
    let pathRest: String

    /// `:path`, joined.
    var path: String { pathPrefix + pathRest }
    /// The request's ID, always sent (so that resends and the server's record match): in
    /// `apns-id` for a device notification, in `apns-request-id` otherwise.
    let apnsID: NotificationID
    /// True when ``apnsID`` goes in `apns-request-id` (broadcasts and channel management).
    let sendsRequestID: Bool
    /// `apns-channel-id`.
    let channelID: String?
    let topic: String?
    let pushType: String?
    let priority: String?
    let expiration: String?
    let collapseID: String?
    /// `bearer <jwt>` for token tenants; nil for certificate tenants.
    let authorization: String?
    /// The body as it came (an array shares its storage: not copied here; the engine copies it
    /// into DATA frames); nil for a request without one (`GET`, `DELETE`).
    let payload: [UInt8]?
    /// True when a successful answer's body is wanted (channel management reads).
    let keepsResponseBody: Bool
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
        self.method = "POST"
        (self.pathPrefix, self.pathRest) = notification.pathParts
        self.apnsID = apnsID
        switch notification.destination {
        case .device:
            self.sendsRequestID = false
            self.channelID = nil
            self.topic = notification.topic
        case .channel(let channel):
            // The bundle ID is in the path; a broadcast names its channel instead of a topic.
            self.sendsRequestID = true
            self.channelID = channel.rawValue
            self.topic = nil
        }
        self.pushType = notification.pushType.rawValue
        self.priority = notification.priority.map { String($0.rawValue) }
        self.expiration = notification.expiration?.headerValue
        self.collapseID = notification.collapseID
        self.authorization = authorization
        self.payload = notification.payload
        self.keepsResponseBody = false
        self.deadline = deadline
        self.completion = completion
    }

    /// A channel management call: `method` on `path`, with `apns-request-id`, an optional
    /// `apns-channel-id` and an optional JSON body.
    init(
        management method: String, path: String, requestID: NotificationID, channelID: String?, body: [UInt8]?,
        authorization: String?, deadline: NIODeadline, completion: @escaping Completion
    ) {
        self.isCancellable = false
        self.method = method
        self.pathPrefix = ""
        self.pathRest = path
        self.apnsID = requestID
        self.sendsRequestID = true
        self.channelID = channelID
        self.topic = nil
        self.pushType = nil
        self.priority = nil
        self.expiration = nil
        self.collapseID = nil
        self.authorization = authorization
        self.payload = body
        self.keepsResponseBody = true
        self.deadline = deadline
        self.completion = completion
    }

    /// The same request with another completion (used for the one resend after ExpiredProviderToken).
    init(copying other: APNsRequest, authorization: String?, completion: @escaping Completion) {
        self.method = other.method
        self.pathPrefix = other.pathPrefix
        self.pathRest = other.pathRest
        self.apnsID = other.apnsID
        self.sendsRequestID = other.sendsRequestID
        self.channelID = other.channelID
        self.topic = other.topic
        self.pushType = other.pushType
        self.priority = other.priority
        self.expiration = other.expiration
        self.collapseID = other.collapseID
        self.authorization = authorization
        self.payload = other.payload
        self.keepsResponseBody = other.keepsResponseBody
        self.deadline = other.deadline
        self.isCancellable = other.isCancellable
        self.completion = completion
    }

    /// Delivers the outcome, once: whoever holds the request at that moment (the pool's queue or
    /// the connection carrying the stream) calls it; a later call (a cancelled request answered
    /// after all) does nothing.
    func complete(_ result: consuming Result<APNsResponse, APNsTransportError>) {
        let first = state.withLock { state in
            // The cancel handler captures the request: dropping it here breaks the cycle.
            defer {
                state.completed = true
                state.onCancel = nil
            }
            return !state.completed
        }
        if first { completion(consume result) }
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
