import HeraldCore

/// One tenant's circuit to one APNs endpoint, as a plain value: closed while the endpoint
/// answers; open after a run of transient failures (sends wait instead of hammering a failing
/// APNs); after the probe interval one probe goes through (half-open); its answer closes the
/// circuit, or opens it again for twice as long (up to the policy's maximum).
///
/// The shell (``DeliveryCircuits``) holds it under a lock and calls ``admit(now:policy:)`` before
/// each send and ``record(healthy:probe:now:policy:)`` after it.
///
/// ```swift
/// var circuit = CircuitBreaker()
/// switch circuit.admit(now: clock.now, policy: tenant.delivery.circuit) {
/// case .send, .probe: …send, then circuit.record(healthy: …, probe: …, now: clock.now, policy: …)
/// case .wait(let until): …defer the item to `until`
/// }
/// ```
public struct CircuitBreaker: Sendable, Hashable {
    public enum State: Sendable, Hashable {
        /// Sends go through; `failures` transient failures in a row so far.
        case closed(failures: Int)
        /// Sends wait until `until`; `failedProbes` probes failed since it opened.
        case open(until: PushInstant, failedProbes: Int)
        /// One probe is on its way; everything else waits for its answer.
        case halfOpen(failedProbes: Int)
    }

    /// What the caller may do now.
    public enum Admission: Sendable, Hashable {
        case send
        /// Send this one as the probe, and report its outcome with `probe: true`.
        case probe
        /// Do not send before this instant.
        case wait(until: PushInstant)
    }

    /// A change worth a log line and a metric.
    public enum Transition: Sendable, Hashable {
        case opened
        case reopened
        case closed
    }

    public private(set) var state: State = .closed(failures: 0)
    /// How many times it opened (reopenings after a failed probe included).
    public private(set) var openings = 0

    public init() {}

    /// While a probe is out, others re-check this often.
    static let halfOpenRecheck: Duration = .seconds(1)

    public mutating func admit(now: PushInstant, policy: CircuitPolicy) -> Admission {
        switch state {
        case .closed:
            return .send
        case .open(let until, let failedProbes):
            guard now >= until else { return .wait(until: until) }
            state = .halfOpen(failedProbes: failedProbes)
            return .probe
        case .halfOpen:
            return .wait(until: now.advanced(by: min(policy.probeInterval, Self.halfOpenRecheck)))
        }
    }

    /// Reports what a send said about the endpoint. `probe` is true for the send admitted with
    /// ``Admission/probe``.
    @discardableResult
    public mutating func record(
        healthy: Bool, probe: Bool, now: PushInstant, policy: CircuitPolicy
    ) -> Transition? {
        switch state {
        case .closed(let failures):
            if healthy {
                state = .closed(failures: 0)
                return nil
            }
            let count = failures + 1
            guard count >= max(1, policy.failureThreshold) else {
                state = .closed(failures: count)
                return nil
            }
            state = .open(until: now.advanced(by: policy.probeInterval), failedProbes: 0)
            openings += 1
            return .opened
        case .halfOpen(let failedProbes):
            // Only the probe's answer decides; late answers of sends made before it opened do not.
            guard probe else { return nil }
            if healthy {
                state = .closed(failures: 0)
                return .closed
            }
            let failed = failedProbes + 1
            state = .open(until: now.advanced(by: Self.probeWait(failedProbes: failed, policy: policy)), failedProbes: failed)
            openings += 1
            return .reopened
        case .open:
            // Answers to sends made before it opened: the probe decides.
            return nil
        }
    }

    /// The probe's send ended without saying anything about the endpoint (deferred locally, an
    /// unknown outcome): the next ``admit(now:policy:)`` sends another probe.
    public mutating func probeAbandoned(now: PushInstant) {
        guard case .halfOpen(let failedProbes) = state else { return }
        state = .open(until: now, failedProbes: failedProbes)
    }

    /// The wait after the `failedProbes`-th failed probe: the probe interval doubled each time,
    /// at most the maximum.
    static func probeWait(failedProbes: Int, policy: CircuitPolicy) -> Duration {
        ExponentialBackoff(initial: policy.probeInterval, maximum: policy.maxProbeInterval, jitter: 0)
            .delay(afterFailures: max(0, failedProbes) + 1)
    }

    /// `closed`, `open` or `half-open`.
    public var stateName: String {
        switch state {
        case .closed: return "closed"
        case .open: return "open"
        case .halfOpen: return "half-open"
        }
    }
}
