import Foundation
import Herald
import HeraldAPNs
import HeraldCore
import Logging
import Synchronization

/// What the admin API reports about one tenant's connection to APNs.
public struct TenantHealth: Sendable, Hashable {
    /// `idle` (nothing sent since load: no connection), `active` (its transport has sent),
    /// `closed` (its transport was shut down).
    public var poolState: String
    public var inFlight: Int
    /// Sends APNs answered (any status) since the tenant's transport was made.
    public var answered: Int
    /// Sends that failed without an APNs answer, or that APNs answered with an error that
    /// concerns the tenant rather than one device (403, 5xx, TooManyProviderTokenUpdates).
    public var errors: Int
    public var lastError: String?
    public var lastErrorAt: Date?
    public var lastAnswerAt: Date?
    /// The credential as loaded (never secret).
    public var credential: CredentialSummary?
    /// Sends of the last hour (over every runtime of the tenant: a reload does not restart it).
    public var sendsLastHour: Int = 0
    /// Of those, the ones not answered 200 (a rejection, a local refusal, or no answer at all).
    public var failuresLastHour: Int = 0
}

/// Reads ``TenantHealth`` from the router: each tenant's transport reports its own pools and
/// counters (``PushTransport/status``), so nothing wraps the transports to count.
public final class TenantHealthRegistry: Sendable {
    private let router: Herald.Router

    public init(router: Herald.Router) {
        self.router = router
    }

    /// The tenant's health now; nil when no tenant has this ID.
    public func health(of tenant: TenantID) -> TenantHealth? {
        guard let runtime = router.runtime(for: tenant) else { return nil }
        let status = runtime.transport.status
        let lastHour = router.lastHour.totals(of: tenant, at: router.configuration.clock.date)
        return TenantHealth(
            poolState: status.state.rawValue, inFlight: status.inFlight + status.queued, answered: status.answered,
            errors: status.errors, lastError: status.lastError, lastErrorAt: status.lastErrorAt,
            lastAnswerAt: status.lastAnswerAt, credential: (runtime.transport as? TenantTransport)?.credentialSummary,
            sendsLastHour: lastHour.sends, failuresLastHour: lastHour.failures)
    }
}
