/// How the built-in retry resends a single send: how many attempts, and how long to wait between
/// them. The router resends with the same apns-id, around the whole pipeline: every attempt passes
/// through every middleware, never past the send's deadline. A caller that retries itself (a batch
/// item, under its tenant's delivery policy) gets one attempt.
///
/// Tenants tune it with a `retry` entry in their `plugins:` list (its place in the list does not
/// matter):
///
/// ```yaml
/// plugins:
///   - name: retry
///     options: { max_attempts: 4, initial_backoff_ms: 100, max_backoff_ms: 2000 }
/// ```
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts in all, the first included (1 turns retry off).
    public var maxAttempts: Int = 3
    /// The wait before the second attempt; each later wait doubles, up to ``maxBackoff``.
    public var initialBackoff: Duration = .milliseconds(200)
    public var maxBackoff: Duration = .seconds(5)
    /// The fraction of each wait drawn at random (0: none, 1: anywhere from 0 to the full wait).
    public var jitter: Double = 0.5

    public init() {}

    public init(maxAttempts: Int, initialBackoff: Duration, maxBackoff: Duration, jitter: Double = 0.5) {
        self.maxAttempts = maxAttempts
        self.initialBackoff = initialBackoff
        self.maxBackoff = maxBackoff
        self.jitter = jitter
    }

    /// The option names of the `retry` entry.
    public static let optionNames: Set<String> = ["max_attempts", "initial_backoff_ms", "max_backoff_ms", "jitter"]

    /// Reads the `retry` entry's options.
    public init(options: JSONValue) throws(PluginOptionError) {
        let reader = try PluginOptions(options, allowed: Self.optionNames)
        let defaults = RetryPolicy()
        maxAttempts = try reader.int("max_attempts", default: defaults.maxAttempts, range: 1...10)
        let initial = try reader.int("initial_backoff_ms", default: 200, range: 1...60_000)
        let maximum = try reader.int("max_backoff_ms", default: 5_000, range: 1...300_000)
        guard maximum >= initial else {
            throw reader.error("max_backoff_ms", "must be at least initial_backoff_ms (\(initial)), got \(maximum)")
        }
        initialBackoff = .milliseconds(initial)
        maxBackoff = .milliseconds(maximum)
        let jitterValue: Double
        if reader.contains("jitter") {
            jitterValue = try reader.double("jitter", default: 0.5, greaterThan: -1e-12)
            guard jitterValue <= 1 else { throw reader.error("jitter", "must be between 0 and 1, got \(jitterValue)") }
        } else {
            jitterValue = 0.5
        }
        jitter = jitterValue
    }

    /// The backoff between attempts.
    public var backoff: ExponentialBackoff {
        ExponentialBackoff(initial: initialBackoff, maximum: maxBackoff, jitter: jitter)
    }

    /// The wait after attempt `attempt` failed (1-based), before jitter.
    public func backoff(after attempt: Int) -> Duration {
        backoff.delay(afterFailures: max(1, attempt))
    }
}
