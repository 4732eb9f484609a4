import APNsSandbox
import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldPostgres
import HeraldStore
import Logging
import Metrics
import NIOCore
import HeraldServer
import Prometheus
import ServiceLifecycle
import UnixSignals

/// What ``HeraldProcess`` is built from: `config/herald.yaml` plus what a process provides.
public struct HeraldProcessOptions: Sendable {
    /// Listen address, directories, API limits, job runner, sandbox.
    public var configuration: ServerConfiguration
    /// The admin token (nil or empty: the `/admin` routes answer 404). ``init(configuration:environment:)``
    /// reads it from the variable `api.admin_token_env` names.
    public var adminToken: String?
    /// What `/metrics` renders. `herald serve` also bootstraps swift-metrics with it.
    public var metrics: PrometheusCollectorRegistry = PrometheusCollectorRegistry()
    /// The metrics backend of the `metrics` plugin (nil: `MetricsSystem`'s).
    public var pluginMetricsFactory: (any MetricsFactory)?
    /// Makes the tenants' APNs transports.
    public var transports: any TransportProvider = APNsTransportProvider()
    public var logger: Logger = Logger(label: "herald")
    /// Where `env:` references of tenant files are read from.
    public var environment: [String: String]
    /// The job runner, from `jobs:` (tests shorten `rescanInterval`).
    public var jobs: JobRunnerConfiguration
    /// Poll the tenants directory this often and reload what changed; nil: no watcher.
    /// `herald serve` watches every 2 seconds.
    public var watchInterval: Duration? = nil
    /// Posts the plugins' webhooks (tests put a recording sender here).
    public var webhooks: any WebhookSender = HTTPWebhookSender.shared
    /// Time between two passes of store upkeep (expired jobs deleted, WAL checkpointed).
    public var maintenanceInterval: Duration = .seconds(600)
    /// How often the usage counted in memory is written to the store.
    public var usageFlushInterval: Duration = .seconds(10)
    /// This instance's heartbeat in the store's instance registry, and how old another
    /// instance's heartbeat may get before it is taken for dead (its leases released).
    public var heartbeat = InstanceHeartbeat.Configuration()
    /// Reload every tenant on SIGHUP. `herald serve` turns it on.
    public var reloadOnSIGHUP: Bool = false
    /// The clock the shared store's `call_timeout` is measured on; nil: the store's own (the
    /// system's). Tests step one.
    public var storeClock: (any PushClock)?

    public init(configuration: ServerConfiguration, environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.configuration = configuration
        self.environment = environment
        self.adminToken = environment[configuration.api.adminTokenVariable].flatMap { $0.isEmpty ? nil : $0 }
        var jobs = JobRunnerConfiguration()
        jobs.concurrencyPerTenant = configuration.jobs.concurrencyPerTenant
        jobs.claimSize = configuration.jobs.claimSize
        jobs.drivesOnConnectionLoop = configuration.jobs.onConnectionLoop
        jobs.lease = .milliseconds(Int64(configuration.jobs.lease * 1000))
        jobs.claimant = configuration.jobs.claimant
        jobs.jobsPerTenant = configuration.jobs.jobsPerTenant
        if case .postgres = configuration.storage { jobs.exclusiveStore = false }
        self.jobs = jobs
        heartbeat = InstanceHeartbeat.Configuration(
            interval: .milliseconds(Int64(configuration.jobs.heartbeatInterval * 1000)),
            timeout: .milliseconds(Int64(configuration.jobs.instanceTimeout * 1000)))
    }

    /// Makes swift-metrics report to ``metrics`` (what `/metrics` renders): the `metrics` plugin,
    /// Hummingbird's request metrics and every library that uses `MetricsSystem`. Call it once
    /// per process, before ``HeraldProcess/start(_:)``.
    public func bootstrapMetricsSystem() {
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics))
    }

    /// Points the `metrics` plugin at ``metrics`` without touching the process-wide
    /// `MetricsSystem` (for tests and embedding, where bootstrapping is not ours to do).
    public mutating func reportPluginMetricsToRegistry() {
        pluginMetricsFactory = PrometheusMetricsFactory(registry: metrics)
    }
}

/// A tenant file that did not load (at start or at the last reload).
public struct TenantFailure: Sendable, Hashable {
    public var file: String
    public var tenant: TenantID?
    /// The errors, one per line, naming file:line:column and the field.
    public var message: String

