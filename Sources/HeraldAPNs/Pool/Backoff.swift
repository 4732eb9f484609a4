import HeraldCore
import NIOCore

/// How long to wait before connecting again after failures: exponential, capped, with jitter
/// (``HeraldCore/ExponentialBackoff``, in NIO's time unit).
///
/// APNs treats rapid connect/disconnect cycles as an attack, so every failed or short-lived
/// connection doubles the wait (up to ``maximum``), and each wait is spread at random over
/// `[(1 - jitter) × d, d]` so that many pools never reconnect in step.
public struct Backoff: Sendable, Hashable {
    /// The wait after the first failure.
    public var base: TimeAmount
    /// The longest wait.
    public var maximum: TimeAmount
    /// The fraction of each wait that is random, in `0...1`.
    public var jitter: Double

    public init(base: TimeAmount = .milliseconds(100), maximum: TimeAmount = .seconds(30), jitter: Double = 0.5) {
        self.base = base
        self.maximum = maximum
        self.jitter = Swift.min(1, Swift.max(0, jitter))
    }

    /// The wait before the next attempt after `failures` consecutive failures (0: none).
    public func delay(afterFailures failures: Int, using random: inout some RandomNumberGenerator) -> TimeAmount {
        let backoff = ExponentialBackoff(
            initial: .nanoseconds(base.nanoseconds), maximum: .nanoseconds(maximum.nanoseconds), jitter: jitter)
        let wait = backoff.wait(afterFailures: failures) { Double.random(in: $0, using: &random) }
        return .nanoseconds(wait.nanoseconds)
    }
}
