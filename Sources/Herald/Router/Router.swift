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
/// API, the CLI and the job runner all send through ``send(tenant:notification:environment:deadline:)``.
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
    private let runtimes = Mutex<[TenantID: TenantRuntime]>([:])
    /// apns-ids for sends that bring none (``apnsID(for:)``): one seeded sequence for every
    /// tenant, behind a lock held for two words and a 36-byte format.
    private let idGenerator = Mutex(NotificationIDGenerator())

    public init(configuration: RouterConfiguration) {
        self.configuration = configuration
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
        let tenantTokens = TenantInvalidTokens(tenant: tenant.id, store: configuration.store)
        let invalidTokens: any InvalidTokenRecorder =
            configuration.sendPathLookups.map { GatedInvalidTokens(base: tenantTokens, lookups: $0) } ?? tenantTokens
        let secrets = FileSecretResolver(baseDirectory: Self.directory(of: tenant.sourceFile), environment: configuration.environment)
        let middlewares = try configuration.registry.makeMiddlewares(
            for: tenant,
            environment: { entry in
                var entryLogger = pushLogger
                entryLogger[metadataKey: "herald.plugin"] = entry.name
                return PluginEnvironment(
                    tenant: tenant.id, topics: tenant.topics, tenantFile: tenant.sourceFile, location: entry.location,
                    logger: entryLogger, clock: configuration.clock, invalidTokens: invalidTokens,
                    webhooks: configuration.webhooks, tasks: tasks, secrets: secrets,
                    webhookQueue: configuration.webhookQueue, webhook: tenant.webhook)
            },
            clock: configuration.clock)
        let transport = try configuration.transports.makeTransport(for: tenant, logger: logger)
        return TenantRuntime(
            configuration: tenant, middlewares: middlewares, transport: transport, clock: configuration.clock,
            logger: logger, defaultDeadline: configuration.defaultDeadline)
    }

    // MARK: Swapping runtimes

    /// Installs a runtime, replacing the tenant's current one, which then drains and closes.
    public func replace(_ runtime: TenantRuntime) async {
        let old = runtimes.withLock { $0.updateValue(runtime, forKey: runtime.id) }
        if let old, old !== runtime { await old.shutdown() }
    }

    /// Builds and installs a runtime for a new or changed tenant configuration.
    /// - Throws: as ``makeRuntime(for:)``; the current runtime, if any, stays.
    public func replace(tenant: TenantConfiguration) async throws {
        await replace(try makeRuntime(for: tenant))
    }

    /// Removes a tenant; its runtime drains and closes.
    public func remove(tenant: TenantID) async {
        let old = runtimes.withLock { $0.removeValue(forKey: tenant) }
        circuits.retain(tenants: Set(tenantIDs))
        lastHour.retain(tenants: Set(tenantIDs))
        await old?.shutdown()
    }

    /// Installs a runtime and returns the one it replaced, still running: the caller shuts it
    /// down (``TenantRuntime/shutdown()`` to drain, ``TenantRuntime/revoke()`` to cut). Sends
    /// that look the tenant up after this call get the new runtime. Used by reloads, which swap
    /// every changed tenant first and drain the old runtimes together afterwards.
    public func exchange(_ runtime: TenantRuntime) -> TenantRuntime? {
        let old = runtimes.withLock { $0.updateValue(runtime, forKey: runtime.id) }
        return old === runtime ? nil : old
    }

    /// Takes a tenant out and returns its runtime, still running, for the caller to shut down.
    /// Sends that look the tenant up after this call fail with `UnknownTenant`.
    public func detach(tenant: TenantID) -> TenantRuntime? {
        let old = runtimes.withLock { $0.removeValue(forKey: tenant) }
        circuits.retain(tenants: Set(tenantIDs))
        lastHour.retain(tenants: Set(tenantIDs))
        return old
    }

    public func runtime(for tenant: TenantID) -> TenantRuntime? {
        runtimes.withLock { $0[tenant] }
    }

    /// The loaded tenants, sorted.
    public var tenantIDs: [TenantID] {
        runtimes.withLock { Array($0.keys) }.sorted()
    }

    // MARK: Sending

    /// Sends one notification for a tenant. The one entry point of the API, the CLI and the job runner.
    ///
    /// - Parameters:
    ///   - environment: nil: the tenant's default environment.
    ///   - deadline: nil: ``RouterConfiguration/defaultDeadline`` from now.
    ///   - retriesInPipeline: false when the caller retries the notification itself (the job
    ///     runner, under the tenant's delivery policy): the pipeline's retry makes one attempt.
    /// - Returns: APNs' answer (a success or APNs' rejection, with its reason).
    /// - Throws: ``PushError`` for local refusals (unknown tenant, `TopicDisallowed`, push type vs
    ///   topic, no endpoint, invalid notification, rate limit, refused token) and for failures
    ///   without an APNs answer.
    nonisolated(nonsending) public func send(
        tenant: TenantID, notification: HeraldCore.Notification, environment: APNsEnvironment? = nil,
        deadline: ContinuousClock.Instant? = nil, retriesInPipeline: Bool = true
    ) async throws -> PushResult {
        // One apns-id for every attempt, so that a resend on a new runtime is recognisably the same notification.
        let id = apnsID(for: notification)
        var attempt = 0
        var resentAfterRevocation = false
        while true {
            attempt += 1
            guard let runtime = runtime(for: tenant) else { throw PushError.unknownTenant(tenant.rawValue) }
            do {
                let result = try await runtime.send(
                    notification, id: id, environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline)
                lastHour.record(tenant, at: configuration.clock.date, failed: result.response.status != 200)
                return result
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                if shouldResend(
                    tenant: tenant, id: id, after: error, attempt: attempt, retriesInPipeline: retriesInPipeline,
                    resentAfterRevocation: &resentAfterRevocation)
                {
                    continue
                }
                lastHour.record(tenant, at: configuration.clock.date, failed: true)
                throw error
            }
        }
    }

    /// The apns-id a send goes with: the caller's, or a new one. The one place a single send gets
    /// its apns-id (a batch item has its own from the store since the POST); the runtime, the
    /// pipeline and the transport take it as given.
    private func apnsID(for notification: HeraldCore.Notification) -> NotificationID {
        notification.id ?? idGenerator.withLock { $0.nextID() }
    }

    /// True when a send that failed with `error` is made again on the tenant's runtime: one
    /// swapped out between lookup and send (nothing was sent; up to three attempts), or one whose
    /// credential was revoked under it with no answer (once, on the new credential), when the caller does
    /// not retry the send itself.
    private func shouldResend(
        tenant: TenantID, id: NotificationID, after error: any Error, attempt: Int, retriesInPipeline: Bool,
        resentAfterRevocation: inout Bool
    ) -> Bool {
        guard let error = error as? PushError else { return false }
        if error.code == .shuttingDown { return attempt < 3 }
        // A caller that retries itself (a batch item, under its tenant's delivery policy) decides:
        // at-most-once must not resend what may have reached APNs.
        guard error.code == .credentialRevoked, retriesInPipeline, !resentAfterRevocation else { return false }
        resentAfterRevocation = true
        configuration.logger.debug(
            "resending after credential revocation",
            metadata: [
                "herald.tenant": "\(tenant)", "herald.apns-id": "\(id)",
                "herald.may-have-reached-apns": "\(error.mayHaveReachedAPNs)",
            ])
        return true
    }

    /// Sends one notification as ``send(tenant:notification:environment:deadline:retriesInPipeline:)``
    /// does (the same resends and counts) and calls `completion` exactly once with the result or
    /// the error. When the tenant's runtime sends by callback
    /// (``TenantRuntime/startsSendsByCallback``) no task is made: `completion` then runs on a
    /// connection's event loop and must not block. For callers that keep many sends in flight
    /// under their own bound (the job runner's permits).
    public func startSend(
        tenant: TenantID, notification: HeraldCore.Notification, environment: APNsEnvironment? = nil,
        deadline: ContinuousClock.Instant? = nil, retriesInPipeline: Bool = true,
        completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        startAttempt(
            1, resentAfterRevocation: false, tenant: tenant, notification: notification, id: apnsID(for: notification),
            environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline, completion: completion)
    }

    private func startAttempt(
        _ attempt: Int, resentAfterRevocation: Bool, tenant: TenantID, notification: HeraldCore.Notification, id: NotificationID,
        environment: APNsEnvironment?, deadline: ContinuousClock.Instant?, retriesInPipeline: Bool,
        completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        guard let runtime = runtime(for: tenant) else {
            completion(.failure(PushError.unknownTenant(tenant.rawValue)))
            return
        }
        runtime.startSend(
            notification, id: id, environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline
        ) { outcome in
            switch outcome {
            case .success(let result):
                self.lastHour.record(tenant, at: self.configuration.clock.date, failed: result.response.status != 200)
                completion(.success(result))
            case .failure(let error) where error is CancellationError:
                completion(.failure(CancellationError()))
            case .failure(let error):
                var resent = resentAfterRevocation
                if self.shouldResend(
                    tenant: tenant, id: id, after: error, attempt: attempt, retriesInPipeline: retriesInPipeline,
                    resentAfterRevocation: &resent)
                {
                    self.startAttempt(
                        attempt + 1, resentAfterRevocation: resent, tenant: tenant, notification: notification, id: id,
                        environment: environment, deadline: deadline, retriesInPipeline: retriesInPipeline, completion: completion)
                    return
                }
                self.lastHour.record(tenant, at: self.configuration.clock.date, failed: true)
                completion(.failure(error))
            }
        }
    }

    /// Closes every runtime (draining in-flight sends) and waits for plugin work (webhooks).
    public func shutdown() async {
        let all = runtimes.withLock { state -> [TenantRuntime] in
            defer { state.removeAll() }
            return Array(state.values)
        }
        await withTaskGroup(of: Void.self) { group in
            for runtime in all { group.addTask { await runtime.shutdown() } }
        }
        await tasks.waitForAll()
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