    public init(file: String, tenant: TenantID?, message: String) {
        self.file = file
        self.tenant = tenant
        self.message = message
    }
}

/// Why the process could not start.
public struct HeraldProcessError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}


/// The whole platform in one process, assembled in one place: the store, the router with every
/// tenant, the job runner, the webhook outbox, the instance's heartbeat, the HTTP API
/// (``APIServer``) and, when configured, an APNsSandbox.
///
/// ```swift
/// let process = try await HeraldProcess.start(HeraldProcessOptions(configuration: try .load()))
/// try await process.run()      // until SIGTERM or SIGINT; then a graceful shutdown
/// ```
///
/// Each part is a swift-service-lifecycle `Service` of one `ServiceGroup`. On graceful shutdown
/// they stop in this order: readiness turns false; the HTTP listener stops accepting and finishes
/// the requests in flight (a send waits for APNs' answer); the job runner sends nothing new, lets
/// the sends on the wire finish and records them (the rest stays pending in the store); the
/// heartbeat releases this instance's leases; the router drains every tenant's connections; the
/// outbox posts what is in flight; the store closes; the sandbox stops last. A shutdown that
/// outlasts `shutdown_timeout` (25 s) cancels what still runs, e.g. a store call that gets no
/// answer.
public final class HeraldProcess: Sendable {
    public let options: HeraldProcessOptions
    public let router: Herald.Router
    /// The store everything lives in (jobs, results, invalid tokens, reports, provider tokens,
    /// the webhook outbox, the instance registry): the SQLite file at `storage_path`, or the
    /// PostgreSQL database every instance shares (`storage.postgres`; then no SQLite file is
    /// opened).
    public let sharedStore: any ServerStore
    /// Closes the shared store's connections when the process stops (nothing for SQLite).
    let closeSharedStore: @Sendable () async -> Void
    public let runner: JobRunner
    public let health: TenantHealthRegistry
    /// Reloads and credential rotation (admin routes, SIGHUP, the directory watcher).
    public let reloader: ReloadCoordinator
    /// The in-process sandbox, when `sandbox.enabled`.
    public let sandbox: APNsSandbox?
    /// The tenants that loaded at start and the files that did not.
    public let loadedTenants: [TenantID]
    public let loadFailures: [TenantFailure]
    /// The HTTP API and the console.
    public let api: APIServer
    /// SQLite only, held for the process's life: a second process on the same file refuses to
    /// start. (On PostgreSQL several instances share the store: that is the point.)
    let storeLock: StoreLock?
    /// This instance's id (unique per process; in every claimant name, `<claimant>/<id>`).
    public var instanceID: String { options.jobs.instance }
    /// This instance's row in the instance registry.
    public let heartbeat: InstanceHeartbeat
    /// Open once this instance listens for the other instances' notifications (at once on SQLite,
    /// which has none).
    let peerListening = OneShotGate()
    /// The plugins' webhooks, stored until posted.
    public let outbox: WebhookOutbox
    /// Certificate expiry and key age per tenant (gauges, warnings, the tenant's webhook).
    public let credentialHealth: CredentialHealthMonitor

    /// Returns once this instance listens for other instances' notifications (new jobs, tenant
    /// changes): at once on SQLite; on PostgreSQL after the services started and LISTEN is done.
    public func waitUntilListeningForPeers() async {
        if !(sharedStore is any StoreNotifier) { return }
        await peerListening.wait()
    }

    private init(
        options: HeraldProcessOptions, opened: Opened, store: any ServerStore, router: Herald.Router, runner: JobRunner,
        health: TenantHealthRegistry, reloader: ReloadCoordinator, report: ReloadReport, api: APIServer,
        heartbeat: InstanceHeartbeat, outbox: WebhookOutbox, credentialHealth: CredentialHealthMonitor
    ) {
        self.options = options
        self.router = router
        sharedStore = store
        closeSharedStore = opened.closeStore
        self.runner = runner
        self.health = health
        self.reloader = reloader
        sandbox = opened.sandbox
        loadedTenants = report.added
        loadFailures = report.failures.map { TenantFailure(file: $0.file, tenant: $0.tenant, message: $0.message) }
        self.api = api
        storeLock = opened.storeLock
        self.heartbeat = heartbeat
        self.outbox = outbox
        self.credentialHealth = credentialHealth
    }

