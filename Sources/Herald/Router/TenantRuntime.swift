import HeraldCore
import Logging
import Synchronization

/// Everything one tenant sends with: its configuration, its transport (credentials and
/// connection pools, opened at the first send) and its send pipeline.
///
/// A runtime enforces the tenant's policy before anything reaches the pipeline
/// (`TenantConfiguration.admit(_:environment:)`): the notification passes
/// ``HeraldCore/Notification/validate(requireTopic:)``, the topic is one of the tenant's, the
/// push type agrees with the topic, and the environment has an endpoint. The admitted
/// notification carries the apns-id its caller gives (the router's): the runtime, the pipeline
/// and the transport never make one.
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
    /// The middlewares' hooks, when every middleware has them (``HeraldCore/SynchronousPushMiddleware``).
    private let hooks: PushHooks?

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
        self.hooks = PushHooks(middlewares)
        let clock = clock
        self.pipeline = SendPipeline(
            middlewares,
            terminal: PushHandler { notification, context in
                guard clock.now < context.deadline else {
                    throw PushError.deadlineExceeded("the deadline passed before the notification went out", mayHaveReachedAPNs: false)
                }
                // The runtime gives the notification its apns-id before the pipeline; one that a
                // middleware took away is refused here, unsent.
                guard let id = notification.id else {
                    throw PushError.invalid(
                        NotificationValidationError(
                            .badMessageId, field: "apns_id", message: "a plugin removed the notification's apns-id"))
                }
                let response = try await transport.send(notification, environment: context.environment, deadline: context.deadline)
                return PushResult(
                    notificationID: id, environment: context.environment, response: response, attempts: context.attempt)
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
    ///   - id: the notification's apns-id (the router's: the caller's own or a new one); it
    ///     replaces `notification.id`, and every attempt goes with it.
    ///   - environment: nil sends to the tenant's default environment.
    ///   - deadline: nil allows the router's default time from now.
    ///   - retriesInPipeline: false when the caller retries itself (``PushContext/retriesInPipeline``).
    /// - Returns: APNs' answer (success or rejection).
    /// - Throws: ``PushError`` when the notification was refused locally or got no answer.
    nonisolated(nonsending) public func send(
        _ notification: Notification, id: NotificationID, environment: APNsEnvironment? = nil,
        deadline: ContinuousClock.Instant? = nil, retriesInPipeline: Bool = true
    ) async throws -> PushResult {
        let checked = try configuration.admit(notification, environment: environment, topicRules: topicRules)
        var notification = checked.notification
        let environment = checked.environment
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

    /// True when ``startSend(_:id:environment:deadline:retriesInPipeline:completion:)`` sends
    /// without a task: every middleware has hooks and the transport a callback form.
    public var startsSendsByCallback: Bool { hooks != nil && transport.sendsByCallback }

    /// Sends one notification as ``send(_:id:environment:deadline:retriesInPipeline:)`` does, and
    /// calls `completion` exactly once with the result or the error (possibly on a connection's
    /// event loop: it must not block). When ``startsSendsByCallback`` and every middleware
    /// agrees (``HeraldCore/SynchronousPushMiddleware/hooksApply(to:)``), the send goes through
    /// the middlewares' hooks and the transport's callback form, without a task; otherwise a task
    /// sends it through the pipeline. Callers bound how many they start (the job runner's permits).
    public func startSend(
        _ notification: Notification, id: NotificationID, environment: APNsEnvironment? = nil,
        deadline: ContinuousClock.Instant? = nil, retriesInPipeline: Bool = true,
        completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        guard let hooks, transport.sendsByCallback else {
            sendInTask(
                notification, id: id, environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline,
                completion: completion)
            return
        }
        let checked: (notification: Notification, environment: APNsEnvironment)
        do {
            checked = try configuration.admit(notification, environment: environment, topicRules: topicRules)
        } catch {
            completion(.failure(error))
            return
        }
        var admitted = checked.notification
        let environment = checked.environment
        admitted.id = id
        let notification = admitted
        let context = PushContext(
            tenant: configuration.id, environment: environment, logger: pushLogger.withNotificationID(id), attempt: 1,
            deadline: deadline ?? clock.now.advanced(by: defaultDeadline), retriesInPipeline: retriesInPipeline)
        guard hooks.apply(to: context) else {
            sendInTask(
                notification, id: id, environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline,
                completion: completion)
            return
        }
        let counted = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.inFlight += 1
            return true
        }
        guard counted else {
            completion(.failure(PushError.shuttingDown(configuration.id)))
            return
        }

        let startedAt = clock.now
        let (ran, refusal) = hooks.willSend(notification, context: context)
        if let refusal {
            finishHooked(notification, context: context, hooks: hooks, startedAt: startedAt, outcome: .failure(refusal), ran: ran, completion: completion)
            return
        }
        guard clock.now < context.deadline else {
            let late = PushError.deadlineExceeded("the deadline passed before the notification went out", mayHaveReachedAPNs: false)
            finishHooked(notification, context: context, hooks: hooks, startedAt: startedAt, outcome: .failure(late), ran: ran, completion: completion)
            return
        }
        transport.startSend(notification, environment: environment, deadline: context.deadline) { answer in
            let outcome: Result<PushResult, any Error> =
                switch answer {
                case .success(let response):
                    .success(PushResult(notificationID: id, environment: environment, response: response, attempts: context.attempt))
                case .failure(let error): .failure(error)
                }
            self.finishHooked(notification, context: context, hooks: hooks, startedAt: startedAt, outcome: outcome, ran: ran, completion: completion)
        }
    }

    /// The end of a hooked send: the hooks after it, their follow-ups (in a task, when there are
    /// any), the revocation's error as ``send(_:id:environment:deadline:retriesInPipeline:)`` gives
    /// it, and the send taken off the count in flight.
    private func finishHooked(
        _ notification: Notification, context: PushContext, hooks: PushHooks, startedAt: ContinuousClock.Instant,
        outcome: Result<PushResult, any Error>, ran: Int, completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        let followUps = hooks.didSend(notification, context: context, startedAt: startedAt, outcome: outcome, ran: ran)
        let finish: @Sendable () -> Void = {
            var outcome = outcome
            if case .failure(let error as PushError) = outcome, error.code == .transport || error.code == .shuttingDown,
                self.state.withLock({ $0.revoked })
            {
                outcome = .failure(PushError.credentialRevoked(self.configuration.id, mayHaveReachedAPNs: error.mayHaveReachedAPNs))
            }
            self.state.withLock { $0.inFlight -= 1 }
            completion(outcome)
        }
        guard !followUps.isEmpty else { return finish() }
        Task {
            for followUp in followUps { await followUp() }
            finish()
        }
    }

    /// The `async` pipeline's send, by a task, for ``startSend(_:id:environment:deadline:retriesInPipeline:completion:)``.
    private func sendInTask(
        _ notification: Notification, id: NotificationID, environment: APNsEnvironment?, deadline: ContinuousClock.Instant?,
        retriesInPipeline: Bool, completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        Task {
            do {
                completion(
                    .success(
                        try await self.send(
                            notification, id: id, environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline)))
            } catch {
                completion(.failure(error))
            }
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
