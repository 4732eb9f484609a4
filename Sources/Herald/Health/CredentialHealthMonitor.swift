import Foundation
import HeraldAPNs
import HeraldCore
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// What the credential health monitor last saw of one tenant's credential.
public struct CredentialHealth: Sendable, Hashable {
    public var tenant: TenantID
    public var kind: AuthKind
    /// When the client certificate expires (certificate tenants).
    public var certificateNotAfter: Date?
    /// When the token signing key's file was last written (token tenants whose key is a file):
    /// the key's age is counted from it. Apple's keys do not expire; operators rotate them.
    public var keyWrittenAt: Date?
    /// When this was checked.
    public var checkedAt: Date
    /// Why the credential could not be looked at, if it could not (no secret in it).
    public var problem: String?

    public init(
        tenant: TenantID, kind: AuthKind, certificateNotAfter: Date? = nil, keyWrittenAt: Date? = nil,
        checkedAt: Date, problem: String? = nil
    ) {
        self.tenant = tenant
        self.kind = kind
        self.certificateNotAfter = certificateNotAfter
        self.keyWrittenAt = keyWrittenAt
        self.checkedAt = checkedAt
        self.problem = problem
    }

    /// Seconds until the certificate expires (negative once it has); nil for tokens.
    public func secondsUntilExpiry(at now: Date) -> Double? {
        certificateNotAfter.map { $0.timeIntervalSince(now) }
    }

    /// Seconds since the key file was written; nil for certificates and keys from the environment.
    public func keyAge(at now: Date) -> Double? {
        keyWrittenAt.map { max(0, now.timeIntervalSince($0)) }
    }
}

/// When the monitor looks, and when it speaks up.
public struct CredentialHealthPolicy: Sendable {
    /// How often the credentials are looked at.
    public var interval: Duration = .seconds(3600)
    /// A certificate that expires within this is logged as a warning.
    public var warnWithin: TimeInterval = 30 * 86_400
    /// A certificate that expires within this is sent to the tenant's notifier (its webhook).
    public var notifyWithin: TimeInterval = 14 * 86_400
    /// A warning or a notice for one tenant is repeated at most this often.
    public var repeatEvery: TimeInterval = 86_400

    public init() {}
}

/// Told when a tenant's certificate is about to expire (at most once per
/// ``CredentialHealthPolicy/repeatEvery`` per tenant), e.g. to post to the tenant's webhook.
public protocol CredentialExpiryNotifier: Sendable {
    func certificateExpiring(_ health: CredentialHealth, tenant: TenantConfiguration, now: Date) async
}

/// Watches every running tenant's credential: exports `herald_credential_expiry_seconds{tenant}`
/// (certificate tenants) and `herald_credential_key_age_seconds{tenant}` (token tenants with a
/// key file; the oldest of several) as gauges, logs a warning from 30 days before a certificate expires, and tells the
/// notifier from 14 days before, each at most once a day per tenant. A `Service`: it looks once
/// at start and then every ``CredentialHealthPolicy/interval`` until graceful shutdown.
///
/// ```swift
/// let monitor = CredentialHealthMonitor(router: router, logger: logger)
/// services.append(monitor)
/// monitor.health(of: tenant)?.secondsUntilExpiry(at: Date())
/// ```
public final class CredentialHealthMonitor: Service, Sendable {
    public let router: Router
    public let policy: CredentialHealthPolicy
    let clock: any WallClock
    /// What ``CredentialHealthPolicy/interval`` is timed on.
    let timer: any PushClock
    let metricsFactory: (any MetricsFactory)?
    let notifier: (any CredentialExpiryNotifier)?
    let logger: Logger

    private struct Entry {
        var identity: String?
        var health: CredentialHealth
        var warnedAt: Date?
        var notifiedAt: Date?
        var expiryGauge: Gauge?
        var keyAgeGauge: Gauge?
    }

    private let entries = Mutex<[TenantID: Entry]>([:])

