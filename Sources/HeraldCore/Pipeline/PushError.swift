/// Why a notification was not answered by APNs: refused by Herald before the wire, or lost on
/// the way. APNs' own rejections are not errors: they come back as a ``PushResult``.
///
/// `code` is short and bounded (safe as a metric label); `reason` is the APNs reason the
/// refusal stands for, when there is one (`TopicDisallowed`, `Unregistered`, …); `message`
/// says what happened, never with a secret in it.
public struct PushError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case unknownTenant = "UnknownTenant"
            case invalidNotification = "InvalidNotification"
            case topicDisallowed = "TopicDisallowed"
            case pushTypeMismatch = "PushTypeTopicMismatch"
            case environmentUnavailable = "EnvironmentUnavailable"
            case rateLimited = "RateLimited"
            case tokenRefused = "TokenRefused"
            case deadlineExceeded = "DeadlineExceeded"
            case transport = "TransportFailed"
            case shuttingDown = "ShuttingDown"
            case plugin = "PluginFailed"
            case credentialRevoked = "CredentialRevoked"
            case queueFull = "QueueFull"
            case circuitOpen = "CircuitOpen"
            /// None of the tenant's token keys may sign for the send's environment and topic.
            case noSigningKey = "NoSigningKey"
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// No tenant has this id (or it failed to load).
        public static let unknownTenant = Code(.unknownTenant)
        /// The notification breaks one of APNs' rules (see `reason` and `field`).
        public static let invalidNotification = Code(.invalidNotification)
        /// The topic is not one of the tenant's topics.
        public static let topicDisallowed = Code(.topicDisallowed)
        /// The push type and the topic's suffix disagree (a voip push to a topic without `.voip`, …).
        public static let pushTypeMismatch = Code(.pushTypeMismatch)
        /// The tenant has no endpoint for the environment asked for.
        public static let environmentUnavailable = Code(.environmentUnavailable)
        /// Over the tenant's rate limit, and waiting would pass the deadline.
        public static let rateLimited = Code(.rateLimited)
        /// The device token was reported invalid by APNs and has not been registered again since.
        public static let tokenRefused = Code(.tokenRefused)
        /// The deadline passed before APNs answered.
        public static let deadlineExceeded = Code(.deadlineExceeded)
        /// The connection to APNs failed; see ``PushError/mayHaveReachedAPNs``.
        public static let transport = Code(.transport)
        /// The tenant's runtime is closing (reload, removal, shutdown).
        public static let shuttingDown = Code(.shuttingDown)
        /// A plugin failed for a reason of its own.
        public static let plugin = Code(.plugin)
        /// The tenant's credential was revoked while the notification was on its connections,
        /// and it got no answer (the router resends it once on the new credential).
        public static let credentialRevoked = Code(.credentialRevoked)
        /// The tenant's connection pool queue is full (backpressure): nothing was sent.
        public static let queueFull = Code(.queueFull)
        /// The tenant's circuit to the endpoint is open after a run of transient failures
        /// (``PushError/retryAfter`` says when the next probe may go): nothing was sent.
        public static let circuitOpen = Code(.circuitOpen)
        /// None of the tenant's token keys may sign for the send's environment and topic.
        public static let noSigningKey = Code(.noSigningKey)

        /// A short, bounded label (for metrics and API answers).
        public var description: String { base.rawValue }
    }

    public var message: String
    public var code: Code
    /// The APNs reason this refusal stands for, when there is one.
    public var reason: APNsReason?
    /// The offending field, as the API and CLI name it, for invalid input.
    public var field: String?
    /// False when Herald knows the notification never reached APNs (refused locally, or a
    /// connection failure before APNs could have processed the stream). Only such failures may
    /// be sent again without risking a duplicate.
    public var mayHaveReachedAPNs: Bool
    /// How long until trying again makes sense (``Code/circuitOpen``), when Herald knows.
    public var retryAfter: Duration?

    public var description: String {
        var text = "\(code): \(message)"
        if let reason { text += " (\(reason.wireValue))" }
        return text
    }

    public static func unknownTenant(_ tenant: String) -> PushError {
        PushError(code: .unknownTenant, message: "no tenant '\(tenant)' is loaded")
    }

    public static func invalid(_ error: NotificationValidationError) -> PushError {
        PushError(code: .invalidNotification, message: error.message, reason: error.reason, field: error.field)
    }

    public static func topicDisallowed(_ topic: String, tenant: TenantID) -> PushError {
        PushError(
            code: .topicDisallowed, message: "topic '\(topic)' is not one of tenant '\(tenant)''s topics",
            reason: .topicDisallowed, field: "topic")
    }

    public static func pushTypeMismatch(_ pushType: PushType, topic: String) -> PushError {
        let rule: String
        if let suffix = pushType.requiredTopicSuffix {
            rule = "\(pushType.rawValue) notifications must go to a topic ending in '\(suffix)'"
        } else {
            rule = "\(pushType.rawValue) notifications go to the bundle ID itself, not to a suffixed topic"
        }
        return PushError(code: .pushTypeMismatch, message: "\(rule); got '\(topic)'", reason: .badTopic, field: "push_type")
    }

    public static func environmentUnavailable(_ environment: APNsEnvironment, tenant: TenantID) -> PushError {
        PushError(
            code: .environmentUnavailable, message: "tenant '\(tenant)' has no \(environment) endpoint",
            field: "environment")
    }

    /// None of the tenant's token keys fits the send: each is restricted to another environment
    /// or to other topics.
    public static func noSigningKey(_ token: TokenAuthConfiguration, environment: APNsEnvironment, topic: String, tenant: TenantID)
        -> PushError
    {
        let keys = token.keys.map { "\($0.keyID) (\($0.restrictionText))" }.joined(separator: ", ")
        return PushError(
            code: .noSigningKey,
            message: "none of tenant '\(tenant)''s token keys may sign for \(environment) and topic '\(topic)': \(keys)",
            field: "topic")
    }

    public static func deadlineExceeded(_ message: String = "the deadline passed before APNs answered", mayHaveReachedAPNs: Bool) -> PushError {
        PushError(code: .deadlineExceeded, message: message, mayHaveReachedAPNs: mayHaveReachedAPNs)
    }

    /// A failed connection or stream. `surelyNotProcessed` is true only when APNs cannot have
    /// processed the request (it never left, or the server said, by GOAWAY's last stream id or
    /// a refused stream, that it did not process it).
    public static func transport(_ message: String, surelyNotProcessed: Bool) -> PushError {
        PushError(code: .transport, message: message, mayHaveReachedAPNs: !surelyNotProcessed)
    }

    /// The connection pool's bounded queue is full: nothing was sent.
    public static func queueFull(_ message: String = "the connection pool's queue is full") -> PushError {
        PushError(code: .queueFull, message: message, mayHaveReachedAPNs: false)
    }

    public static func shuttingDown(_ tenant: TenantID) -> PushError {
        PushError(code: .shuttingDown, message: "tenant '\(tenant)' is shutting down")
    }

    /// The connections carrying the notification were closed because the tenant's credential
    /// was revoked. `mayHaveReachedAPNs`: the stream was written before the close, so APNs may
    /// have processed it even though no answer came back.
    public static func credentialRevoked(_ tenant: TenantID, mayHaveReachedAPNs: Bool) -> PushError {
        PushError(
            code: .credentialRevoked, message: "tenant '\(tenant)''s credential was revoked before APNs answered",
            mayHaveReachedAPNs: mayHaveReachedAPNs)
    }

    /// The tenant's circuit to `endpoint` is open: nothing was sent; the next probe may go in
    /// `retryAfter`.
    public static func circuitOpen(tenant: TenantID, endpoint: String, retryAfter: Duration) -> PushError {
        let seconds = max(1, Int(clamping: retryAfter.components.seconds) &+ (retryAfter.components.attoseconds > 0 ? 1 : 0))
        return PushError(
            code: .circuitOpen,
            message: "tenant '\(tenant)''s circuit to \(endpoint) is open after a run of transient failures "
                + "(500/503/429 or failed connections); nothing was sent; the next probe may go in \(seconds) s",
            mayHaveReachedAPNs: false, retryAfter: .seconds(seconds))
    }
}

// Built through the memberwise initializer, as `Notification` is (see there).
extension PushError {
    public init(
        code: Code, message: String, reason: APNsReason? = nil, field: String? = nil, mayHaveReachedAPNs: Bool = false,
        retryAfter: Duration? = nil
    ) {
        self.init(
            message: message, code: code, reason: reason, field: field, mayHaveReachedAPNs: mayHaveReachedAPNs,
            retryAfter: retryAfter)
    }
}
