import Herald
import Hummingbird
import Logging

/// The API's router: three route groups over one request context.
///
/// - the open routes (`/healthz`, `/readyz`, `/openapi.yaml`);
/// - `/v1`, behind ``TenantAuthMiddleware``, with handlers on ``TenantRequestContext`` (the
///   authenticated tenant);
/// - `/admin` and `/metrics`, behind ``AdminAuthMiddleware``; each route checks that the
///   caller's role has the route's permission (``APIEndpoint/access``) before its handler runs.
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
    let accounts: AdminAccountHandlers
    let usage: UsageHandlers
    let channels: ChannelHandlers
    let authenticator: APIKeyAuthenticator
    let adminAuthenticator: AdminAuthenticator
    let logger: Logger
    /// The body limit named by a 413 that Hummingbird itself raises.
    let maxBodyBytes: Int

    func makeRouter() -> Hummingbird.Router<HeraldRequestContext> {
        let router = Hummingbird.Router(context: HeraldRequestContext.self)
        router.add(middleware: APIMiddleware<HeraldRequestContext>(
            logger: logger, maxBodyBytes: maxBodyBytes, adminAuthenticator: adminAuthenticator))
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
        let usage = self.usage
        tenant.on(.usage, under: "/v1") { try await usage.tenantUsage($0, context: $1) }
        let channels = self.channels
        tenant.on(.channels, under: "/v1") { try await channels.list($0, context: $1) }
        tenant.on(.createChannel, under: "/v1") { try await channels.create($0, context: $1) }
        tenant.on(.syncChannels, under: "/v1") { try await channels.sync($0, context: $1) }
        tenant.on(.channel, under: "/v1") { try await channels.show($0, context: $1) }
        tenant.on(.deleteChannel, under: "/v1") { try await channels.delete($0, context: $1) }
        tenant.on(.sendBroadcast, under: "/v1") { try await channels.broadcast($0, context: $1) }

        // Metrics name tenants, topics and volumes: not for tenants or anonymous callers.
        let adminAuth = AdminAuthMiddleware<HeraldRequestContext>(authenticator: adminAuthenticator)
        router.group().add(middleware: adminAuth).onAdmin(.metrics, under: "") { health.metricsText($0, context: $1) }

        let admin = router.group("admin").add(middleware: adminAuth)
        let tenants = self.adminTenants
        let reload = self.adminReload
        admin.onAdmin(.adminTenants) { tenants.list($0, context: $1) }
        admin.onAdmin(.adminReload) { try await reload.reloadAll($0, context: $1) }
        admin.onAdmin(.adminReloadTenant) { try await reload.reloadTenant($0, context: $1) }
        admin.onAdmin(.adminUploadCredentials) { try await reload.uploadCredentials($0, context: $1) }
        let instances = self.instances
        admin.onAdmin(.adminInstances) { try await instances.list($0, context: $1) }
        admin.onAdmin(.adminJobs) { try await jobs.adminList($0, context: $1) }
        admin.onAdmin(.adminCancelJob) { try await jobs.adminCancel($0, context: $1) }
        let lifecycle = self.lifecycle
        admin.onAdmin(.adminCreateTenant) { try await lifecycle.create($0, context: $1) }
        admin.onAdmin(.adminTenant) { try lifecycle.show($0, context: $1) }
        admin.onAdmin(.adminUpdateTenant) { try await lifecycle.update($0, context: $1) }
        admin.onAdmin(.adminDeleteTenant) { try await lifecycle.delete($0, context: $1) }
        admin.onAdmin(.adminCreateAPIKey) { try await lifecycle.addAPIKey($0, context: $1) }
        admin.onAdmin(.adminDeleteAPIKey) { try await lifecycle.removeAPIKey($0, context: $1) }
        let accounts = self.accounts
        admin.onAdmin(.adminWhoAmI) { try accounts.whoAmI($0, context: $1) }
        admin.onAdmin(.adminAccounts) { try await accounts.list($0, context: $1) }
        admin.onAdmin(.adminCreateAccount) { try await accounts.create($0, context: $1) }
        admin.onAdmin(.adminUpdateAccount) { try await accounts.update($0, context: $1) }
        admin.onAdmin(.adminDeleteAccount) { try await accounts.delete($0, context: $1) }
        admin.onAdmin(.adminAccountTokens) { try await accounts.tokens($0, context: $1) }
        admin.onAdmin(.adminCreateAccountToken) { try await accounts.createToken($0, context: $1) }
        admin.onAdmin(.adminRevokeAccountToken) { try await accounts.revokeToken($0, context: $1) }
        admin.onAdmin(.adminSetAccountPassword) { try await accounts.setPassword($0, context: $1) }
        admin.onAdmin(.adminAudit) { try await accounts.audit($0, context: $1) }
        admin.onAdmin(.adminUsage) { try await usage.adminUsage($0, context: $1) }
        admin.onAdmin(.adminChannels) { try await channels.adminList($0, context: $1) }
        admin.onAdmin(.adminCreateChannel) { try await channels.adminCreate($0, context: $1) }
        admin.onAdmin(.adminSyncChannels) { try await channels.adminSync($0, context: $1) }
        admin.onAdmin(.adminChannel) { try await channels.adminShow($0, context: $1) }
        admin.onAdmin(.adminDeleteChannel) { try await channels.adminDelete($0, context: $1) }
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

    /// Adds an admin route: its handler runs only when the caller (``AdminActor/current``, set by
    /// ``AdminAuthMiddleware``) has the route's permission, or the route is one of an account's
    /// own (``APIEndpoint/isSelfService``) and `{name}` is the caller's account; else 403.
    @discardableResult
    func onAdmin(
        _ endpoint: APIEndpoint, under prefix: String = "/admin",
        use handler: @Sendable @escaping (Request, Context) async throws -> some ResponseGenerator
    ) -> Self {
        on(endpoint, under: prefix) { request, context in
            try APIEndpoint.authorize(endpoint, account: context.parameters.get("name"))
            return try await handler(request, context)
        }
    }
}

extension APIEndpoint {
    /// Whether the current admin actor may call `endpoint` (`account`: the route's `{name}`).
    static func authorize(_ endpoint: APIEndpoint, account: String?) throws(APIError) {
        guard case .admin(let permission) = endpoint.access, let actor = AdminActor.current else {
            throw APIError.unauthorized("an admin token is required: Authorization: Bearer <token>")
        }
        if actor.may(permission) { return }
        if endpoint.isSelfService, let account, account == actor.account { return }
        throw permission.refusal(actor)
    }
}
