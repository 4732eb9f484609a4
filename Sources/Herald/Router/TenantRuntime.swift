import HeraldCore
import Logging
import Synchronization

/// Everything one tenant sends with: its configuration, its transport (credentials and
/// connection pools, opened at the first send) and its send pipeline.
///
/// A runtime enforces the tenant's policy before anything reaches the pipeline
/// (`TenantConfiguration.admit(_:environment:)`): the notification passes
/// ``HeraldCore/Notification/validate(requireTopic:)``, the topic is one of the tenant's, the
/// push type agrees with the topic, and the environment has an endpoint.
public final class TenantRuntime: Sendable {
    public let configuration: TenantConfiguration
    public let pipeline: SendPipeline
    /// The tenant's transport: its connections, counters and credential (``PushTransport/status``).
    public let transport: any PushTransport
    private let clock: any PushClock
    private let logger: Logger
    private let pushLogger: PushLogger
    private let defaultDeadline: Duration
    private let state = Mutex(State())
    /// The tenant's topic checks, worked out once (``TopicRules``).
    private let topicRules: TopicRules

    private struct State {
        var closed = false
        var revoked = false
        var inFlight = 0
    }

    public var id: TenantID { configuration.id }

    init(
        configuration: TenantConfiguration, middlewares: [any PushMiddleware], transport: any PushTransport,
        clock: any PushClock, logger: Logger, defaultDeadline: Duration
    ) {
        self.configuration = configuration
        self.topicRules = TopicRules(configuration)
        self.transport = transport
        self.clock = clock
        self.logger = logger
        var pushLogger = PushLogger(logger)
        pushLogger[metadataKey: "herald.tenant"] = configuration.id.rawValue
        self.pushLogger = pushLogger
        self.defaultDeadline = defaultDeadline
        let clock = clock
        self.pipeline = SendPipeline(
            middlewares,
            terminal: PushHandler { notification, context in
                guard clock.now < context.deadline else {
                    throw PushError.deadlineExceeded("the deadline passed before the notification went out", mayHaveReachedAPNs: false)
                }
                let response = try await transport.send(notification, environment: context.environment, deadline: context.deadline)
                return PushResult(
                    notificationID: notification.id ?? response.apnsID ?? NotificationID.random(),
                    environment: context.environment, response: response, attempts: context.attempt)
            })
    }

    /// True once ``shutdown()`` or ``revoke()`` began: new sends are refused with `ShuttingDown`.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// True once ``revoke()`` began.
    public var isRevoked: Bool { state.withLock { $0.revoked } }

    /// Sends admitted and not finished yet.
    public var inFlight: Int { state.withLock { $0.inFlight } }

    /// The transport's credential identity (key ID and key fingerprint, or certificate
    /// fingerprint; never secret), nil when the transport has none.
    public var credentialIdentity: String? { transport.credentialIdentity }

    /// Sends one notification through the tenant's pipeline.
    ///
    /// - Parameters:
    ///   - environment: nil sends to the tenant's default environment.
    ///   - deadline: nil allows the router's default time from now.
    ///   - retriesInPipeline: false when the caller retries itself (``PushContext/retriesInPipeline``).
    /// - Returns: APNs' answer (success or rejection).
    /// - Throws: ``PushError`` when the notification was refused locally or got no answer.
    nonisolated(nonsending) public func send(
        _ notification: Notification, environment: APNsEnvironment? = nil, deadline: ContinuousClock.Instant? = nil,
        retriesInPipeline: Bool = true
    ) async throws -> PushResult {
        let checked = try configuration.admit(notification, environment: environment, topicRules: topicRules)
        var notification = checked.notification
        let environment = checked.environment
        let id = notification.id ?? NotificationID.random()
        notification.id = id

        let admitted = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.inFlight += 1
            return true
        }
        guard admitted else { throw PushError.shuttingDown(configuration.id) }
        defer { state.withLock { $0.inFlight -= 1 } }

        let context = PushContext(
            tenant: configuration.id, environment: environment, logger: pushLogger.withNotificationID(id), attempt: 1,
            deadline: deadline ?? clock.now.advanced(by: defaultDeadline), retriesInPipeline: retriesInPipeline)
        do {
            return try await pipeline.send(notification, context: context)
        } catch let error as PushError where error.code == .transport || error.code == .shuttingDown {
            // Cut off by a revocation: say so, so that the router resends it on the new credential.
            guard state.withLock({ $0.revoked }) else { throw error }
            throw PushError.credentialRevoked(configuration.id, mayHaveReachedAPNs: error.mayHaveReachedAPNs)
        }
    }

    /// Refuses new sends, lets the transport finish what is in flight, and closes it.
    public func shutdown() async {
        let first = state.withLock { state -> Bool in
            defer { state.closed = true }
            return !state.closed
        }
        guard first else { return }
        logger.debug("tenant runtime shutting down")
        await transport.shutdown()
    }

    /// The credential was revoked: refuses new sends and closes every connection at once.
    /// In-flight sends fail with `CredentialRevoked` (the router resends them once on the
    /// tenant's new runtime). Also cuts short a ``shutdown()`` that is still draining.
    public func revoke() async {
        state.withLock { state in
            state.closed = true
            state.revoked = true
        }
        logger.notice("tenant credential revoked: closing its connections")
        await transport.close()
    }
}
