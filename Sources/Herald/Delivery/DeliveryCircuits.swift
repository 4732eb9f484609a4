import HeraldCore
import Logging
import Synchronization

/// Every tenant's circuit to each of its APNs endpoints (``CircuitBreaker``), shared by the job
/// runner (which gates batch sends with it) and the admin and metrics pages (which show it).
///
/// One tenant's circuit never gates another tenant: they are keyed by tenant and endpoint.
/// Entries exist only for endpoints a loaded tenant sent to (at most two per tenant:
/// production and development), and are dropped when the tenant is gone.
public final class DeliveryCircuits: Sendable {
    public struct Key: Hashable, Sendable, Comparable {
        public var tenant: TenantID
        /// The endpoint's URL (`https://host:port`).
        public var endpoint: String

        public init(tenant: TenantID, endpoint: String) {
            self.tenant = tenant
            self.endpoint = endpoint
        }

        public static func < (a: Key, b: Key) -> Bool {
            (a.tenant.rawValue, a.endpoint) < (b.tenant.rawValue, b.endpoint)
        }
    }

    /// A circuit as the admin and metrics pages show it.
    public struct Status: Sendable, Hashable {
        public var key: Key
        /// `closed`, `open` or `half-open`.
        public var state: String
        /// Transient failures in a row (closed), or failed probes since it opened (open, half-open).
        public var failures: Int
        /// How many times it opened since the tenant's first send.
        public var openings: Int
        /// While open: how long until the next probe may go.
        public var probeIn: Duration?
    }

    private let circuits = Mutex<[Key: CircuitBreaker]>([:])

    public init() {}

    /// Asks before a send. The clock is read only for a tenant endpoint that has a circuit.
    public func admit(
        _ key: Key, policy: CircuitPolicy, now: @autoclosure () -> PushInstant
    ) -> CircuitBreaker.Admission {
        circuits.withLock { circuits in
            guard var circuit = circuits[key] else { return .send }  // none yet: closed
            let admission = circuit.admit(now: now(), policy: policy)
            circuits[key] = circuit
            return admission
        }
    }

    /// Reports a send's outcome. Logs when the circuit opens or closes.
    public func record(
        _ key: Key, outcome: DeliveryOutcome, probe: Bool, policy: CircuitPolicy,
        now: @autoclosure () -> PushInstant, logger: Logger
    ) {
        // The clock is read only when a circuit changes (not for a success on a closed circuit:
        // nearly every send).
        let transition = circuits.withLock { circuits -> CircuitBreaker.Transition? in
            guard let healthy = outcome.endpointHealthy else {
                if probe { circuits[key]?.probeAbandoned(now: now()) }
                return nil
            }
            if healthy, circuits[key] == nil { return nil }  // a closed circuit with no failures
            var circuit = circuits[key] ?? CircuitBreaker()
            let transition = circuit.record(healthy: healthy, probe: probe, now: now(), policy: policy)
            circuits[key] = circuit
            return transition
        }
        guard let transition else { return }
        let metadata: Logger.Metadata = ["herald.tenant": "\(key.tenant)", "herald.endpoint": "\(key.endpoint)"]
        switch transition {
        case .opened:
            logger.warning("circuit opened: sends to this endpoint wait for a probe", metadata: metadata)
        case .reopened:
            logger.info("circuit probe failed; the circuit stays open", metadata: metadata)
        case .closed:
            logger.notice("circuit closed: the probe succeeded", metadata: metadata)
        }
    }

    /// Every circuit, sorted by tenant and endpoint.
    public func statuses(now: PushInstant) -> [Status] {
        let all = circuits.withLock { $0 }
        return all.map { key, circuit in
            let failures: Int
            var probeIn: Duration? = nil
            switch circuit.state {
            case .closed(let count): failures = count
            case .open(let until, let failedProbes):
                failures = failedProbes
                probeIn = until > now ? now.duration(to: until) : .zero
            case .halfOpen(let failedProbes): failures = failedProbes
            }
            return Status(key: key, state: circuit.stateName, failures: failures, openings: circuit.openings, probeIn: probeIn)
        }.sorted { $0.key < $1.key }
    }

    /// Drops the circuits of tenants that are not in `tenants` (removed tenants).
    public func retain(tenants: Set<TenantID>) {
        circuits.withLock { circuits in
            circuits = circuits.filter { tenants.contains($0.key.tenant) }
        }
    }
}
