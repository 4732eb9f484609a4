/// Whether a send that did not end well is made again, and after how long: the one decision for
/// single sends (the router, under the tenant's `retry` entry and the send's deadline) and batch
/// items (the job runner, under the tenant's `delivery:` policy and `max_retry_duration`), made
/// from the one classification of outcomes (``DeliveryOutcome``) and one backoff
/// (``ExponentialBackoff``). Until when a send may still go is the caller's bound (a deadline, a
/// give-up time); how the decision is carried out (a wait in memory, a retry row in the store)
/// is the caller's too.
///
/// ```swift
/// let rule = ResendRule.batchItem(policy: tenant.delivery)
/// switch rule.decide(DeliveryOutcome(result.response), attempts: 1) { case .again(let wait): … }
/// ```
public struct ResendRule: Sendable, Hashable {
    /// Who resends, and so what may be resent.
    public enum Caller: Sendable, Hashable {
        /// A single send: an API request waiting for its answer. At most `maxAttempts` attempts;
        /// an outcome that may have reached APNs is never resent (the caller gets it as it is),
        /// and a local refusal is the caller's to see, except a full connection queue.
        case singleSend(maxAttempts: Int)
        /// A batch item: every transient outcome is resent until the give-up time; an unknown one
        /// as the guarantee says; a local refusal is deferred, never failed.
        case batchItem(DeliveryGuarantee)
    }

    /// What ``decide(_:attempts:random:)`` decided.
    public enum Decision: Sendable, Hashable {
        /// Not again: the outcome is final (delivered, rejected for good, or out of attempts).
        case final
        /// Again, with the same apns-id, after this wait (zero: at once). It counts as an attempt.
        case again(after: Duration)
        /// Again after this wait, not counted as an attempt: nothing was sent (a local refusal).
        case deferred(after: Duration)
        /// The outcome is unknown (it may have reached APNs) and is not resent: at-most-once.
        case unknown
    }

    public var caller: Caller
    public var backoff: ExponentialBackoff

    public init(caller: Caller, backoff: ExponentialBackoff) {
        self.caller = caller
        self.backoff = backoff
    }

    /// A single send's rule: the tenant's `retry` entry.
    public static func singleSend(policy: RetryPolicy) -> ResendRule {
        ResendRule(caller: .singleSend(maxAttempts: policy.maxAttempts), backoff: policy.backoff)
    }

    /// A batch item's rule: the tenant's `delivery:` policy.
    public static func batchItem(policy: DeliveryPolicy) -> ResendRule {
        ResendRule(caller: .batchItem(policy.guarantee), backoff: policy.backoff)
    }

    /// A local refusal of a batch item (rate limit, full queue, reload, open circuit) is tried
    /// again after about this long.
    public static let localRefusalDelay: Duration = .milliseconds(500)

    /// The decision after an attempt whose outcome is `outcome`.
    /// - Parameters:
    ///   - attempts: the attempts made so far, the one that just ended included.
    ///   - retryAfter: the answer's `retry-after` (``APNsResponse/retryAfter``): a transient
    ///     outcome is resent after the longer of it and the backoff.
    ///   - random: draws the jitter (injected so that tests are exact).
    public func decide(
        _ outcome: DeliveryOutcome, attempts: Int, retryAfter: Duration? = nil,
        random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }
    ) -> Decision {
        switch (outcome, caller) {
        case (.delivered, _), (.permanent, _):
            return .final
        case (.transient, .singleSend(let maxAttempts)):
            guard attempts < maxAttempts else { return .final }
            return .again(after: max(backoff.wait(afterFailures: attempts, random: random), retryAfter ?? .zero))
        case (.transient, .batchItem):
            return .again(after: max(backoff.wait(afterFailures: attempts, random: random), retryAfter ?? .zero))
        case (.unknown, .singleSend), (.unknown, .batchItem(.atMostOnce)):
            return .unknown
        case (.unknown, .batchItem(.atLeastOnce)):
            // At once, same apns-id; the lost connection is gone, so it goes on another.
            return .again(after: .zero)
        case (.deferred(let reason), .singleSend(let maxAttempts)):
            // Backpressure: nothing was sent, and a moment later the queue has room.
            guard reason == PushError.Code.queueFull.description, attempts < maxAttempts else { return .final }
            return .again(after: backoff.wait(afterFailures: attempts, random: random))
        case (.deferred, .batchItem):
            return .deferred(after: backoff.jittered(Self.localRefusalDelay, random: random))
        }
    }
}
