/// The one computation of a wait before trying again: `initial × 2^(failures − 1)`, at most
/// `maximum`, of which the fraction `jitter` is drawn at random. A batch item's retries (the
/// tenant's `delivery:` policy), a single send's retries (`retry`), a circuit's probes and a
/// pool's reconnects all wait by it.
public struct ExponentialBackoff: Sendable, Hashable {
    /// The wait after the first failure.
    public var initial: Duration
    /// The longest wait, before jitter.
    public var maximum: Duration
    /// The fraction of each wait drawn at random, in `0...1` (0: none; 1: anywhere from 0 to the
    /// full wait).
    public var jitter: Double

    /// - Parameter jitter: clamped to `0...1`.
    public init(initial: Duration, maximum: Duration, jitter: Double) {
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter.isNaN ? 0 : min(1, max(0, jitter))
    }

    /// The wait after `failures` consecutive failures, before jitter: zero for none, `initial`
    /// after the first, doubled after each later one, at most ``maximum`` (or `initial`, when it
    /// is larger). Never overflows, whatever the count.
    public func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        let cap = max(maximum, initial)
        var delay = initial
        var step = 1
        while step < failures, delay < cap {
            delay *= 2
            step += 1
        }
        return min(delay, cap)
    }

    /// `delay` with its random fraction drawn: `delay × (1 − jitter + draw)`, `draw` taken from
    /// `0...jitter` by `random` and held to that range, so the wait lies in
    /// `[delay × (1 − jitter), delay]`.
    public func jittered(_ delay: Duration, random: (ClosedRange<Double>) -> Double) -> Duration {
        guard jitter > 0 else { return delay }
        let drawn = random(0...jitter)
        let draw = drawn.isNaN ? jitter : min(max(drawn, 0), jitter)
        return delay * (1 - jitter + draw)
    }

    /// The jittered wait after `failures` consecutive failures.
    public func wait(afterFailures failures: Int, random: (ClosedRange<Double>) -> Double) -> Duration {
        jittered(delay(afterFailures: failures), random: random)
    }
}
