/// How the built-in retry resends: how many attempts, and how long to wait between them.
///
/// Tenants tune it with a `retry` entry in their `plugins:` list (the entry's place in the list
/// is also the retry's place in the pipeline; without one, retry is the outermost step):
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

    /// True for answers APNs gave without delivering, where a later resend may succeed:
    /// 500 InternalServerError, 503 ServiceUnavailable/Shutdown, 429 TooManyRequests.
    public static func isRetryable(_ response: APNsResponse) -> Bool {
        switch response.status {
        case 500, 503: return true
        case 429: return response.reason == .tooManyRequests
        default: return false
        }
    }

    /// True for failures where the notification surely did not reach APNs' processing: only a
    /// transport failure that says so. Anything that may have been processed is never resent.
    public static func isRetryable(_ error: any Error) -> Bool {
        guard let error = error as? PushError else { return false }
        return (error.code == .transport || error.code == .queueFull) && !error.mayHaveReachedAPNs
    }
}

/// Resends a notification, with the same apns-id, after a retryable answer or failure (see
/// ``RetryPolicy``), with exponential backoff and jitter, never past the deadline.
///
/// Every attempt goes through the middlewares after this one with `context.attempt` raised. A
/// send whose caller retries itself (``PushContext/retriesInPipeline`` false: the job runner's
/// items) gets one attempt here. Such a send may also take the hooks
/// (``SynchronousPushMiddleware``): with one attempt there is nothing to do around it.
public struct RetryMiddleware: SynchronousPushMiddleware {
    public let policy: RetryPolicy
    private let clock: any PushClock
    private let random: @Sendable (ClosedRange<Double>) -> Double

    public init(
        policy: RetryPolicy, clock: any PushClock = SystemPushClock(),
        random: @escaping @Sendable (ClosedRange<Double>) -> Double = { Double.random(in: $0) }
    ) {
        self.policy = policy
        self.clock = clock
        self.random = random
    }

    nonisolated(nonsending) public func send(_ notification: Notification, context: PushContext, next: PushHandler) async throws -> PushResult {
        // The caller retries under its own rules (a batch item's delivery policy): one attempt.
        guard context.retriesInPipeline else { return try await next.send(notification, context: context) }
        var context = context
        let first = context.attempt
        while true {
            let outcome: Result<PushResult, any Error>
            do {
                outcome = .success(try await next.send(notification, context: context))
            } catch {
                outcome = .failure(error)
            }
            let retryable: Bool
            switch outcome {
            case .success(let result): retryable = RetryPolicy.isRetryable(result.response)
            case .failure(let error): retryable = RetryPolicy.isRetryable(error)
            }
            let attemptsMade = context.attempt - first + 1
            guard retryable, attemptsMade < policy.maxAttempts, !Task.isCancelled else {
                return try outcome.get()
            }
            // Only for the log lines of a resend (not made on the common path).
            let what: String
            switch outcome {
            case .success(let result): what = result.reason?.wireValue ?? String(result.status)
            case .failure(let error): what = (error as? PushError)?.code.description ?? "error"
            }
            let wait = policy.backoff.wait(afterFailures: attemptsMade, random: random)
            guard clock.now.advanced(by: wait) < context.deadline else {
                context.logger.debug(
                    "not retrying: the backoff would pass the deadline",
                    metadata: ["herald.attempt": "\(context.attempt)", "herald.outcome": what])
                return try outcome.get()
            }
            context.logger.debug(
                "retrying",
                metadata: [
                    "herald.attempt": "\(context.attempt)", "herald.outcome": what,
                    "herald.backoff-ms": "\(Int(wait.secondsValue * 1000))",
                ])
            try await clock.sleep(until: clock.now.advanced(by: wait))
            context.attempt += 1
        }
    }
}

extension RetryMiddleware {
    /// Only a send whose caller retries itself: the resends of the `async` form wait (backoff).
    public func hooksApply(to context: PushContext) -> Bool { !context.retriesInPipeline }

    public func didSend(
        _ notification: Notification, context: PushContext, startedAt: ContinuousClock.Instant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp? { nil }
}
