import Herald
import Hummingbird
import Logging

/// The API's router: three route groups over one request context.
///
/// - the open routes (`/healthz`, `/readyz`, `/openapi.yaml`);
/// - `/v1`, behind ``TenantAuthMiddleware``, with handlers on ``TenantRequestContext`` (the
///   authenticated tenant);
/// - `/admin` and `/metrics`, behind ``AdminAuthMiddleware``.
///
/// ``APIMiddleware`` wraps everything (request IDs, error answers, 404/405). Every route is a
/// case of ``APIEndpoint`` (what the OpenAPI document is checked against).
struct APIRoutes: Sendable {
    let health: HealthHandlers
    let notifications: NotificationHandlers
    let jobs: JobHandlers
    let devices: DeviceHandlers
    let adminTenants: AdminTenantHandlers
    let adminReload: AdminReloadHandlers
    let instances: AdminInstanceHandlers
    let lifecycle: AdminLifecycleHandlers
    let authenticator: APIKeyAuthenticator
    let adminToken: AdminToken?
    let logger: Logger
    /// The body limit named by a 413 that Hummingbird itself raises.
    let maxBodyBytes: Int

    func makeRouter() -> Hummingbird.Router<HeraldRequestContext> {
        let router = Hummingbird.Router(context: HeraldRequestContext.self)
        router.add(middleware: APIMiddleware<HeraldRequestContext>(
            logger: logger, maxBodyBytes: maxBodyBytes, adminEnabled: adminToken != nil))
        router.add(middleware: MetricsMiddleware())

        let health = self.health
        router.on(.healthz) { health.healthz($0, context: $1) }
        router.on(.readyz) { try health.readyz($0, context: $1) }
        router.on(.openAPI) { health.openAPI($0, context: $1) }

        let tenant = router.group("v1")
            .add(middleware: TenantAuthMiddleware(authenticator: authenticator))
            .group(context: TenantRequestContext.self)
        let notifications = self.notifications
        let jobs = self.jobs
        let devices = self.devices
        tenant.on(.sendNotification, under: "/v1") { try await notifications.send($0, context: $1) }
        tenant.on(.sendBatch, under: "/v1") { try await notifications.sendBatch($0, context: $1) }
        tenant.on(.jobs, under: "/v1") { try await jobs.list($0, context: $1) }
        tenant.on(.job, under: "/v1") { try await jobs.job($0, context: $1) }
        tenant.on(.cancelJob, under: "/v1") { try await jobs.cancel($0, context: $1) }
        tenant.on(.invalidDevices, under: "/v1") { try await devices.invalidDevices($0, context: $1) }
        tenant.on(.registerDevice, under: "/v1") { try await devices.registerDevice($0, context: $1) }

        // Metrics name tenants, topics and volumes: not for tenants or anonymous callers.
        router.group().add(middleware: AdminAuthMiddleware(token: adminToken)).on(.metrics) { health.metricsText($0, context: $1) }

        let admin = router.group("admin").add(middleware: AdminAuthMiddleware(token: adminToken))
        let tenants = self.adminTenants
        let reload = self.adminReload
        admin.on(.adminTenants, under: "/admin") { tenants.list($0, context: $1) }
        admin.on(.adminReload, under: "/admin") { try await reload.reloadAll($0, context: $1) }
        admin.on(.adminReloadTenant, under: "/admin") { try await reload.reloadTenant($0, context: $1) }
        admin.on(.adminUploadCredentials, under: "/admin") { try await reload.uploadCredentials($0, context: $1) }
        let instances = self.instances
        admin.on(.adminInstances, under: "/admin") { try await instances.list($0, context: $1) }
        admin.on(.adminJobs, under: "/admin") { try await jobs.adminList($0, context: $1) }
        admin.on(.adminCancelJob, under: "/admin") { try await jobs.adminCancel($0, context: $1) }
        let lifecycle = self.lifecycle
        admin.on(.adminCreateTenant, under: "/admin") { try await lifecycle.create($0, context: $1) }
        admin.on(.adminTenant, under: "/admin") { try lifecycle.show($0, context: $1) }
        admin.on(.adminUpdateTenant, under: "/admin") { try await lifecycle.update($0, context: $1) }
        admin.on(.adminDeleteTenant, under: "/admin") { try await lifecycle.delete($0, context: $1) }
        admin.on(.adminCreateAPIKey, under: "/admin") { try await lifecycle.addAPIKey($0, context: $1) }
        admin.on(.adminDeleteAPIKey, under: "/admin") { try await lifecycle.removeAPIKey($0, context: $1) }
        return router
    }
}

extension RouterMethods {
    /// Adds the route of `endpoint` (its method and path) to a group mounted at `prefix`.
    @discardableResult
    func on(
        _ endpoint: APIEndpoint, under prefix: String = "",
        use handler: @Sendable @escaping (Request, Context) async throws -> some ResponseGenerator
    ) -> Self {
        on(RouterPath(endpoint.routerPath(under: prefix)), method: endpoint.method, use: handler)
    }
}
