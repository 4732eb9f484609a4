import HeraldCore
import Logging
import Synchronization

/// Everything one tenant sends with: its configuration, its transport (credentials and
/// connection pools, opened at the first send) and its send pipeline.
///
/// A runtime admits every send once, before anything reaches the pipeline
/// (``HeraldCore/TenantConfiguration/admit(_:id:environment:credentialGeneration:topicRules:)``):
/// the notification passes ``HeraldCore/Notification/validate(requireTopic:)``, the topic is one
/// of the tenant's, the push type agrees with the topic, and the environment has an endpoint.
/// The ``HeraldCore/AdmittedNotification`` carries the apns-id its caller gives (the router's)
/// and the runtime's ``credentialGeneration``; the pipeline and the transport take it as it is.
/// Every send takes the one pipeline (``HeraldCore/SendPipeline``) and the transport's callback
/// form.
public final class TenantRuntime: Sendable {
    public let configuration: TenantConfiguration
    public let pipeline: SendPipeline
    /// How the router resends this tenant's single sends (the `retry` entry of its `plugins:`).
    public let retryPolicy: RetryPolicy
    /// This runtime's generation, distinct from every other runtime's in the process: each
    /// runtime has a transport and a credential of its own, so a notification's generation
    /// (``HeraldCore/AdmittedNotification/credentialGeneration``) says which credential it went
    /// under. A resend after a revocation goes under another.
    public let credentialGeneration: UInt64
    /// The tenant's sends and failures of the last hour, which its runtimes share
    /// (``LastHourCounts``); the router counts each single send's and batch item's last attempt.
    public let lastHour: LastHourCounts.Window
    /// The tenant's usage counts, which its runtimes share (``UsageMeter/Tally``): the router
    /// counts each single send's acceptance and last outcome on it, the job runner each batch
    /// item's outcome.
    public let usage: UsageMeter.Tally
    /// The tenant's transport: its connections, counters and credential (``PushTransport/status``).
    public let transport: any PushTransport
    private let clock: any PushClock
    private let logger: Logger
    private let pushLogger: PushLogger
    /// The deadline of a send that brings none, from its start, in nanoseconds.
    private let defaultDeadline: Int64
    /// Set once ``shutdown()`` or ``revoke()`` began.
    private let closed = Atomic<Bool>(false)
    /// Set once ``revoke()`` began.
    private let revoked = Atomic<Bool>(false)
    /// The tenant's topic checks, worked out once (``TopicRules``).
    private let topicRules: TopicRules

    public var id: TenantID { configuration.id }

    /// The last generation given to a runtime.
    private static let generations = Atomic<UInt64>(0)

    init(
        configuration: TenantConfiguration, plugins: TenantPlugins, transport: any PushTransport,
        clock: any PushClock, logger: Logger, defaultDeadline: Duration, lastHour: LastHourCounts.Window,
        usage: UsageMeter.Tally
    ) {
        self.configuration = configuration
        self.lastHour = lastHour
        self.usage = usage
        self.topicRules = TopicRules(configuration)
        self.transport = transport
        self.clock = clock
        self.logger = logger
        var pushLogger = PushLogger(logger)
        pushLogger[metadataKey: "herald.tenant"] = configuration.id.rawValue
        self.pushLogger = pushLogger
        self.defaultDeadline = defaultDeadline.nanoseconds
        self.retryPolicy = plugins.retry
        self.credentialGeneration = Self.generations.add(1, ordering: .relaxed).newValue
        // The pipeline's send: the transport's callback form.
        self.pipeline = SendPipeline(plugins.middlewares, clock: clock) { notification, context, completion in
            transport.startSend(notification, deadline: context.deadline, completion: completion)
        }
    }

    /// True once ``shutdown()`` or ``revoke()`` began: new sends are refused with `ShuttingDown`.
    public var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// True once ``revoke()`` began.
    public var isRevoked: Bool { revoked.load(ordering: .acquiring) }

    /// The transport's credential identity (key ID and key fingerprint, or certificate
    /// fingerprint; never secret), nil when the transport has none.
    public var credentialIdentity: String? { transport.credentialIdentity }

    /// True when a send goes out without a task: the transport has a callback form
    /// (``HeraldCore/PushTransport/sendsByCallback``). The pipeline itself never needs one.
    public var startsSendsByCallback: Bool { transport.sendsByCallback }