    public init(
        router: Router, policy: CredentialHealthPolicy = CredentialHealthPolicy(),
        clock: any WallClock = SystemWallClock(), timer: any PushClock = SystemPushClock(),
        metricsFactory: (any MetricsFactory)? = nil, notifier: (any CredentialExpiryNotifier)? = nil, logger: Logger
    ) {
        self.router = router
        self.policy = policy
        self.clock = clock
        self.timer = timer
        self.metricsFactory = metricsFactory
        self.notifier = notifier
        var logger = logger
        logger[metadataKey: "herald.component"] = "credential-health"
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await self.timer.repeating(every: self.policy.interval, startingNow: true) { await self.checkOnce() }
        }
    }

    /// The last look at a tenant's credential; nil before the first look or for unknown tenants.
    public func health(of tenant: TenantID) -> CredentialHealth? {
        entries.withLock { $0[tenant]?.health }
    }

    /// The last look at every running tenant's credential, by tenant.
    public var all: [CredentialHealth] {
        entries.withLock { $0.values.map(\.health) }.sorted { $0.tenant < $1.tenant }
    }

    /// Looks at every running tenant's credential once: gauges, warnings, notices.
    @discardableResult
    public func checkOnce() async -> [CredentialHealth] {
        let now = clock.now
        let runtimes = router.tenantIDs.compactMap { router.runtime(for: $0) }
        var notices: [(CredentialHealth, TenantConfiguration)] = []
        var warnings: [CredentialHealth] = []
        let running = Set(runtimes.map(\.id))
        let looked: [CredentialHealth] = entries.withLock { entries in
            // Tenants that are gone: their gauges go too.
            for (id, entry) in entries where !running.contains(id) {
                entry.expiryGauge?.destroy()
                entry.keyAgeGauge?.destroy()
                entries[id] = nil
            }
            var looked: [CredentialHealth] = []
            for runtime in runtimes {
                let identity = runtime.credentialIdentity
                var entry: Entry
                if let known = entries[runtime.id], known.identity == identity, known.health.problem == nil {
                    entry = known
                    entry.health.checkedAt = now
                } else {
                    entries[runtime.id].map {
                        $0.expiryGauge?.destroy()
                        $0.keyAgeGauge?.destroy()
                    }
                    entry = Entry(identity: identity, health: Self.look(at: runtime.configuration, now: now))
                }
                self.record(&entry, now: now)
                if let left = entry.health.secondsUntilExpiry(at: now) {
                    if left < policy.warnWithin, Self.due(entry.warnedAt, now: now, every: policy.repeatEvery) {
                        entry.warnedAt = now
                        warnings.append(entry.health)
                    }
                    if left < policy.notifyWithin, notifier != nil,
                        Self.due(entry.notifiedAt, now: now, every: policy.repeatEvery)
                    {
                        entry.notifiedAt = now
                        notices.append((entry.health, runtime.configuration))
                    }
                }
                entries[runtime.id] = entry
                looked.append(entry.health)
            }
            return looked
        }
        for health in warnings {
            let left = health.secondsUntilExpiry(at: now) ?? 0
            logger.warning(
                left > 0 ? "client certificate expires soon" : "client certificate has expired",
                metadata: [
                    "herald.tenant": "\(health.tenant)",
                    "herald.expires-at": "\(health.certificateNotAfter.map { "\($0)" } ?? "")",
                    "herald.days-left": "\(Int((left / 86_400).rounded(.down)))",
                ])
        }
        if let notifier {
            for (health, tenant) in notices {
                await notifier.certificateExpiring(health, tenant: tenant, now: now)
            }
        }
        return looked.sorted { $0.tenant < $1.tenant }
    }

    private func record(_ entry: inout Entry, now: Date) {
        let tenant = entry.health.tenant.rawValue
        if let left = entry.health.secondsUntilExpiry(at: now) {
            let gauge = entry.expiryGauge ?? makeGauge("herald_credential_expiry_seconds", tenant: tenant)
            gauge.record(left)
            entry.expiryGauge = gauge
        }
        if let age = entry.health.keyAge(at: now) {
            let gauge = entry.keyAgeGauge ?? makeGauge("herald_credential_key_age_seconds", tenant: tenant)
            gauge.record(age)
            entry.keyAgeGauge = gauge
        }
    }

    private func makeGauge(_ label: String, tenant: String) -> Gauge {
        if let metricsFactory {
            return Gauge(label: label, dimensions: [("tenant", tenant)], factory: metricsFactory)
        }
        return Gauge(label: label, dimensions: [("tenant", tenant)])
    }

    private static func due(_ last: Date?, now: Date, every: TimeInterval) -> Bool {
        guard let last else { return true }
        return now.timeIntervalSince(last) >= every
    }

    /// Reads what the health needs from the tenant's credential: the certificate's expiry (even
    /// an expired one), or the key file's modification time.
    static func look(at tenant: TenantConfiguration, now: Date) -> CredentialHealth {
        var health = CredentialHealth(tenant: tenant.id, kind: tenant.auth.kind, checkedAt: now)
        switch tenant.auth {
        case .token(let token):
            // With several keys, the oldest key file: the one most due for rotation.
            for key in token.keys where key.privateKey.origin.hasPrefix("file ") {
                let path = String(key.privateKey.origin.dropFirst("file ".count))
                let attributes = try? FileManager.default.attributesOfItem(atPath: path)
                if let written = attributes?[.modificationDate] as? Date {
                    health.keyWrittenAt = min(health.keyWrittenAt ?? written, written)
                }
            }
        case .certificate(let certificate):
            do {
                health.certificateNotAfter = try CertificateCredentialProvider.expiry(
                    of: certificate, file: tenant.sourceFile)
            } catch {
                health.problem = error.description
            }
        }
        return health
    }
}
