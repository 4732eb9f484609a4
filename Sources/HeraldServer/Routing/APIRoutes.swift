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
    let lifecycle: AdminLifecycleHandlers
    let authenticator: APIKeyAuthenticator
    let adminToken: AdminToken?
    let logger: Logger
    /// The body limit named by a 413 that Hummingbird itself raises.
    let maxBodyBytes: Int

    func makeRouter() -> Router<HeraldRequestContext> {
        let router = Router(context: HeraldRequestContext.self)
        router.add(middleware: APIMiddleware<HeraldRequestContext>(
            logger: logger, maxBodyBytes: maxBodyBytes, adminEnabled: adminToken != nil))
        router.add(middleware: MetricsMiddleware())

        let health = self.health
        router.on(.healthz, use: health.healthz)
        router.on(.readyz, use: health.readyz)
        router.on(.openAPI, use: health.openAPI)

        let tenant = router.group("v1")
            .add(middleware: TenantAuthMiddleware(authenticator: authenticator))
            .group(context: TenantRequestContext.self)
        let notifications = self.notifications
        let jobs = self.jobs
        let devices = self.devices
        tenant.on(.sendNotification, under: "/v1", use: notifications.send)
        tenant.on(.sendBatch, under: "/v1", use: notifications.sendBatch)
        tenant.on(.job, under: "/v1", use: jobs.job)
        tenant.on(.invalidDevices, under: "/v1", use: devices.invalidDevices)
        tenant.on(.registerDevice, under: "/v1", use: devices.registerDevice)

        // Metrics name tenants, topics and volumes: not for tenants or anonymous callers.
        router.group().add(middleware: AdminAuthMiddleware(token: adminToken)).on(.metrics, use: health.metricsText)

        let admin = router.group("admin").add(middleware: AdminAuthMiddleware(token: adminToken))
        let tenants = self.adminTenants
        let reload = self.adminReload
        admin.on(.adminTenants, under: "/admin", use: tenants.list)
        admin.on(.adminReload, under: "/admin", use: reload.reloadAll)
        admin.on(.adminReloadTenant, under: "/admin", use: reload.reloadTenant)
        admin.on(.adminUploadCredentials, under: "/admin", use: reload.uploadCredentials)
        let lifecycle = self.lifecycle
        admin.on(.adminCreateTenant, under: "/admin", use: lifecycle.create)
        admin.on(.adminTenant, under: "/admin", use: lifecycle.show)
        admin.on(.adminUpdateTenant, under: "/admin", use: lifecycle.update)
        admin.on(.adminDeleteTenant, under: "/admin", use: lifecycle.delete)
        admin.on(.adminCreateAPIKey, under: "/admin", use: lifecycle.addAPIKey)
        admin.on(.adminDeleteAPIKey, under: "/admin", use: lifecycle.removeAPIKey)
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
