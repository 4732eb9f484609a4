import Foundation
import HeraldConfig
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// What a ``Router`` is built with.
public struct RouterConfiguration: Sendable {
    public var registry: PluginRegistry
    public var store: any PushStore
    public var transports: any TransportProvider
    public var clock: any PushClock
    public var logger: Logger
    public var webhooks: any WebhookSender
    /// The durable webhook outbox plugins queue their webhooks in (`herald serve` sets one);
    /// nil: each webhook is posted by a task of its own (``Router/tasks``).
    public var webhookQueue: (any WebhookQueue)?
    /// The time a send may take when the caller gives no deadline (retries included).
    public var defaultDeadline: Duration
    /// Where `env:` secret references in plugin options are read from.
    public var environment: [String: String]
    /// The bound and the skipping of the store reads a send waits for (``SendPathLookups``); nil:
    /// none, a send waits for its lookups as for any store call. `herald serve` sets it on a
    /// PostgreSQL store (the one its provider tokens use too); an embedded SQLite store's reads
    /// are local and are not bounded by a timer (under a busy CPU a timer would skip them).
    public var sendPathLookups: SendPathLookups?
    /// Whether sends are counted in the tenants' usage (``Router/usage``; `api.count_usage`).
    public var countUsage: Bool = true

    public init(
        registry: PluginRegistry = .standard(), store: any PushStore, transports: any TransportProvider,
        clock: any PushClock = SystemPushClock(), logger: Logger = Logger(label: "herald"),
        webhooks: any WebhookSender = HTTPWebhookSender.shared, defaultDeadline: Duration = .seconds(60),
        environment: [String: String] = ProcessInfo.processInfo.environment, webhookQueue: (any WebhookQueue)? = nil,
        sendPathLookups: SendPathLookups? = nil
    ) {
        self.webhookQueue = webhookQueue
        self.sendPathLookups = sendPathLookups
        self.registry = registry
        self.store = store
        self.transports = transports
        self.clock = clock
        self.logger = logger
        self.webhooks = webhooks
        self.defaultDeadline = defaultDeadline
        self.environment = environment
    }
}

/// The one entry point for sending: tenant id → ``TenantRuntime`` → pipeline → APNs. The HTTP
/// API, the CLI and the job runner all send through
/// ``startSend(tenant:notification:environment:deadline:retries:completion:)``.
///
/// Runtimes are swapped atomically (``replace(_:)``, ``remove(tenant:)``): a send uses the runtime
/// it found; the old one drains after the swap.
///
/// ```swift
/// let router = Router(configuration: RouterConfiguration(store: store, transports: APNsTransportProvider()))
/// let report = router.load(directory: "tenants")
/// let result = try await router.send(tenant: try TenantID("acme"), notification: note)
/// ```
public final class Router: Sendable {
    public let configuration: RouterConfiguration
    /// The work plugins started after their sends (webhooks).
    public let tasks = PluginTasks()
    /// Each tenant's circuit per APNs endpoint: the job runner gates batch sends with it; the
    /// admin and metrics pages show it.
    public let circuits = DeliveryCircuits()
    /// Each tenant's sends and failures of the last hour (the console's tenant list).
    public let lastHour = LastHourCounts()
    /// Each tenant's usage per hour, until ``UsageFlusher`` writes it to the store.
    public let usage: UsageMeter
    private let runtimes = Mutex(Runtimes())
    /// apns-ids for sends that bring none (``apnsID(for:)``): one seeded sequence for every
    /// tenant, behind a lock held for two words and a 36-byte format.
    private let idGenerator = Mutex(NotificationIDGenerator())
    /// ``RouterConfiguration/defaultDeadline`` in nanoseconds, converted once.
    private let defaultDeadline: Int64

    public init(configuration: RouterConfiguration) {
        self.configuration = configuration
        defaultDeadline = configuration.defaultDeadline.nanoseconds
        usage = UsageMeter(enabled: configuration.countUsage)
    }

    // MARK: Loading

    /// Loads every tenant file of a directory and installs a runtime for each tenant that loads.
    /// A file that fails (bad YAML, bad credentials, unknown plugin, bad plugin options) is
    /// reported and skipped; the others load.
    /// - Throws: only when the directory itself cannot be read.
    @discardableResult
    public func load(directory: String, loader: TenantLoader = TenantLoader()) async throws(ConfigFileError) -> TenantLoadReport {
        let load = try loader.loadDirectory(directory)
        var report = await install(load.tenants)
        report.failures.insert(
            contentsOf: load.failures.map { TenantLoadReport.Failure(file: $0.file, tenant: $0.tenantID, message: $0.description) },
            at: 0)
        return report
    }

