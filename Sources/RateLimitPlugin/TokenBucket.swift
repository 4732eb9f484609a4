/// A token bucket as a plain value: `rate` tokens a second, holding at most `burst`.
///
/// A reservation may take the bucket below zero: the debt is the wait before the reserved
/// slot, so that waiting senders queue up in order instead of racing.
struct TokenBucket: Sendable, Hashable {
    let rate: Double
    let burst: Double
    private(set) var tokens: Double
    private(set) var updated: ContinuousClock.Instant

    init(rate: Double, burst: Double, now: ContinuousClock.Instant) {
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.updated = now
    }

    /// Adds what accrued since the last update.
    mutating func refill(now: ContinuousClock.Instant) {
        guard now > updated else { return }
        tokens = min(burst, tokens + updated.duration(to: now).secondsValue * rate)
        updated = now
    }

    /// How long a send taking one token now must wait (zero when a token is there).
    func wait() -> Duration {
        let after = tokens - 1
        return after >= 0 ? .zero : .seconds(-after / rate)
    }

    /// Takes one token (possibly going into debt).
    mutating func take() {
        tokens -= 1
    }
}

/// The buckets of one tenant: one for the whole tenant, and optionally one per topic.
struct RateLimiterState: Sendable {
    var tenant: TokenBucket
    var topics: [String: TokenBucket] = [:]
    let topicRate: (rate: Double, burst: Double)?

    /// Reserves a slot for a send to `topic`; nil (and nothing reserved) when the slot is
    /// further away than `latest`.
    mutating func reserve(topic: String?, now: ContinuousClock.Instant, latest: ContinuousClock.Instant) -> Reservation
    {
        tenant.refill(now: now)
        var wait = tenant.wait()
        var topicBucket: TokenBucket? = nil
        if let topic, let topicRate {
            var bucket = topics[topic] ?? TokenBucket(rate: topicRate.rate, burst: topicRate.burst, now: now)
            bucket.refill(now: now)
            wait = max(wait, bucket.wait())
            topicBucket = bucket
        }
        let slot = now.advanced(by: wait)
        guard slot <= latest else { return .refused(nextSlot: wait) }
        tenant.take()
        if let topic, var bucket = topicBucket {
            bucket.take()
            topics[topic] = bucket
        }
        return .granted(at: slot)
    }

    enum Reservation: Equatable {
        case granted(at: ContinuousClock.Instant)
        case refused(nextSlot: Duration)
    }
}
