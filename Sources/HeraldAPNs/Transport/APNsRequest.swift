import HeraldCore
import NIOCore
import Synchronization

/// One request on its way to APNs: what the connection writes (the header values and the body
/// bytes, read from what it carries), the deadline, and where the outcome goes. Built once by the sender; a resend after
/// REFUSED_STREAM or GOAWAY reuses it as is (same apns-id).
///
/// Three kinds share it: a notification to a device (`POST /3/device/…`, `apns-id`), a
/// broadcast on a channel (`POST /4/broadcasts/apps/…`, `apns-request-id` and
/// `apns-channel-id`), and a channel management call (`POST`, `GET` or `DELETE` on
/// `/1/apps/…`, `apns-request-id`, whose answer keeps its body and `apns-channel-id`).
final class APNsRequest: Sendable {
    typealias Completion = @Sendable (consuming Result<APNsResponse, APNsTransportError>) -> Void

    /// What the request carries. A notification's header values are read from it when the
    /// connection writes the HEADERS, not copied into the request: one request is made for every
    /// send, and one that holds a reference and a few values stays within the allocator's
    /// smallest size classes.
    enum Content: Sendable {
        /// A notification to a device or a broadcast on a channel.
        case notification(AdmittedNotification)
        /// A channel management call.
        case management(Management)
    }

    /// A channel management call: `method` on `path`, with `apns-request-id`, an optional
    /// `apns-channel-id` and an optional JSON body.
    final class Management: Sendable {
        let method: String
        let path: String
        let requestID: NotificationID
        let channelID: String?
        let body: [UInt8]?

        init(method: String, path: String, requestID: NotificationID, channelID: String?, body: [UInt8]?) {
            self.method = method
            self.path = path
            self.requestID = requestID
            self.channelID = channelID
            self.body = body
        }
    }

    let content: Content
    /// `bearer <jwt>` for token tenants; nil for certificate tenants.
    let authorization: String?
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
        notification: AdmittedNotification, authorization: String?, deadline: NIODeadline, cancellable: Bool = false,
        completion: @escaping Completion
    ) {
        self.content = .notification(notification)
        self.authorization = authorization
        self.deadline = deadline
        self.isCancellable = cancellable
        self.completion = completion
    }

    /// A channel management call (``Management``).
    init(
        management method: String, path: String, requestID: NotificationID, channelID: String?, body: [UInt8]?,
        authorization: String?, deadline: NIODeadline, completion: @escaping Completion
    ) {
        self.content = .management(
            Management(method: method, path: path, requestID: requestID, channelID: channelID, body: body))
        self.authorization = authorization
        self.deadline = deadline
        self.isCancellable = false
        self.completion = completion
    }

    /// The same request with another completion (used for the one resend after ExpiredProviderToken).
    init(copying other: APNsRequest, authorization: String?, completion: @escaping Completion) {
        self.content = other.content
        self.authorization = authorization
        self.deadline = other.deadline
        self.isCancellable = other.isCancellable
        self.completion = completion
    }

    // MARK: The header values, read from the content

    /// `:method`.
    var method: String {
        switch content {
        case .notification: "POST"
        case .management(let call): call.method
        }
    }

    /// `:path` (`/3/device/<hex>`, `/4/broadcasts/apps/<bundle>` or `/1/apps/<bundle>/…`) in two
    /// parts, each a string that exists already (a constant, the device token's hex): the
    /// connection writes them into its own buffer (``APNsHeaderIndexing``).
    var pathParts: (prefix: String, rest: String) {
        switch content {
        case .notification(let admitted): admitted.notification.pathParts
        case .management(let call): ("", call.path)
        }
    }

    /// The request's ID, always sent (so that resends and the server's record match): in
    /// `apns-id` for a device notification, in `apns-request-id` otherwise.
    var apnsID: NotificationID {
        switch content {
        case .notification(let admitted): admitted.id
        case .management(let call): call.requestID
        }
    }

    /// True when ``apnsID`` goes in `apns-request-id` (broadcasts and channel management).
    var sendsRequestID: Bool {
        switch content {
        case .notification(let admitted): admitted.channelID != nil
        case .management: true
        }
    }

    /// `apns-channel-id`.
    var channelID: String? {
        switch content {
        case .notification(let admitted): admitted.channelID?.rawValue
        case .management(let call): call.channelID
        }
    }

    /// `apns-topic`: a device notification's (a broadcast names its channel instead; the bundle
    /// ID is in its path).
    var topic: String? {
        switch content {
        case .notification(let admitted): admitted.channelID == nil ? admitted.notification.topic : nil
        case .management: nil
        }
    }

    /// `apns-push-type`.
    var pushType: String? {
        switch content {
        case .notification(let admitted): admitted.pushType.rawValue
        case .management: nil
        }
    }

    /// `apns-priority`.
    var priority: String? {
        switch content {
        case .notification(let admitted): admitted.notification.priority.map { String($0.rawValue) }
        case .management: nil
        }
    }

    /// `apns-expiration`.
    var expiration: String? {
        switch content {
        case .notification(let admitted): admitted.notification.expiration?.headerValue
        case .management: nil
        }
    }

    /// `apns-collapse-id`.
    var collapseID: String? {
        switch content {
        case .notification(let admitted): admitted.notification.collapseID
        case .management: nil
        }
    }

    /// The body as it came (an array shares its storage: not copied here; the engine copies it
    /// into DATA frames); nil for a request without one (`GET`, `DELETE`).
    var payload: [UInt8]? {
        switch content {
        case .notification(let admitted): admitted.notification.payload
        case .management(let call): call.body
        }
    }

    /// True when a successful answer's body is wanted (channel management reads).
    var keepsResponseBody: Bool {
        switch content {
        case .notification: false
        case .management: true
        }
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
