/// What a middleware knows about the send in progress besides the notification itself.
public struct PushContext: Sendable {
    /// The tenant sending. A middleware acts for this tenant only.
    public var tenant: TenantID
    /// The APNs environment the notification goes to (already resolved from the tenant's default).
    public var environment: APNsEnvironment
    /// A logger whose metadata already names the tenant and the apns-id.
    public var logger: PushLogger
    /// 1 for the first attempt; the retry middleware raises it for each resend.
    public var attempt: Int
    /// When the notification must be answered by. Waits (backoff, rate limits) never go past it.
    public var deadline: ContinuousClock.Instant
    /// False when the caller retries the notification itself, under its own rules: the job
    /// runner, whose items follow their tenant's delivery policy (backoff, give-up time, circuit).
    /// ``RetryMiddleware`` then makes one attempt and returns what it got; a second layer of
    /// resends would hold a send slot through its backoff and hide attempts from the policy.
    public var retriesInPipeline: Bool

    public init(
        tenant: TenantID, environment: APNsEnvironment, logger: PushLogger = .disabled, attempt: Int = 1,
        deadline: ContinuousClock.Instant, retriesInPipeline: Bool = true
    ) {
        self.tenant = tenant
        self.environment = environment
        self.logger = logger
        self.attempt = attempt
        self.deadline = deadline
        self.retriesInPipeline = retriesInPipeline
    }
}
