import APNsSandbox
import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldPostgres
import HeraldStore
import Hummingbird
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import UnixSignals

/// What ``HeraldServer`` is built from: `config/herald.yaml` plus what a process provides.
public struct HeraldServerOptions: Sendable {
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
    /// Reload every tenant on SIGHUP. `herald serve` turns it on.
    public var reloadOnSIGHUP: Bool = false

    public init(configuration: ServerConfiguration, environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.configuration = configuration
        self.environment = environment
        self.adminToken = environment[configuration.api.adminTokenVariable].flatMap { $0.isEmpty ? nil : $0 }
        var jobs = JobRunnerConfiguration()
        jobs.concurrencyPerTenant = configuration.jobs.concurrencyPerTenant
        jobs.claimSize = configuration.jobs.claimSize
        jobs.lease = .milliseconds(Int64(configuration.jobs.lease * 1000))
        jobs.claimant = configuration.jobs.claimant
        self.jobs = jobs
    }

    /// Makes swift-metrics report to ``metrics`` (what `/metrics` renders): the `metrics` plugin,
    /// Hummingbird's request metrics and every library that uses `MetricsSystem`. Call it once
    /// per process, before ``HeraldServer/start(_:)``.
    public func bootstrapMetricsSystem() {
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics))
    }

    /// Points the `metrics` plugin at ``metrics`` without touching the process-wide
    /// `MetricsSystem` (for tests and embedding, where bootstrapping is not ours to do).
    public mutating func reportPluginMetricsToRegistry() {
        pluginMetricsFactory = PrometheusMetricsFactory(registry: metrics)
    }
}

/// Why the server could not start.
public struct HeraldServerError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// The whole platform in one process: the HTTP API (Hummingbird), the router with every tenant,
/// the durable store, the job runner and, when configured, an APNsSandbox.
///
/// ```swift
/// let server = try await HeraldServer.start(HeraldServerOptions(configuration: try .load()))
/// try await server.run()      // until SIGTERM or SIGINT; then a graceful shutdown
/// ```
///
/// Each part is a swift-service-lifecycle `Service`. On graceful shutdown they stop in this
/// order: readiness turns false; the HTTP server stops accepting and finishes the requests in
/// flight (a send waits for APNs' answer); the job runner sends nothing new, lets the sends on
/// the wire finish and records them (the rest stays pending in the store); the router drains
/// every tenant's connections; the sandbox stops last.
public final class HeraldServer: Sendable {
    public let options: HeraldServerOptions
    public let router: Herald.Router
    /// The store `storage:` chose: the SQLite file (default) or PostgreSQL.
    public let store: any PushStore & JobReports
    /// Closes the store's connections when the server stops (PostgreSQL's pool; nothing for SQLite).
    let closeStore: @Sendable () async -> Void
    public let runner: JobRunner
    public let health: TenantHealthRegistry
    /// Reloads and credential rotation (admin routes, SIGHUP, the directory watcher).
    public let reloader: ReloadCoordinator
    /// The in-process sandbox, when `sandbox.enabled`.
    public let sandbox: APNsSandbox?
    /// The tenants that loaded at start and the files that did not.
    public let loadedTenants: [TenantID]
    public let loadFailures: [TenantFailure]
    let api: APIContext

    private init(
        options: HeraldServerOptions, router: Herald.Router, store: any PushStore & JobReports,
        closeStore: @escaping @Sendable () async -> Void, runner: JobRunner, health: TenantHealthRegistry,
        reloader: ReloadCoordinator, sandbox: APNsSandbox?, loadedTenants: [TenantID], loadFailures: [TenantFailure], api: APIContext
    ) {
        self.options = options
        self.router = router
        self.store = store
        self.closeStore = closeStore
        self.runner = runner
        self.health = health
        self.reloader = reloader
        self.sandbox = sandbox
        self.loadedTenants = loadedTenants
        self.loadFailures = loadFailures
        self.api = api
    }

