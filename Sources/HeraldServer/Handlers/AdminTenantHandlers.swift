import Foundation
import Herald
import HeraldCore
import Hummingbird

/// The tenants as the operator sees them (`/admin/tenants`).
struct AdminTenantHandlers: Sendable {
    let router: Herald.Router
    let health: TenantHealthRegistry
    let reloader: ReloadCoordinator
    let credentialHealth: CredentialHealthMonitor

    // MARK: GET /admin/tenants

    struct TenantsAnswer: ResponseEncodable {
        var tenants: [TenantView]
        /// The tenant files that failed at the last reload (or at start) and have not loaded since.
        var failures: [FailureView]
    }

    func list(_ request: Request, context: some RequestContext) -> TenantsAnswer {
        let tenants = router.tenantIDs.compactMap { router.runtime(for: $0)?.configuration }
        return TenantsAnswer(
            tenants: tenants.map(view),
            failures: reloader.failures.map { FailureView(file: $0.file, tenant: $0.tenant?.rawValue, message: $0.message) })
    }

    /// One loaded tenant as ``TenantView`` shows it.
    func view(_ tenant: TenantConfiguration) -> TenantView {
        let circuits = router.circuits.statuses(now: router.configuration.clock.now).filter { $0.key.tenant == tenant.id }
        return TenantView(
            tenant, health: health.health(of: tenant.id), credential: credentialHealth.health(of: tenant.id),
            reload: reloader.status(of: tenant.id), circuits: circuits, now: router.configuration.clock.date)
    }
}
