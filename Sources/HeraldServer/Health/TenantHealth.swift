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
    /// Sends that APNs answered or that failed, in the last hour (every runtime of the tenant).
    public var sendsLastHour: Int = 0
    /// Of those, the ones not answered 200 (a rejection, or no answer at all).
    public var failuresLastHour: Int = 0
}

/// Counts per minute over the last hour, as a value: 60 buckets, each stamped with the minute it
/// counts, so an old bucket is recognised and restarted rather than summed. Memory is fixed.
///
/// ```swift
/// var window = HourWindow()
/// window.record(at: Date(), failed: false)
/// window.totals(at: Date())   // (sends: 1, failures: 0)
/// ```
public struct HourWindow: Sendable, Hashable {
    private var minutes = [Int64](repeating: .min, count: 60)
    private var sends = [Int](repeating: 0, count: 60)
    private var failures = [Int](repeating: 0, count: 60)

    public init() {}

    public mutating func record(at date: Date, failed: Bool) {
        let minute = Self.minute(of: date)
        let slot = Self.slot(of: minute)
        if minutes[slot] != minute {
            minutes[slot] = minute
            sends[slot] = 0
            failures[slot] = 0
        }
        sends[slot] += 1
        if failed { failures[slot] += 1 }
    }

    /// The sends and failures of the 60 minutes up to `date` (this minute included).
    public func totals(at date: Date) -> (sends: Int, failures: Int) {
        let now = Self.minute(of: date)
        var totals = (sends: 0, failures: 0)
        for slot in 0..<60 where minutes[slot] > now - 60 && minutes[slot] <= now {
            totals.sends += sends[slot]
            totals.failures += failures[slot]
        }
        return totals
    }

    static func minute(of date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970
        // Dates come from the clock, but a non-finite or absurd one must not trap.
        guard seconds.isFinite, abs(seconds) < 1e15 else { return 0 }
        return Int64((seconds / 60).rounded(.down))
    }

    static func slot(of minute: Int64) -> Int {
        Int(((minute % 60) + 60) % 60)
    }
}

/// Keeps ``TenantHealth`` per tenant, fed by ``MonitoredTransportProvider``'s transports.
public final class TenantHealthRegistry: Sendable {
    private struct Record {
        var generation = 0
        var health: TenantHealth
        var lastHour = HourWindow()
    }

    private let records = Mutex<[TenantID: Record]>([:])
    /// The wall clock of the last-hour counts.
    let now: @Sendable () -> Date

    public init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
    }

    public func health(of tenant: TenantID) -> TenantHealth? {
        let date = now()
        return records.withLock { records in
            guard let record = records[tenant] else { return nil }
            var health = record.health
            (health.sendsLastHour, health.failuresLastHour) = record.lastHour.totals(at: date)
            return health
        }
    }

    /// Counts one send of the tenant's (any of its runtimes) in the last-hour window.
    func recordSend(_ tenant: TenantID, failed: Bool) {
        let date = now()
        records.withLock { records in
            records[tenant]?.lastHour.record(at: date, failed: failed)
        }
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
            registry.recordSend(tenant, failed: response.status != 200)
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
            registry.recordSend(tenant, failed: true)
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