    /// What ``start(_:)`` has opened so far: on a failure it is closed again, in reverse order.
    private struct Opened {
        var storeLock: StoreLock?
        var sandbox: APNsSandbox?
        var closeStore: @Sendable () async -> Void = {}

        func undo() async {
            await closeStore()
            try? await sandbox?.shutdown()
            storeLock?.release()
        }
    }

    /// Starts the sandbox (if enabled), opens the store, loads the tenants and builds every part.
    /// Nothing listens for API requests until ``run(gracefulShutdownSignals:onListening:)`` (or
    /// ``serviceGroup(gracefulShutdownSignals:onListening:)``).
    public static func start(_ options: HeraldProcessOptions) async throws -> HeraldProcess {
        var logger = options.logger
        logger[metadataKey: "herald.instance"] = "\(options.jobs.instance)"
        logger.info(
            "herald instance starting",
            metadata: ["herald.claimant": "\(options.jobs.claimantName)", "herald.pid": "\(ProcessInfo.processInfo.processIdentifier)"])
        var opened = Opened()
        do {
            return try await assemble(&opened, options: options, logger: logger)
        } catch {
            await opened.undo()
            throw error
        }
    }

    private static func assemble(_ opened: inout Opened, options: HeraldProcessOptions, logger: Logger) async throws
        -> HeraldProcess
    {
        let configuration = options.configuration
        // Before anything else (the sandbox, the store, any send): one process per SQLite file.
        let directory = (configuration.storagePath as NSString).deletingLastPathComponent
        if case .sqlite = configuration.storage {
            do {
                if !directory.isEmpty {
                    try SQLitePushStore.createPrivateDirectory(directory)
                }
                opened.storeLock = try StoreLock(databasePath: configuration.storagePath)
            } catch {
                throw HeraldProcessError(message: "cannot start: \(error)")
            }
        }

        if configuration.sandbox.enabled {
            do {
                let file = try SandboxConfigFile.load(path: configuration.sandbox.configFile)
                var sandboxLogger = logger
                sandboxLogger[metadataKey: "herald.component"] = "sandbox"
                opened.sandbox = try await APNsSandbox.start(file.configuration, logger: sandboxLogger)
            } catch {
                throw HeraldProcessError(message: "cannot start the sandbox (\(configuration.sandbox.configFile)): \(error)")
            }
        }

        let store: any ServerStore
        switch configuration.storage {
        case .sqlite:
            do {
                store = try SQLitePushStore(path: configuration.storagePath)
            } catch {
                throw HeraldProcessError(message: "cannot open the store \(configuration.storagePath): \(error)")
            }
            for path in [directory.isEmpty ? "." : directory, configuration.storagePath] {
                if let mode = FilePermissions.groupOrOthersMode(path) {
                    logger.warning(
                        "the store can be read by group or others; it holds device tokens and payloads",
                        metadata: ["herald.path": "\(path)", "herald.mode": "\(mode)"])
                }
            }
        case .postgres(let settings):
            let postgres = try await openPostgres(settings, clock: options.storeClock, logger: logger)
            store = postgres
            opened.closeStore = { await postgres.close() }
        }
        // Provider tokens go through the shared store: one token per key for every instance on one
        // PostgreSQL database, and kept across restarts on either backend.
        // On PostgreSQL, sends do not wait long on the store for them (``SendPathLookups``), nor
        // for the `feedback` plugin's lookups: one bound and one cooldown for both. SQLite's
        // reads are local: nothing to bound.
        var sendPathLookups: SendPathLookups? = nil
        if case .postgres(let settings) = configuration.storage {
            sendPathLookups = SendPathLookups(
                timeout: min(SendPathLookups.standardTimeout, .seconds(settings.callTimeout)), logger: logger)
        }
        var transports = options.transports
        if var apns = transports as? APNsTransportProvider {
            if let tokens = store as? any ProviderTokenStore {
                apns.tokenStore = sendPathLookups.map { GatedProviderTokens(tokens, lookups: $0) } ?? tokens
            }
            apns.defaultProxy = configuration.proxy
            transports = apns
        }

        var outboxConfiguration = WebhookOutbox.Configuration()
        outboxConfiguration.senders = configuration.jobs.webhookSenders
        outboxConfiguration.maxPerTenant = configuration.jobs.webhookOutboxPerTenant
        outboxConfiguration.exclusive = options.jobs.exclusiveStore
        // `webhooks.proxy`: the posts of the default sender leave through it.
        var webhookSender = options.webhooks
        if let proxy = configuration.webhookProxy, webhookSender is HTTPWebhookSender {
            webhookSender = HTTPWebhookSender(proxy: proxy)
        }
        let outbox = WebhookOutbox(store: store, sender: webhookSender, configuration: outboxConfiguration, logger: logger)
        do {
            try await outbox.prepare()
        } catch {
            throw HeraldProcessError(message: "cannot read the webhook outbox: \(error)")
        }

        var routerConfiguration = RouterConfiguration(
            registry: .standard(metricsFactory: options.pluginMetricsFactory), store: store,
            transports: transports, logger: logger,
            webhooks: webhookSender, environment: options.environment, webhookQueue: outbox,
            sendPathLookups: sendPathLookups)
        routerConfiguration.countUsage = configuration.api.countUsage
        let router = Herald.Router(configuration: routerConfiguration)
        let clock = router.configuration.clock
        let health = TenantHealthRegistry(router: router)
        // Every tenant is validated in full (credential, TLS, plugins) before it serves.
        var reloadConfiguration = ReloadConfiguration(tenantsDirectory: configuration.tenantsDirectory)
        reloadConfiguration.metricsFactory = options.pluginMetricsFactory
        let reloader = ReloadCoordinator(router: router, configuration: reloadConfiguration)
        let report: ReloadReport
        do {
            report = try await reloader.reloadAll(trigger: .startup)
        } catch {
            throw HeraldProcessError(message: "cannot read the tenants directory: \(error)")
        }
        logger.info(
            "tenants loaded", metadata: ["herald.tenants": "\(report.added.count)", "herald.failed": "\(report.failures.count)"])

        let jobEvents = TenantWebhookJobNotifier(router: router, queue: outbox, store: store, logger: logger)
        let runner = JobRunner(router: router, store: store, configuration: options.jobs, logger: logger, jobEnded: jobEvents)
        let heartbeat = InstanceHeartbeat(
            registry: store, instance: InstanceHeartbeat.record(for: options.jobs, startedAt: clock.date),
            runner: runner, configuration: options.heartbeat, clock: clock, logger: logger)
        do {
            try await heartbeat.register()
        } catch {
            throw HeraldProcessError(message: "cannot register this instance in the store: \(error)")
        }
        let credentialHealth = CredentialHealthMonitor(
            router: router, timer: clock, metricsFactory: options.pluginMetricsFactory,
            notifier: TenantWebhookExpiryNotifier(queue: outbox, logger: logger),
            logger: logger)
        let api: APIServer
        do {
            api = try await APIServer(
                APIServer.Parts(
                    router: router, store: store, runner: runner, health: health, reloader: reloader,
                    credentialHealth: credentialHealth,
                    instances: InstanceDirectory(registry: store, instance: options.jobs.instance, timeout: options.heartbeat.timeout),
                    jobEnded: jobEvents, metrics: options.metrics),
                configuration: configuration, adminToken: options.adminToken,
                maxUploadBytes: reloadConfiguration.maximumUploadBytes, logger: logger)
        } catch {
            throw HeraldProcessError(message: "\(error)")
        }
        let notifier = store as? any StoreNotifier
        let instance = options.jobs.instance
        // API keys follow each swap; resumed jobs of new tenants start. A change made through this
        // instance's admin API is told to the other instances (they read the tenants directory again).
        reloader.onChange { report in
            api.tenantsChanged()
            if report.changedRuntimes { runner.rescan() }
            if let notifier, report.trigger == .api || report.trigger == .upload {
                PeerNotifications.tellTenantsChanged(notifier, instance: instance, revoked: !report.revoked.isEmpty, logger: logger)
            }
        }
        return HeraldProcess(
            options: options, opened: opened, store: store, router: router, runner: runner, health: health,
            reloader: reloader, report: report, api: api, heartbeat: heartbeat, outbox: outbox,
            credentialHealth: credentialHealth)
    }

