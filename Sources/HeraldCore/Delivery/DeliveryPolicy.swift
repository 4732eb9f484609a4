import Foundation

/// What Herald promises about a batch item whose outcome is unknown (its connection dropped or
/// was reset while the request was in flight, or it timed out after it was written).
public enum DeliveryGuarantee: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Sent again, with the same apns-id, on another connection: the device may get it twice
    /// (at most the streams in flight on the lost connection), but never zero times.
    case atLeastOnce = "at-least-once"
    /// Reported with the outcome `Unknown` and never sent again: never twice, maybe zero times.
    case atMostOnce = "at-most-once"

    public var description: String { rawValue }
}

/// How a tenant's batch items are retried, and when its sends to an endpoint stop to let a
/// failing APNs recover: the `delivery:` section of the tenant file.
///
/// ```yaml
/// delivery:
///   guarantee: at-least-once      # or at-most-once
///   max_retry_duration: 1h        # a batch item fails with RetryTimeExceeded after this
///   initial_backoff: 1s           # the wait after the first transient failure; doubles each time
///   max_backoff: 1m
///   jitter: 0.5                   # the random fraction of each wait
///   circuit_failure_threshold: 20 # consecutive transient failures that open the circuit
///   circuit_probe_interval: 5s    # how long an open circuit waits before one probe
///   circuit_max_probe_interval: 1m
/// ```
///
/// A single API send is not governed by it: it keeps its request deadline (``RetryPolicy``).
public struct DeliveryPolicy: Sendable, Hashable {
    public var guarantee: DeliveryGuarantee = .atLeastOnce
    /// How long after its first attempt a batch item may still be retried.
    public var maxRetryDuration: Duration = .seconds(3600)
    /// The wait after the first transient failure; each later wait doubles, up to ``maxBackoff``.
    public var initialBackoff: Duration = .seconds(1)
    public var maxBackoff: Duration = .seconds(60)
    /// The fraction of each wait drawn at random (0: none; 1: anywhere from 0 to the full wait).
    public var jitter: Double = 0.5
    public var circuit: CircuitPolicy = CircuitPolicy()

    public init() {}

    public init(
        guarantee: DeliveryGuarantee, maxRetryDuration: Duration = .seconds(3600), initialBackoff: Duration = .seconds(1),
        maxBackoff: Duration = .seconds(60), jitter: Double = 0.5, circuit: CircuitPolicy = CircuitPolicy()
    ) {
        self.guarantee = guarantee
        self.maxRetryDuration = maxRetryDuration
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.jitter = jitter
        self.circuit = circuit
    }

    /// When a batch item first attempted at `firstAttempt` stops being retried:
    /// ``maxRetryDuration`` later (a transient failure after it, or a wait that would end after
    /// it, fails the item with `RetryTimeExceeded`).
    public func retryDeadline(firstAttempt: Date) -> Date {
        firstAttempt.addingTimeInterval(maxRetryDuration.secondsValue)
    }

    /// The backoff of a batch item's retries.
    public var backoff: ExponentialBackoff {
        ExponentialBackoff(initial: initialBackoff, maximum: maxBackoff, jitter: jitter)
    }

    /// The wait after the `attempts`-th transient failure (1-based), before jitter:
    /// `initialBackoff × 2^(attempts−1)`, at most ``maxBackoff``.
    public func backoff(afterAttempts attempts: Int) -> Duration {
        backoff.delay(afterFailures: max(1, attempts))
    }

    /// `delay` with its jittered fraction drawn: `delay × (1 − jitter + draw)`, `draw` in `0...jitter`.
    public func jittered(_ delay: Duration, random: (ClosedRange<Double>) -> Double) -> Duration {
        backoff.jittered(delay, random: random)
    }
}

/// When a tenant's circuit to an APNs endpoint opens, and how it probes before closing again.
public struct CircuitPolicy: Sendable, Hashable {
    /// Consecutive transient failures (500, 503, connection failures) that open the circuit.
    public var failureThreshold: Int = 20
    /// How long an open circuit waits before it lets one probe through.
    public var probeInterval: Duration = .seconds(5)
    /// Each failed probe doubles the wait, up to this.
    public var maxProbeInterval: Duration = .seconds(60)

    public init() {}

    public init(failureThreshold: Int, probeInterval: Duration, maxProbeInterval: Duration) {
        self.failureThreshold = failureThreshold
        self.probeInterval = probeInterval
        self.maxProbeInterval = maxProbeInterval
    }
}

/// Herald's own reasons for a batch item's outcome, beside APNs' reasons.
public enum DeliveryReason {
    /// The item's `apns-expiration` passed before it could be sent: it was not sent.
    public static let expired = "Expired"
    /// Transient failures went on past the item's `max_retry_duration`.
    public static let retryTimeExceeded = "RetryTimeExceeded"
    /// The request may have reached APNs but no answer came (at-most-once: never sent again).
    public static let unknown = "Unknown"
}