    /// Builds and installs runtimes for the given tenants; those that fail are reported.
    @discardableResult
    public func install(_ tenants: [TenantConfiguration]) async -> TenantLoadReport {
        var report = TenantLoadReport()
        for tenant in tenants {
            do {
                let runtime = try makeRuntime(for: tenant)
                await replace(runtime)
                report.loaded.append(tenant.id)
            } catch {
                configuration.logger.error(
                    "tenant failed to load", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
                report.failures.append(.init(file: tenant.sourceFile, tenant: tenant.id, message: "\(error)"))
            }
        }
        return report
    }

    /// Builds a runtime for a tenant without installing it: its plugins (validating their
    /// options) and its transport (checking its credentials). Opens no connection.
    /// - Throws: ``PluginConfigurationError``, or the transport provider's credential error.
    public func makeRuntime(for tenant: TenantConfiguration) throws -> TenantRuntime {
        var logger = configuration.logger
        logger[metadataKey: "herald.tenant"] = .string(tenant.id.rawValue)
        let pushLogger = PushLogger(logger)
        // A grouped read through the send path's bound and skip, on a shared store.
        let invalidTokens = TenantInvalidTokens(
            tenant: tenant.id, store: configuration.store,
            bound: configuration.sendPathLookups?.invalidTokenBound)
        let secrets = FileSecretResolver(baseDirectory: Self.directory(of: tenant.sourceFile), environment: configuration.environment)
        let plugins = try configuration.registry.makePlugins(
            for: tenant,
            environment: { entry in
                var entryLogger = pushLogger
                entryLogger[metadataKey: "herald.plugin"] = entry.name
                return PluginEnvironment(
                    tenant: tenant.id, topics: tenant.topics, tenantFile: tenant.sourceFile, location: entry.location,
                    logger: entryLogger, clock: configuration.clock, invalidTokens: invalidTokens,
                    webhooks: configuration.webhooks, tasks: tasks, secrets: secrets,
                    webhookQueue: configuration.webhookQueue, webhook: tenant.webhook)
            })
        let transport = try configuration.transports.makeTransport(for: tenant, logger: logger)
        return TenantRuntime(
            configuration: tenant, plugins: plugins, transport: transport, clock: configuration.clock,
            logger: logger, defaultDeadline: configuration.defaultDeadline, lastHour: lastHour.window(for: tenant.id),
            usage: usage.tally(for: tenant.id))
    }

    // MARK: Swapping runtimes

    /// Installs a runtime, replacing the tenant's current one, which then drains and closes.
    public func replace(_ runtime: TenantRuntime) async {
        let old = runtimes.withLock { $0.install(runtime) }
        lastHour.adopt(runtime.lastHour, for: runtime.id)
        if let old, old !== runtime { await old.shutdown() }
    }

    /// Builds and installs a runtime for a new or changed tenant configuration.
    /// - Throws: as ``makeRuntime(for:)``; the current runtime, if any, stays.
    public func replace(tenant: TenantConfiguration) async throws {
        await replace(try makeRuntime(for: tenant))
    }

    /// Removes a tenant; its runtime drains and closes.
    public func remove(tenant: TenantID) async {
        let old = runtimes.withLock { $0.remove(tenant) }
        circuits.retain(tenants: Set(tenantIDs))
        lastHour.retain(tenants: Set(tenantIDs))
        await old?.shutdown()
    }

    /// Installs a runtime and returns the one it replaced, still running: the caller shuts it
    /// down (``TenantRuntime/shutdown()`` to drain, ``TenantRuntime/revoke()`` to cut). Sends
    /// that look the tenant up after this call get the new runtime. Used by reloads, which swap
    /// every changed tenant first and drain the old runtimes together afterwards.
    public func exchange(_ runtime: TenantRuntime) -> TenantRuntime? {
        let old = runtimes.withLock { $0.install(runtime) }
        lastHour.adopt(runtime.lastHour, for: runtime.id)
        return old === runtime ? nil : old
    }

    /// Takes a tenant out and returns its runtime, still running, for the caller to shut down.
    /// Sends that look the tenant up after this call fail with `UnknownTenant`.
    public func detach(tenant: TenantID) -> TenantRuntime? {
        let old = runtimes.withLock { $0.remove(tenant) }
        circuits.retain(tenants: Set(tenantIDs))
        lastHour.retain(tenants: Set(tenantIDs))
        return old
    }

    public func runtime(for tenant: TenantID) -> TenantRuntime? {
        runtimes.withLock { $0.runtime(for: tenant) }
    }

    /// The loaded tenants, sorted.
    public var tenantIDs: [TenantID] {
        runtimes.withLock { Array($0.byTenant.keys) }.sorted()
    }

    /// The runtimes of the loaded tenants, in no order: one lock for all of them.
    public var currentRuntimes: [TenantRuntime] {
        runtimes.withLock { Array($0.byTenant.values) }
    }

    // MARK: Sending

    /// Sends one notification for a tenant: ``startSend(tenant:notification:environment:deadline:retries:completion:)``,
    /// awaited (its completion is called exactly once).
    ///
    /// - Returns: APNs' answer (a success or APNs' rejection, with its reason).
    /// - Throws: ``PushError`` for local refusals (unknown tenant, `TopicDisallowed`, push type vs
    ///   topic, no endpoint, invalid notification, rate limit, refused token) and for failures
    ///   without an APNs answer.
    nonisolated(nonsending) public func send(
        tenant: TenantID, notification: consuming HeraldCore.Notification, environment: APNsEnvironment? = nil,
        deadline: PushInstant? = nil, retries: Bool = true
    ) async throws -> PushResult {
        // Moved into the send, not copied: the closure takes it out of `pending` (a closure cannot
        // consume what it captures; the closure runs once, so `pending` is never empty there).
        var pending = Optional(consume notification)
        return try await withUnsafeThrowingContinuation { continuation in
            guard let notification = pending.take() else {
                return continuation.resume(throwing: PushError(code: .invalidNotification, message: "no notification to send"))
            }
            start(
                tenant: tenant, notification: consume notification, environment: environment, deadline: deadline, retries: retries,
                reply: .continuation(continuation))
        }
    }

    /// Sends one notification for a tenant, the one entry point of the API, the CLI and the job
    /// runner, and calls `completion` exactly once with APNs' answer or the error. No task is
    /// made for it when the tenant's transport sends by callback
    /// (``TenantRuntime/startsSendsByCallback``): `completion` then runs on a connection's event
    /// loop and must not block. Callers that keep many sends in flight bound them (the job
    /// runner's permits).
    ///
    /// Every attempt goes with the same apns-id, and the router alone decides whether to make
    /// another (``resend(_:after:resends:policy:)``).
    ///
    /// - Parameters:
    ///   - environment: nil: the tenant's default environment.
    ///   - deadline: nil: ``RouterConfiguration/defaultDeadline`` from now; resends never pass it.
    ///   - retries: false when the caller retries the notification itself (the job runner, under
    ///     the tenant's delivery policy): one attempt, whatever its outcome.
    public func startSend(
        tenant: TenantID, notification: consuming HeraldCore.Notification, environment: APNsEnvironment? = nil,
        deadline: PushInstant? = nil, retries: Bool = true,
        completion: @escaping @Sendable (consuming Result<PushResult, any Error>) -> Void
    ) {
        start(
            tenant: tenant, notification: consume notification, environment: environment, deadline: deadline, retries: retries,
            reply: .callback(completion))
    }

    private func start(
        tenant: TenantID, notification: consuming HeraldCore.Notification, environment: APNsEnvironment?,
        deadline: PushInstant?, retries: Bool, reply: Reply
    ) {
        guard let runtime = runtime(for: tenant) else {
            reply(.failure(PushError.unknownTenant(tenant.rawValue)))
            return
        }
        let id = apnsID(for: notification)
        // Admitted at once: the send holds the admitted value (one reference), not the caller's
        // notification.
        let held: RoutedSend.Held
        do {
            held = .admitted(try runtime.admit(notification, id: id, environment: environment))
        } catch {
            held = .refused(RoutedSend.Refusal(error: error, id: id))
        }
        let send = RoutedSend(
            router: self, tenant: tenant, held: held, environment: environment,
            deadline: deadline ?? configuration.clock.now.advanced(byNanoseconds: defaultDeadline), retries: retries,
            completion: reply)
        send.attempt(Resends(), on: runtime)
    }

    /// A new request ID (`apns-request-id`) for a call that is not a send (channel management),
    /// from the same generator as every single send's apns-id.
    public func newRequestID() -> NotificationID {
        idGenerator.withLock { $0.nextID() }
    }

    /// The apns-id a send goes with: the caller's, or a new one. The one place a single send gets
    /// its apns-id (a batch item has its own from the store since the POST); the runtime, the
    /// pipeline and the transport take it as given.
    private func apnsID(for notification: HeraldCore.Notification) -> NotificationID {
        notification.id ?? idGenerator.withLock { $0.nextID() }
    }

    /// Where a send's outcome goes: a caller's completion, or an awaiting caller's continuation
    /// (held as it is, without a closure around it).
    private enum Reply: Sendable {
        case callback(@Sendable (consuming Result<PushResult, any Error>) -> Void)
        case continuation(UnsafeContinuation<PushResult, any Error>)

        func callAsFunction(_ outcome: consuming Result<PushResult, any Error>) {
            switch self {
            case .callback(let completion): completion(consume outcome)
            case .continuation(let continuation): continuation.resume(with: consume outcome)
            }
        }
    }

    /// One send as the router holds it across its attempts, with its caller's completion and the
    /// attempt under way: each attempt's answer comes back to this one object. One is made for
    /// every single send, so it holds only references and small values (107 bytes, within the
    /// allocator's smallest size classes).
    private final class RoutedSend: Sendable {
        let router: Router
        let tenant: TenantID
        let deadline: PushInstant
        let completion: Reply
        let environment: APNsEnvironment?
        let retries: Bool
        /// The attempt under way and what the send has been through (one attempt at a time: the
        /// lock only publishes them from one to the next).
        private let state: Mutex<State>

        private struct State {
            /// The runtime the attempt under way went to.
            var runtime: TenantRuntime?
            var held: Held
            var resends: Resends
        }

        /// The notification as the last runtime admitted it, which every later attempt through
        /// the same runtime sends as it is (one through another runtime, after a reload or a
        /// revocation, is admitted again by that one); or the first admission's refusal (a later
        /// attempt would be refused the same).
        enum Held {
            case admitted(AdmittedNotification)
            case refused(Refusal)
        }

        /// An admission's refusal, held by reference: rare, and kept out of every send's size.
        final class Refusal: Sendable {
            let error: PushError
            let id: NotificationID

            init(error: PushError, id: NotificationID) {
                self.error = error
                self.id = id
            }
        }

        init(
            router: Router, tenant: TenantID, held: consuming Held, environment: APNsEnvironment?, deadline: PushInstant,
            retries: Bool, completion: Reply
        ) {
            self.router = router
            self.tenant = tenant
            self.deadline = deadline
            self.completion = completion
            self.environment = environment
            self.retries = retries
            state = Mutex(State(runtime: nil, held: held, resends: Resends()))
        }

        /// The send's apns-id, the same for every attempt.
        var id: NotificationID {
            state.withLock { state in
                switch state.held {
                case .admitted(let admitted): admitted.id
                case .refused(let refusal): refusal.id
                }
            }
        }

        /// Makes one attempt through the tenant's current runtime.
        func attempt(_ resends: Resends) {
            guard let runtime = router.runtime(for: tenant) else {
                completion(.failure(PushError.unknownTenant(tenant.rawValue)))
                return
            }
            attempt(resends, on: runtime)
        }

        /// Makes one attempt through `runtime`.
        func attempt(_ resends: Resends, on runtime: TenantRuntime) {
            let admitted: AdmittedNotification
            do {
                admitted = try state.withLock { (state) throws(PushError) -> AdmittedNotification in
                    state.runtime = runtime
                    state.resends = resends
                    return try Self.admission(of: &state.held, by: runtime, environment: environment)
                }
            } catch {
                return answered(.failure(error))
            }
            runtime.startSend(admitted, deadline: deadline, attempt: resends.attempt) {
                self.answered(consume $0)
            }
        }

        /// The notification as `runtime` admits it: as held when `runtime` admitted it, again
        /// under another runtime than the last.
        private static func admission(
            of held: inout Held, by runtime: TenantRuntime, environment: APNsEnvironment?
        ) throws(PushError) -> AdmittedNotification {
            switch held {
            case .admitted(let earlier) where earlier.credentialGeneration == runtime.credentialGeneration:
                return earlier
            case .admitted(let earlier):
                let admitted = try runtime.admit(earlier.notification, id: earlier.id, environment: environment)
                held = .admitted(admitted)
                return admitted
            case .refused(let refusal):
                throw refusal.error
            }
        }

        private func answered(_ outcome: consuming Result<PushResult, any Error>) {
            let (runtime, resends) = state.withLock { ($0.runtime, $0.resends) }
            guard let runtime else { return completion(consume outcome) }
            router.answered(self, outcome: consume outcome, runtime: runtime, resends: resends)
        }
    }

    /// What a send has been through so far.
    private struct Resends: Sendable {
        /// The pipeline attempt this is, from 1 (``HeraldCore/PushContext/attempt``).
        var attempt = 1
        /// Times it met a runtime that was shutting down (at most three runtimes in all).
        var swaps: UInt8 = 0
        var resentAfterRevocation = false
        var resentAfterExpiredToken = false
    }

    /// Whether a send is made again, and when.
    private enum Resend: Sendable {
        case no
        case now(Resends)
        case after(Duration, Resends)
    }

    /// An attempt's answer: made again (``resend(_:after:resends:policy:)``), or counted and
    /// handed to the caller. A transport failure of a runtime whose credential was revoked is
    /// `CredentialRevoked` from here on: the connection was cut under it.
    private func answered(_ send: RoutedSend, outcome: consuming Result<PushResult, any Error>, runtime: TenantRuntime, resends: Resends) {
        if case .failure(let error as PushError) = outcome, error.code == .transport || error.code == .shuttingDown,
            runtime.isRevoked
        {
            let revoked = PushError.credentialRevoked(send.tenant, mayHaveReachedAPNs: error.mayHaveReachedAPNs)
            return settle(send, outcome: .failure(revoked), runtime: runtime, resends: resends)
        }
        // Settled as it came (a copy would retain each of the answer's strings).
        settle(send, outcome: consume outcome, runtime: runtime, resends: resends)
    }

    /// An attempt's answer, as the router reports it: made again, or counted and handed over.
    private func settle(_ send: RoutedSend, outcome: consuming Result<PushResult, any Error>, runtime: TenantRuntime, resends: Resends) {
        switch resend(send, after: outcome, resends: resends, policy: runtime.retryPolicy) {
        case .now(let next):
            send.attempt(next)
        case .after(let wait, let next):
            let clock = configuration.clock
            Task {
                try? await clock.sleep(until: clock.now.advanced(by: wait))
                send.attempt(next)
            }
        case .no:
            // The router decides a single send's last attempt, so it counts the send, accepted
            // and its outcome together when it ends; a batch item was counted accepted when its
            // job was stored, and its outcome is counted by the job runner, which decides its
            // resends. A send for no tenant is refused, not counted.
            let now = configuration.clock.date
            if send.retries { runtime.usage.addSingleSend(outcome, at: now) }
            switch outcome {
            case .success(let result):
                runtime.lastHour.record(at: now, failed: result.response.status != 200)
            case .failure(let error) where !(error is CancellationError):
                runtime.lastHour.record(at: now, failed: true)
            case .failure:
                break
            }
            send.completion(consume outcome)
        }
    }

    /// The resend policy of single sends, in one place:
    /// - a runtime swapped out between lookup and send (`ShuttingDown`: nothing was sent) is
    ///   passed by at once, up to three runtimes in all;
    /// - a send cut off by a credential revocation (`CredentialRevoked`) is made once more, at
    ///   once, on the new credential;
    /// - a send APNs answered 403 `ExpiredProviderToken` is made once more, at once: the
    ///   transport has told the credential, so it goes with a fresh token, and APNs did not
    ///   accept the first attempt, so it cannot arrive twice (also for a caller that retries
    ///   itself);
    /// - otherwise the tenant's ``HeraldCore/ResendRule`` for single sends decides (what a batch
    ///   item's policy calls transient, and a full queue, after the `retry` entry's backoff, up to
    ///   its attempts), never past the deadline.
    ///
    /// A caller that retries itself (`retries` false: a batch item, under its tenant's delivery
    /// policy) gets only the first two: at-most-once must not resend what may have reached APNs.
    private func resend(_ send: RoutedSend, after outcome: Result<PushResult, any Error>, resends: Resends, policy: RetryPolicy)
        -> Resend
    {
        var next = resends
        switch outcome {
        case .success(let result) where result.isSuccess:
            return .no
        case .success(let result) where result.status == 403 && result.reason == .expiredProviderToken:
            guard !resends.resentAfterExpiredToken else { return .no }
            next.resentAfterExpiredToken = true
            next.attempt += 1
            configuration.logger.debug(
                "resending with a fresh provider token", metadata: ["herald.tenant": "\(send.tenant)", "herald.apns-id": "\(send.id)"])
            return .now(next)
        case .success:
            break
        case .failure(let error as PushError) where error.code == .shuttingDown:
            next.swaps += 1
            return next.swaps < 3 ? .now(next) : .no
        case .failure(let error as PushError) where error.code == .credentialRevoked:
            guard send.retries, !resends.resentAfterRevocation else { return .no }
            next.resentAfterRevocation = true
            next.attempt += 1
            configuration.logger.debug(
                "resending after credential revocation",
                metadata: [
                    "herald.tenant": "\(send.tenant)", "herald.apns-id": "\(send.id)",
                    "herald.may-have-reached-apns": "\(error.mayHaveReachedAPNs)",
                ])
            return .now(next)
        case .failure:
            break
        }
        guard send.retries else { return .no }
        let classified: DeliveryOutcome
        var retryAfter: Duration? = nil
        switch outcome {
        case .success(let result):
            classified = DeliveryOutcome(result.response)
            retryAfter = result.response.retryAfter
        case .failure(let error): classified = DeliveryOutcome(error)
        }
        let rule = ResendRule.singleSend(policy: policy)
        guard case .again(let wait) = rule.decide(classified, attempts: resends.attempt, retryAfter: retryAfter) else {
            return .no
        }
        let what: String
        switch outcome {
        case .success(let result): what = result.reason?.wireValue ?? String(result.status)
        case .failure(let error): what = (error as? PushError)?.code.description ?? "error"
        }
        let metadata: Logger.Metadata = [
            "herald.tenant": "\(send.tenant)", "herald.apns-id": "\(send.id)", "herald.attempt": "\(resends.attempt)",
            "herald.outcome": "\(what)",
        ]
        guard configuration.clock.now.advanced(by: wait) < send.deadline else {
            configuration.logger.debug("not retrying: the backoff would pass the deadline", metadata: metadata)
            return .no
        }
        configuration.logger.debug(
            "retrying", metadata: metadata.merging(["herald.backoff-ms": "\(Int(wait.secondsValue * 1000))"]) { $1 })
        next.attempt += 1
        return .after(wait, next)
    }

    /// Closes every runtime (draining in-flight sends) and waits for plugin work (webhooks).
    public func shutdown() async {
        let all = runtimes.withLock { state -> [TenantRuntime] in
            defer { state = Runtimes() }
            return Array(state.byTenant.values)
        }
        await withTaskGroup(of: Void.self) { group in
            for runtime in all { group.addTask { await runtime.shutdown() } }
        }
        await tasks.waitForAll()
    }

    /// The installed runtimes, by tenant, and the one a send looked up last: sends of one tenant
    /// tend to come together, and comparing two tenant IDs costs less than hashing one.
    private struct Runtimes {
        var byTenant: [TenantID: TenantRuntime] = [:]
        var last: TenantRuntime?

        mutating func runtime(for tenant: TenantID) -> TenantRuntime? {
            if let last, last.id == tenant { return last }
            guard let found = byTenant[tenant] else { return nil }
            last = found
            return found
        }

        /// Installs `runtime` for its tenant; returns the one it replaced.
        mutating func install(_ runtime: TenantRuntime) -> TenantRuntime? {
            last = runtime
            return byTenant.updateValue(runtime, forKey: runtime.id)
        }

        mutating func remove(_ tenant: TenantID) -> TenantRuntime? {
            if let last, last.id == tenant { self.last = nil }
            return byTenant.removeValue(forKey: tenant)
        }
    }

    static func directory(of file: String) -> String {
        guard let slash = file.lastIndex(of: "/") else { return "." }
        return slash == file.startIndex ? "/" : String(file[..<slash])
    }
}

/// What loading tenants did: the tenants that loaded and the files that failed, with why.
public struct TenantLoadReport: Sendable, Hashable {
    public struct Failure: Sendable, Hashable, CustomStringConvertible {
        public var file: String
        public var tenant: TenantID?
        /// The errors, one per line, each naming file:line:column and the field.
        public var message: String
        public var description: String { message }
    }

    public var loaded: [TenantID] = []
    public var failures: [Failure] = []

    public init() {}
}