    /// Starts the sandbox (if enabled), opens the store and loads the tenants. Nothing listens
    /// for API requests until ``run(gracefulShutdownSignals:onListening:)`` (or ``services(onListening:)``).
    public static func start(_ options: HeraldServerOptions) async throws -> HeraldServer {
        let configuration = options.configuration
        let logger = options.logger

        var sandbox: APNsSandbox? = nil
        if configuration.sandbox.enabled {
            do {
                let file = try SandboxConfigFile.load(path: configuration.sandbox.configFile)
                var sandboxLogger = logger
                sandboxLogger[metadataKey: "herald.component"] = "sandbox"
                sandbox = try await APNsSandbox.start(file.configuration, logger: sandboxLogger)
            } catch {
                throw HeraldServerError(message: "cannot start the sandbox (\(configuration.sandbox.configFile)): \(error)")
            }
        }

        let store: any PushStore & JobReports
        let closeStore: @Sendable () async -> Void
        do {
            (store, closeStore) = try await openStore(configuration, logger: logger)
        } catch {
            try? await sandbox?.shutdown()
            throw error
        }

        // Provider tokens go through the store: shared by the instances on one PostgreSQL database,
        // and kept across restarts on either backend.
        var transports = options.transports
        if var apns = transports as? APNsTransportProvider, let tokens = store as? any ProviderTokenStore {
            apns.tokenStore = tokens
            transports = apns
        }
        let health = TenantHealthRegistry()
        let router = Herald.Router(
            configuration: RouterConfiguration(
                registry: .standard(metricsFactory: options.pluginMetricsFactory), store: store,
                transports: MonitoredTransportProvider(base: transports, registry: health), logger: logger,
                environment: options.environment))
        // Every tenant is validated in full (credential, a signed token, TLS, plugins) before it serves.
        var reloadConfiguration = ReloadConfiguration(tenantsDirectory: configuration.tenantsDirectory)
        reloadConfiguration.metricsFactory = options.pluginMetricsFactory
        let reloader = ReloadCoordinator(router: router, configuration: reloadConfiguration)
        let report: ReloadReport
        do {
            report = try await reloader.reloadAll(trigger: .startup)
        } catch {
            try? await sandbox?.shutdown()
            throw HeraldServerError(message: "cannot read the tenants directory: \(error)")
        }
        let failures = report.failures.map { TenantFailure(file: $0.file, tenant: $0.tenant, message: $0.message) }
        logger.info("tenants loaded", metadata: ["herald.tenants": "\(report.added.count)", "herald.failed": "\(failures.count)"])

        let runner = JobRunner(router: router, store: store, configuration: options.jobs, logger: logger)
        let api = APIContext(
            router: router, store: store, reports: store, runner: runner, health: health, metrics: options.metrics,
            settings: configuration, adminToken: AdminToken(options.adminToken), logger: logger,
            openAPIDocument: OpenAPIDocument.bytes, reloader: reloader)
        // API keys follow each swap; resumed jobs of new tenants start.
        reloader.onChange { report in
            api.rebuildKeyIndex()
            if report.changedRuntimes { runner.rescan() }
        }
        return HeraldServer(
            options: options, router: router, store: store, closeStore: closeStore, runner: runner, health: health, reloader: reloader, sandbox: sandbox,
            loadedTenants: report.added, loadFailures: failures, api: api)
    }

