import HeraldCore
import Synchronization

/// The request rate of each API key at the API edge: a token bucket per key, checked before a
/// request does any work. Separate from the `rate-limit` plugin, which paces notifications to
/// APNs per tenant; this one keeps one key's flood of requests (sends, batches, polls) from
/// taking the listener from everyone else.
///
/// The buckets are keyed by the key's SHA-256 (never the key): at most one per configured key,
/// and ``retain(_:)`` drops the buckets of keys a reload removed.
final class APIKeyRateLimiter: Sendable {
    let requestsPerSecond: Double
    let burst: Double
    private let clock: any PushClock
    private let buckets = Mutex<[String: TokenBucket]>([:])

    init(requestsPerSecond: Double, burst: Int, clock: any PushClock) {
        self.requestsPerSecond = requestsPerSecond
        self.burst = Double(burst)
        self.clock = clock
    }

    /// Takes one request from `key`'s bucket: nil when admitted, else how long until one would be.
    func admit(_ key: String) -> Duration? {
        let now = clock.now
        return buckets.withLock { buckets in
            var bucket = buckets[key] ?? TokenBucket(rate: requestsPerSecond, burst: burst, now: now)
            bucket.refill(now: now)
            let wait = bucket.wait()
            if wait == .zero { bucket.take() }
            buckets[key] = bucket
            return wait == .zero ? nil : wait
        }
    }

    /// Forgets the buckets of keys not in `keys`.
    func retain(_ keys: Set<String>) {
        buckets.withLock { buckets in
            buckets = buckets.filter { keys.contains($0.key) }
        }
    }

    /// Whole seconds to put in `Retry-After` for `wait` (at least 1).
    static func retryAfterSeconds(_ wait: Duration) -> Int {
        let seconds = wait.secondsValue.rounded(.up)
        guard seconds.isFinite, seconds >= 1 else { return 1 }
        return seconds >= 86_400 ? 86_400 : Int(seconds)
    }
}
