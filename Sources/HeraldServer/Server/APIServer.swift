import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldStore
import Hummingbird
import Logging
import Prometheus
import ServiceLifecycle

/// The HTTP face of Herald: the tenant API, the admin API, the console, `/metrics` and the
/// health routes, over the parts the process assembled (``Parts``). It owns no part; it only
/// answers requests with them. `HeraldProcess` builds it and places its services in the
/// process's one `ServiceGroup`.
public final class APIServer: Sendable {
    /// What the routes answer with.
    public struct Parts: Sendable {
        public var router: Herald.Router
        public var store: any ServerStore
        public var runner: JobRunner
        public var health: TenantHealthRegistry
        public var reloader: ReloadCoordinator
        public var credentialHealth: CredentialHealthMonitor
        /// The instances sharing the store (`GET /admin/instances`).
        public var instances: InstanceDirectory
        /// Told of a job cancelled through the API or the console (its `job.cancelled` webhook).
        public var jobEnded: any JobEndNotifier
        /// What `/metrics` renders.
        public var metrics: PrometheusCollectorRegistry

        public init(
            router: Herald.Router, store: any ServerStore, runner: JobRunner, health: TenantHealthRegistry,
            reloader: ReloadCoordinator, credentialHealth: CredentialHealthMonitor, instances: InstanceDirectory,
            jobEnded: any JobEndNotifier, metrics: PrometheusCollectorRegistry
        ) {
            self.router = router
            self.store = store
            self.runner = runner
            self.health = health
            self.reloader = reloader
            self.credentialHealth = credentialHealth
            self.instances = instances
            self.jobEnded = jobEnded
            self.metrics = metrics
        }
    }

    /// Listen address, API and HTTP limits, job quotas, `shutdown_timeout`.
    public let configuration: ServerConfiguration
    let logger: Logger
    let routes: APIRoutes
    let console: Console
    let authenticator: APIKeyAuthenticator
    /// Starting, ready or stopping (`/readyz`).
    let phase = ServerPhaseState()
    /// The listener's connections, as ``IdleConnectionReaper`` sees them (`http.max_connections`).
    let connections: IdleConnectionReaper
    /// The listener's connection cap: connections accepted, and whether it stopped accepting.
    let gate = ListenerGate()