    /// Opens the store `storage:` names: the SQLite file (created 0600 in a 0700 directory), or
    /// the PostgreSQL database (migrated under an advisory lock).
    static func openStore(_ configuration: ServerConfiguration, logger: Logger) async throws
        -> (any PushStore & JobReports, @Sendable () async -> Void)
    {
        switch configuration.storage {
        case .postgres(let settings):
            var storeLogger = logger
            storeLogger[metadataKey: "herald.component"] = "store"
            let postgres = PostgresPushStore.Configuration(
                host: settings.host, port: settings.port, username: settings.username,
                password: settings.password?.text, database: settings.database, schema: settings.schema,
                poolSize: settings.poolSize, requireTLS: settings.tls)
            do {
                let store = try await PostgresPushStore.open(postgres, logger: storeLogger)
                logger.info(
                    "store opened",
                    metadata: ["herald.store": "\(settings.displayName)", "herald.pool_size": "\(settings.poolSize)"])
                return (store, { await store.close() })
            } catch {
                throw HeraldServerError(message: "cannot open the store (\(settings.displayName)): \(error)")
            }
        case .sqlite:
            do {
                let directory = (configuration.storagePath as NSString).deletingLastPathComponent
                if !directory.isEmpty {
                    try SQLitePushStore.createPrivateDirectory(directory)
                }
                let store = try SQLitePushStore(path: configuration.storagePath)
                for path in [directory.isEmpty ? "." : directory, configuration.storagePath] {
                    if let mode = FilePermissions.groupOrOthersMode(path) {
                        logger.warning(
                            "the store can be read by group or others; it holds device tokens and payloads",
                            metadata: ["herald.path": "\(path)", "herald.mode": "\(mode)"])
                    }
                }
                return (store, {})
            } catch {
                throw HeraldServerError(message: "cannot open the store \(configuration.storagePath): \(error)")
            }
        }
    }

    /// The Hummingbird router of the API (every route of ``APIEndpoint``).
    public func makeRouter() -> Hummingbird.Router<BasicRequestContext> {
        let api = self.api
        let router = Hummingbird.Router(context: BasicRequestContext.self)
        router.add(middleware: APIMiddleware(api: api))
        router.add(middleware: MetricsMiddleware())
        for endpoint in APIEndpoint.allCases {
            let names = endpoint.parameterNames
            router.on(RouterPath(endpoint.routerPath), method: endpoint.method) { request, context in
                var parameters: [String: String] = [:]
                for name in names { parameters[name] = context.parameters.get(name) }
                return try await api.handle(endpoint, request: request, parameters: parameters)
            }
        }
        return router
    }

    /// The services of the server, in start order (they stop in the reverse order).
    /// - Parameter onListening: called once the API listens, with its host and port.
    public func services(onListening: @escaping @Sendable (String, Int) async -> Void = { _, _ in }) -> [any Service] {
        let listen = options.configuration.listen
        let api = self.api
        let application = Application(
            router: makeRouter(),
            configuration: ApplicationConfiguration(address: .hostname(listen.host, port: listen.port), serverName: "Herald"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? listen.port
                api.phase = .ready
                await onListening(listen.host, port)
            },
            logger: options.logger)
        var services: [any Service] = []
        if let sandbox { services.append(SandboxService(sandbox: sandbox)) }
        // Closed after the runner and the router stopped using it (services stop in reverse order).
        services.append(StoreService(close: closeStore))
        services.append(RouterService(router: router))
        services.append(JobRunnerService(runner: runner))
        if let interval = options.watchInterval {
            services.append(TenantDirectoryWatcher(coordinator: reloader, interval: interval))
        }
        if options.reloadOnSIGHUP { services.append(ReloadSignalService(coordinator: reloader)) }
        services.append(application)
        services.append(ReadinessService(api: api))
        return services
    }

    /// Runs every service until one of `gracefulShutdownSignals` arrives, then shuts down gracefully.
    public func run(
        gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint],
        onListening: @escaping @Sendable (String, Int) async -> Void = { _, _ in }
    ) async throws {
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services(onListening: onListening), gracefulShutdownSignals: gracefulShutdownSignals,
                logger: options.logger))
        try await group.run()
    }
}

extension APIEndpoint {
    var parameterNames: [String] {
        path.split(separator: "/").compactMap { segment in
            segment.hasPrefix("{") && segment.hasSuffix("}") ? String(segment.dropFirst().dropLast()) : nil
        }
    }
}
