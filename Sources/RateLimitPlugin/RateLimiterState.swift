import HeraldCore

/// The buckets of one tenant: one for the whole tenant, and optionally one per topic.
struct RateLimiterState: Sendable {
    var tenant: TokenBucket
    var topics: [String: TokenBucket] = [:]
    let topicRate: (rate: Double, burst: Double)?

    /// Reserves a slot for a send to `topic`; nil (and nothing reserved) when the slot is
    /// further away than `latest`.
    mutating func reserve(topic: String?, now: PushInstant, latest: PushInstant) -> Reservation
    {
        tenant.refill(now: now)
        if topicRate == nil, tenant.tokens >= 1, now <= latest {
            // A token is there (the usual case): no wait to work out.
            tenant.take()
            return .granted(at: now)
        }
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
        case granted(at: PushInstant)
        case refused(nextSlot: Duration)
    }
}
