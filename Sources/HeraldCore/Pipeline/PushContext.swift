/// What a middleware knows about the send in progress besides the notification itself.
public struct PushContext: Sendable {
    // Stored in this order so that the one-byte environment fills the logger's last word: every
    // send's pipeline run holds a context.

    /// The tenant sending. A middleware acts for this tenant only.
    public var tenant: TenantID
    /// A logger whose metadata already names the tenant and the apns-id.
    public var logger: PushLogger
    /// The APNs environment the notification goes to (already resolved from the tenant's default).
    public var environment: APNsEnvironment
    /// 1 for the first attempt; raised for each resend of the built-in retry (``RetryPolicy``).
    public var attempt: Int
    /// When the notification must be answered by. Waits (backoff, rate limits) never go past it.
    public var deadline: PushInstant

    public init(
        tenant: TenantID, environment: APNsEnvironment, logger: PushLogger = .disabled, attempt: Int = 1,
        deadline: PushInstant
    ) {
        self.tenant = tenant
        self.environment = environment
        self.logger = logger
        self.attempt = attempt
        self.deadline = deadline
    }
}
