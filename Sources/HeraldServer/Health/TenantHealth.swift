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
}

/// Keeps ``TenantHealth`` per tenant, fed by ``MonitoredTransportProvider``'s transports.
public final class TenantHealthRegistry: Sendable {
    private struct Record {
        var generation = 0
        var health: TenantHealth
    }

    private let records = Mutex<[TenantID: Record]>([:])

    public init() {}

    public func health(of tenant: TenantID) -> TenantHealth? {
        records.withLock { $0[tenant]?.health }
    }

    func transportMade(for tenant: TenantID, credential: CredentialSummary?) -> Int {
        records.withLock { records in
            var record =
                records[tenant]
                ?? Record(health: TenantHealth(poolState: "idle", inFlight: 0, answered: 0, errors: 0, credential: credential))
            record.generation += 1
            record.health.poolState = "idle"
            record.health.inFlight = 0
            record.health.credential = credential
            records[tenant] = record
            return record.generation
        }
    }

    func update(_ tenant: TenantID, generation: Int, _ body: (inout TenantHealth) -> Void) {
        records.withLock { records in
            guard var record = records[tenant], record.generation == generation else { return }
            body(&record.health)
            records[tenant] = record
        }
    }
}

/// Wraps a ``TransportProvider`` so that every tenant transport it makes reports to a
/// ``TenantHealthRegistry``: in-flight sends, answers, errors, open or closed.
public struct MonitoredTransportProvider: TransportProvider {
    public let base: any TransportProvider
    public let registry: TenantHealthRegistry

    public init(base: any TransportProvider, registry: TenantHealthRegistry) {
        self.base = base
        self.registry = registry
    }

    public func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport {
        let inner = try base.makeTransport(for: tenant, logger: logger)
        // The summary is for the admin API only; a credential the base accepted builds again here.
        let summary = try? CredentialProviders.make(for: tenant, clock: SystemWallClock()).summary
        let generation = registry.transportMade(for: tenant.id, credential: summary)
        return MonitoredTransport(inner: inner, tenant: tenant.id, generation: generation, registry: registry)
    }
}

struct MonitoredTransport: PushTransport {
    let inner: any PushTransport
    let tenant: TenantID
    let generation: Int
    let registry: TenantHealthRegistry

    func send(_ notification: HeraldCore.Notification, environment: APNsEnvironment, deadline: ContinuousClock.Instant) async throws -> APNsResponse {
        registry.update(tenant, generation: generation) {
            $0.inFlight += 1
            $0.poolState = "active"
        }
        do {
            let response = try await inner.send(notification, environment: environment, deadline: deadline)
            let now = Date()
            registry.update(tenant, generation: generation) { health in
                health.inFlight -= 1
                health.answered += 1
                health.lastAnswerAt = now
                if Self.concernsTheTenant(response) {
                    health.errors += 1
                    health.lastError = "APNs answered \(response.status) \(response.reason?.wireValue ?? "")"
                    health.lastErrorAt = now
                }
            }
            return response
        } catch {
            let now = Date()
            let message = (error as? PushError)?.description ?? "\(error)"
            registry.update(tenant, generation: generation) { health in
                health.inFlight -= 1
                health.errors += 1
                health.lastError = message
                health.lastErrorAt = now
            }
            throw error
        }
    }

    func shutdown() async {
        await inner.shutdown()
        registry.update(tenant, generation: generation) { $0.poolState = "closed" }
    }

    /// A revocation: the inner transport's connections close at once (not drained).
    func close() async {
        await inner.close()
        registry.update(tenant, generation: generation) { $0.poolState = "closed" }
    }

    /// The inner transport's: a reload compares it to tell a credential rotation from another change.
    var credentialIdentity: String? { inner.credentialIdentity }

    /// 403 (credentials), 5xx, and TooManyProviderTokenUpdates are about the tenant's connection,
    /// not about one device.
    static func concernsTheTenant(_ response: APNsResponse) -> Bool {
        response.status == 403 || response.status >= 500 || response.reason == .tooManyProviderTokenUpdates
    }
}