    /// Sends one attempt of one notification through the tenant's pipeline and calls `completion`
    /// exactly once with APNs' answer (success or rejection) or the ``PushError`` (possibly on a
    /// connection's event loop: it must not block). Callers bound how many they start (the job
    /// runner's permits); resends are the router's.
    ///
    /// - Parameters:
    ///   - id: the notification's apns-id (the router's: the caller's own or a new one); it
    ///     replaces `notification.id`.
    ///   - environment: nil sends to the tenant's default environment.
    ///   - deadline: nil allows the router's default time from now.
    ///   - attempt: which attempt this is (``HeraldCore/PushContext/attempt``).
    public func startSend(
        _ notification: consuming Notification, id: NotificationID, environment: APNsEnvironment? = nil,
        deadline: PushInstant? = nil, attempt: Int = 1,
        completion: @escaping @Sendable (consuming Result<PushResult, any Error>) -> Void
    ) {
        let admitted: AdmittedNotification
        do {
            admitted = try admit(notification, id: id, environment: environment)
        } catch {
            completion(.failure(error))
            return
        }
        startSend(admitted, deadline: deadline, attempt: attempt, completion: completion)
    }

    /// Admits `notification` as this runtime's (its tenant's rules, with this runtime's
    /// ``credentialGeneration``), for ``startSend(_:deadline:attempt:completion:)``.
    /// - Throws: the refusal (``HeraldCore/TenantConfiguration/admit(_:id:environment:credentialGeneration:topicRules:)``).
    public func admit(
        _ notification: consuming Notification, id: NotificationID, environment: APNsEnvironment?
    ) throws(PushError) -> AdmittedNotification {
        try configuration.admit(
            notification, id: id, environment: environment, credentialGeneration: credentialGeneration, topicRules: topicRules)
    }

    /// Sends one attempt of an admitted notification, as
    /// ``startSend(_:id:environment:deadline:attempt:completion:)`` does after the admission. One
    /// another runtime admitted (another ``HeraldCore/AdmittedNotification/credentialGeneration``)
    /// is admitted again by this one first, with its apns-id and environment.
    public func startSend(
        _ admitted: consuming AdmittedNotification, deadline: PushInstant? = nil, attempt: Int = 1,
        completion: @escaping @Sendable (consuming Result<PushResult, any Error>) -> Void
    ) {
        if admitted.credentialGeneration != credentialGeneration {
            do {
                admitted = try admit(admitted.notification, id: admitted.id, environment: admitted.environment)
            } catch {
                completion(.failure(error))
                return
            }
        }
        guard !isClosed else {
            completion(.failure(PushError.shuttingDown(configuration.id)))
            return
        }
        let context = PushContext(
            tenant: configuration.id, environment: admitted.environment, logger: pushLogger.withNotificationID(admitted.id),
            attempt: attempt, deadline: deadline ?? clock.now.advanced(byNanoseconds: defaultDeadline))
        pipeline.start(consume admitted, context: consume context, completion: completion)
    }

    /// ``startSend(_:id:environment:deadline:attempt:completion:)``, awaited (its completion is
    /// called exactly once).
    nonisolated(nonsending) public func send(
        _ notification: Notification, id: NotificationID, environment: APNsEnvironment? = nil,
        deadline: PushInstant? = nil, attempt: Int = 1
    ) async throws -> PushResult {
        try await withUnsafeThrowingContinuation { continuation in
            startSend(notification, id: id, environment: environment, deadline: deadline, attempt: attempt) {
                continuation.resume(with: $0)
            }
        }
    }

    /// Refuses new sends, lets the transport finish what is in flight, and closes it.
    public func shutdown() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        logger.debug("tenant runtime shutting down")
        await transport.shutdown()
    }

    /// The credential was revoked: refuses new sends and closes every connection at once.
    /// In-flight sends fail with the connection's error, which the router, seeing this runtime
    /// revoked, reports as `CredentialRevoked` (and resends once on the tenant's new runtime).
    /// Also cuts short a ``shutdown()`` that is still draining.
    public func revoke() async {
        revoked.store(true, ordering: .releasing)
        closed.store(true, ordering: .releasing)
        logger.notice("tenant credential revoked: closing its connections")
        await transport.close()
    }
}
