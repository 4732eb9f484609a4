/// A token bucket as a plain value (the `rate-limit` plugin per tenant and topic, the API edge
/// per API key): `rate` tokens a second, holding at most `burst`.
///
/// A reservation may take the bucket below zero: the debt is the wait before the reserved
/// slot, so that waiting senders queue up in order instead of racing.
public struct TokenBucket: Sendable, Hashable {
    public let rate: Double
    public let burst: Double
    public private(set) var tokens: Double
    public private(set) var updated: PushInstant

    public init(rate: Double, burst: Double, now: PushInstant) {
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.updated = now
    }

    /// Adds what accrued since the last update.
    public mutating func refill(now: PushInstant) {
        guard now > updated else { return }
        tokens = min(burst, tokens + Double(updated.nanoseconds(to: now)) / 1e9 * rate)
        updated = now
    }

    /// How long a send taking one token now must wait (zero when a token is there).
    public func wait() -> Duration {
        let after = tokens - 1
        return after >= 0 ? .zero : .seconds(-after / rate)
    }

    /// Takes one token (possibly going into debt).
    public mutating func take() {
        tokens -= 1
    }
}