    /// Builds the routes and the console (its templates are read here: a broken template stops
    /// the start, not a page view).
    /// - Parameter adminToken: the break-glass admin token. Nil or empty while the store holds no
    ///   admin account: the `/admin` routes and the console answer 404.
    public init(
        _ parts: Parts, configuration: ServerConfiguration, adminToken: String?, maxUploadBytes: Int, logger: Logger
    ) async throws {
        self.configuration = configuration
        self.logger = logger
        connections = IdleConnectionReaper(maxConnections: configuration.http.maxConnections)
        let (router, store, runner, clock) = (parts.router, parts.store, parts.runner, parts.router.configuration.clock)
        let pages: ConsolePages
        do {
            pages = try await ConsolePages.load()
        } catch {
            throw APIServerError(message: "cannot load the console's templates: \(error)")
        }
        let cancellation = JobCancellation(
            store: store, runner: runner, notifier: store as? any StoreNotifier, clock: clock, logger: logger,
            jobEnded: parts.jobEnded)
        let adminAuthenticator = AdminAuthenticator(
            breakGlass: AdminToken(adminToken), directory: store, now: { clock.date }, instant: { clock.now })
        let audit = AuditTrail(directory: store, now: { clock.date }, logger: logger)
        let passwords = AdminPasswords(cost: configuration.api.passwordCost)
        let channels = ChannelService(router: router, store: store)
        console = Console(
            router: router, health: parts.health, reloader: parts.reloader, store: store, cancellation: cancellation,
            authenticator: adminAuthenticator, audit: audit, passwords: passwords, usage: store, channels: channels,
            sessions: ConsoleSessions(now: { clock.now }),
            pages: pages, lifecycle: ReloadCoordinatorLifecycle(reloader: parts.reloader, audit: audit), logger: logger,
            maxFormBytes: maxUploadBytes * 2 + 64 * 1024)
        authenticator = APIKeyAuthenticator(router: router, rateLimit: configuration.http.rateLimit, logger: logger)
        let adminTenants = AdminTenantHandlers(
            router: router, health: parts.health, reloader: parts.reloader, credentialHealth: parts.credentialHealth)
        routes = APIRoutes(
            health: HealthHandlers(
                router: router, phase: phase, metrics: parts.metrics, openAPIDocument: OpenAPIDocument.bytes,
                runner: runner, storeCalls: store as? any UnansweredCallCounting),
            notifications: NotificationHandlers(
                router: router, store: store, runner: runner, limits: configuration.api,
                jobLimits: JobLimits(
                    maxActiveJobs: configuration.jobs.maxActiveJobsPerTenant,
                    maxPendingItems: configuration.jobs.maxPendingItemsPerTenant),
                logger: logger),
            jobs: JobHandlers(store: store, reports: store, cancellation: cancellation, audit: audit),
            devices: DeviceHandlers(store: store, clock: clock, limits: configuration.api),
            adminTenants: adminTenants,
            adminReload: AdminReloadHandlers(reloader: parts.reloader, audit: audit, logger: logger),
            instances: AdminInstanceHandlers(directory: parts.instances, clock: clock, logger: logger),
            lifecycle: AdminLifecycleHandlers(
                router: router, reloader: parts.reloader, tenants: adminTenants, audit: audit, logger: logger),
            accounts: AdminAccountHandlers(
                directory: store, authenticator: adminAuthenticator, audit: audit, passwords: passwords, now: { clock.date },
                logger: logger),
            usage: UsageHandlers(ledger: store, now: { clock.date }),
            channels: ChannelHandlers(channels: channels, limits: configuration.api, audit: audit, logger: logger),
            authenticator: authenticator, adminAuthenticator: adminAuthenticator, logger: logger,
            maxBodyBytes: configuration.api.maxBodyBytes)
    }

    /// The tenants changed (a reload, an upload, a lifecycle call): API keys follow.
    public func tenantsChanged() {
        authenticator.rebuild()
    }

    /// The Hummingbird router of the API (every route of ``APIEndpoint``) and the console.
    public func makeRouter() -> Hummingbird.Router<HeraldRequestContext> {
        let router = routes.makeRouter()
        console.addRoutes(to: router)
        return router
    }

    /// The listener, with `http:`'s limits: idle connections (and request heads that never
    /// finish) are closed after idle_timeout, bodies must arrive within body_timeout, and at most
    /// max_connections are open at once (more wait in the kernel's backlog).
    /// - Parameter onListening: called once it listens, with its host and port; `/readyz` is
    ///   ready from then on.
    public func listener(onListening: @escaping @Sendable (String, Int) async -> Void) -> any Service {
        let (listen, http, phase, gate) = (configuration.listen, configuration.http, self.phase, self.gate)
        return Application(
            router: makeRouter(),
            server: ListenerLimits.server(http, reaper: connections),
            configuration: ApplicationConfiguration(
                address: .hostname(listen.host, port: listen.port), serverName: "Herald",
                availableConnectionsDelegate: ListenerLimits.connectionCap(http, gate: gate)),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? listen.port
                phase.phase = .ready
                await onListening(listen.host, port)
            },
            logger: logger)
    }

    /// Turns `/readyz` false as soon as graceful shutdown begins: the process's last service,
    /// so the first told.
    public func readiness() -> any Service {
        ReadinessService(phase: phase)
    }

    /// Says so when a graceful shutdown outlasted `shutdown_timeout`: the process's first
    /// service, so the last told.
    public func shutdownTimeoutNotice() -> any Service {
        ShutdownTimeoutNotice(phase: phase, timeout: configuration.shutdownTimeout, logger: logger)
    }
}

/// Why the API could not be built.
public struct APIServerError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
