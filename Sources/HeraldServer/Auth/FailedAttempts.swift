import HeraldCore
import Synchronization

/// Failed credential attempts per source address: each address has a bucket of ``burst`` that
/// refills at ``perMinute``; while it is empty, the address's attempts are refused before any
/// credential is compared, so guessing goes no faster than that from one address, and one
/// address's failures never hold back another's. At most ``maxSources`` addresses are kept (full
/// buckets are dropped first, then the least recently failed), so a caller with many addresses
/// grows nothing without bound.
final class FailedAttempts: Sendable {
    let burst: Int
    let perMinute: Int
    let maxSources: Int
    private let now: @Sendable () -> PushInstant
    private let buckets: Mutex<[String: TokenBucket]> = Mutex([:])

    init(burst: Int = 10, perMinute: Int = 10, maxSources: Int = 4096, now: @escaping @Sendable () -> PushInstant) {
        self.burst = max(1, burst)
        self.perMinute = max(1, perMinute)
        self.maxSources = max(1, maxSources)
        self.now = now
    }

    /// nil when `source` may try now, else how long until it may.
    func wait(source: String?) -> Duration? {
        let instant = now()
        let key = source ?? ""
        return buckets.withLock { buckets in
            guard var bucket = buckets[key] else { return nil }
            bucket.refill(now: instant)
            buckets[key] = bucket
            let wait = bucket.wait()
            return wait == .zero ? nil : wait
        }
    }

    /// Counts a failed attempt from `source`.
    func failed(source: String?) {
        let instant = now()
        let key = source ?? ""
        let fresh = TokenBucket(rate: Double(perMinute) / 60, burst: Double(burst), now: instant)
        buckets.withLock { buckets in
            var bucket = buckets[key] ?? fresh
            bucket.refill(now: instant)
            bucket.take()
            buckets[key] = bucket
            guard buckets.count > maxSources else { return }
            for (address, var other) in buckets {
                other.refill(now: instant)
                if other.tokens >= other.burst { buckets[address] = nil }
            }
            while buckets.count > maxSources, let oldest = buckets.min(by: { $0.value.updated < $1.value.updated })?.key {
                buckets[oldest] = nil
            }
        }
    }
}