    /// Opens the shared PostgreSQL store (`storage.postgres`), migrated under an advisory lock.
    /// - Parameter clock: what the store's `call_timeout` is measured on; nil: the store's own.
    public static func openPostgres(
        _ settings: ServerConfiguration.PostgresSettings, clock: (any PushClock)? = nil, logger: Logger
    ) async throws -> PostgresPushStore {
        var storeLogger = logger
        storeLogger[metadataKey: "herald.component"] = "store"
        var configuration = PostgresPushStore.Configuration(
            host: settings.host, port: settings.port, username: settings.username,
            password: settings.password?.text, database: settings.database, schema: settings.schema,
            poolSize: settings.poolSize, requireTLS: settings.tls,
            callTimeout: .milliseconds(Int64(settings.callTimeout * 1000)))
        if let clock { configuration.clock = clock }
        do {
            let store = try await PostgresPushStore.open(configuration, logger: storeLogger)
            logger.info(
                "shared store opened",
                metadata: ["herald.store": "\(settings.displayName)", "herald.pool_size": "\(settings.poolSize)"])
            return store
        } catch {
            throw HeraldProcessError(message: "cannot open the store (\(settings.displayName)): \(error)")
        }
    }

    /// The services of the process, in start order (they stop in the reverse order).
    /// - Parameter onListening: called once the API listens, with its host and port.
    public func services(onListening: @escaping @Sendable (String, Int) async -> Void = { _, _ in }) -> [any Service] {
        let listening = OneShotGate()
        var services: [any Service] = [api.shutdownTimeoutNotice()]
        if let sandbox { services.append(SandboxService(sandbox: sandbox)) }
        // Closed after the runner and the router stopped using it (services stop in reverse order).
        services.append(StoreService(close: closeSharedStore, lock: storeLock))
        // Stops after every sender and before the store closes: the last usage counts are written.
        services.append(
            UsageFlusher(
                meter: router.usage, ledger: sharedStore, interval: options.usageFlushInterval, clock: router.configuration.clock,
                logger: options.logger))
        services.append(WebhookOutboxService(outbox: outbox))
        services.append(RouterService(router: router))
        // Stops after the runner (services stop in reverse order): the leases left are released then.
        services.append(InstanceHeartbeatService(heartbeat: heartbeat))
        services.append(JobRunnerService(runner: runner, listening: listening))
        if let notifier = sharedStore as? any StoreNotifier {
            services.append(
                PeerNotificationService(
                    notifier: notifier, instance: instanceID, runner: runner, reloader: reloader, listening: peerListening,
                    logger: options.logger))
        }
        services.append(
            StoreMaintenanceService(
                maintenance: StoreMaintenance(
                    store: sharedStore, retention: .milliseconds(Int64(options.configuration.jobs.retention * 1000)),
                    audit: (sharedStore, .milliseconds(Int64(options.configuration.api.auditRetention * 1000))),
                    usage: (sharedStore, .milliseconds(Int64(options.configuration.api.usageRetention * 1000))),
                    interval: options.maintenanceInterval, clock: router.configuration.clock, logger: options.logger)))
        if let interval = options.watchInterval {
            services.append(TenantDirectoryWatcher(coordinator: reloader, interval: interval, clock: router.configuration.clock))
        }
        if options.reloadOnSIGHUP { services.append(ReloadSignalService(coordinator: reloader)) }
        services.append(credentialHealth)
        services.append(
            api.listener { host, port in
                // The job runner starts only now: a process that could not bind sends nothing.
                listening.open()
                await onListening(host, port)
            })
        services.append(api.readiness())
        return services
    }

    /// Runs every service until one of `gracefulShutdownSignals` arrives, then shuts down gracefully.
    public func run(
        gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint],
        onListening: @escaping @Sendable (String, Int) async -> Void = { _, _ in }
    ) async throws {
        try await serviceGroup(gracefulShutdownSignals: gracefulShutdownSignals, onListening: onListening).run()
    }

    /// The group of ``services(onListening:)``: a graceful shutdown that outlasts `shutdown_timeout`
    /// turns into cancellation of what still runs. The job runner's sends then end without
    /// their outcome where the store does not answer: those items stay leased to this
    /// instance and are sent again (by its next start at once, or by another instance once this
    /// one's heartbeat is taken for dead or the lease ends), so none is lost.
    public func serviceGroup(
        gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint],
        onListening: @escaping @Sendable (String, Int) async -> Void = { _, _ in }
    ) -> ServiceGroup {
        var configuration = ServiceGroupConfiguration(
            services: services(onListening: onListening), gracefulShutdownSignals: gracefulShutdownSignals,
            logger: options.logger)
        configuration.maximumGracefulShutdownDuration = .milliseconds(Int64(options.configuration.shutdownTimeout * 1000))
        return ServiceGroup(configuration: configuration)
    }
}
