import Crypto
import Foundation
import HeraldCore

/// `feedback`: remembers the device tokens APNs reports invalid, refuses later sends to them,
/// and tells the tenant by a signed webhook.
///
/// On 410 Unregistered (and 400 BadDeviceToken / DeviceTokenNotForTopic) it records the token,
/// topic, environment and APNs' timestamp in the tenant's store. Later sends to a recorded token
/// are refused locally (`TokenRefused`, for the reasons listed in `refuse`) until the tenant
/// registers the token again with a registration time later than APNs' timestamp.
///
/// ```yaml
/// plugins:
///   - name: feedback
///     options:
///       webhook: https://hooks.acme.example/apns
///       secret: env:ACME_WEBHOOK_SECRET      # or file:secrets/webhook.key (relative to the tenant file)
///       refuse: [Unregistered]               # default; [] records only
///       webhook_allow_private_addresses: false   # default; true lets the URL reach loopback/private hosts
/// ```
///
/// The webhook is a JSON POST signed with HMAC-SHA256: `X-Herald-Signature: sha256=<hex>` over
/// `<X-Herald-Timestamp>.<body>`. It is retried with backoff on failures and 5xx/429 answers;
/// redirects are not followed (a 3xx is a refusal). Unless the tenant file allows it, a URL
/// whose host resolves to a loopback, link-local or private address is refused (the resolved
/// address is checked, and the connection goes to that address). Under `herald serve` webhooks
/// go through the store's outbox: a fixed number of senders, bounded per tenant, kept across restarts.
public struct FeedbackPluginFactory: PluginFactory {
    public let name = "feedback"

    public init() {}

    public func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware
    {
        FeedbackMiddleware(
            configuration: try FeedbackConfiguration(options: options, secrets: environment.secrets),
            environment: environment)
    }
}

public struct FeedbackConfiguration: Sendable, Hashable {
    /// The reasons that get recorded.
    public static let recordedReasons: Set<APNsReason> = [.unregistered, .badDeviceToken, .deviceTokenNotForTopic]

    public struct Webhook: Sendable, Hashable {
        public var url: String
        public var secret: Secret
        public var attempts: Int = 5
        public var timeout: Duration = .seconds(5)
        public var initialBackoff: Duration = .milliseconds(500)
        /// The URL may reach loopback, link-local and private addresses (`webhook_allow_private_addresses`).
        public var allowPrivateAddresses = false

        public init(url: String, secret: Secret) {
            self.url = url
            self.secret = secret
        }
    }

    /// Recorded reasons for which later sends are refused locally.
    public var refuse: Set<APNsReason> = [.unregistered]
    public var webhook: Webhook?

    public init(refuse: Set<APNsReason> = [.unregistered], webhook: Webhook? = nil) {
        self.refuse = refuse
        self.webhook = webhook
    }

    public init(options: JSONValue, secrets: any SecretResolver) throws(PluginOptionError) {
        let reader = try PluginOptions(
            options,
            allowed: [
                "webhook", "secret", "refuse", "webhook_attempts", "webhook_timeout_ms", "webhook_backoff_ms",
                "webhook_allow_private_addresses",
            ])
        if let reasons = try reader.strings("refuse") {
            var refuse = Set<APNsReason>()
            for name in reasons {
                let reason = APNsReason(wireValue: name)
                guard Self.recordedReasons.contains(reason) else {
                    let known = Self.recordedReasons.map(\.wireValue).sorted().joined(separator: ", ")
                    throw reader.error("refuse", "'\(name)' is not a reason this plugin records (\(known))")
                }
                refuse.insert(reason)
            }
            self.refuse = refuse
        }
        if let url = try reader.string("webhook", default: nil) {
            guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
                scheme == "https" || scheme == "http",
                let host = parsed.host, !host.isEmpty
            else {
                throw reader.error("webhook", "must be an http:// or https:// URL")
            }
            guard let reference = try reader.string("secret", default: nil) else {
                throw reader.error("secret", "is required with 'webhook' (env:NAME or file:PATH), to sign the webhook")
            }
            guard reference.hasPrefix("env:") || reference.hasPrefix("file:") else {
                throw reader.error(
                    "secret", "must be a reference, env:NAME or file:PATH (never the secret itself in the tenant file)")
            }
            let secret: Secret
            do {
                secret = try secrets.resolve(reference)
            } catch {
                throw reader.error("secret", "\(error)")
            }
            guard secret.bytes.count >= 16 else {
                throw reader.error("secret", "the secret from \(secret.origin) is shorter than 16 bytes")
            }
            var webhook = Webhook(url: url, secret: secret)
            webhook.attempts = try reader.int("webhook_attempts", default: 5, range: 1...20)
            webhook.timeout = .milliseconds(try reader.int("webhook_timeout_ms", default: 5_000, range: 100...120_000))
            webhook.initialBackoff = .milliseconds(
                try reader.int("webhook_backoff_ms", default: 500, range: 1...60_000))
            webhook.allowPrivateAddresses = try reader.bool("webhook_allow_private_addresses", default: false)
            self.webhook = webhook
        } else {
            for key in [
                "secret", "webhook_attempts", "webhook_timeout_ms", "webhook_backoff_ms", "webhook_allow_private_addresses",
            ]
            where reader.contains(key) {
                throw reader.error(key, "only means something with 'webhook'")
            }
        }
    }
}

/// The `feedback` middleware for one tenant.
public struct FeedbackMiddleware: SynchronousPushMiddleware {
    public let configuration: FeedbackConfiguration
    private let environment: PluginEnvironment

    public init(configuration: FeedbackConfiguration, environment: PluginEnvironment) {
        self.configuration = configuration
        self.environment = environment
    }

    nonisolated(nonsending) public func send(_ notification: HeraldCore.Notification, context: PushContext, next: PushHandler) async throws
        -> PushResult
    {
        if !configuration.refuse.isEmpty, let topic = notification.topic {
            let record: InvalidTokenRecord?
            do {
                record = try await environment.invalidTokens.invalidToken(
                    notification.deviceToken, topic: topic, environment: context.environment)
            } catch is StoreLookupSkipped {
                // The store failed a lookup moments ago (logged once then): send without waiting.
                record = nil
            } catch {
                // The store is down: sending to a possibly invalid token is the lesser harm.
                context.logger.warning(
                    "invalid-token lookup failed; sending anyway", metadata: ["herald.error": "\(error)"])
                record = nil
            }
            if let record, record.isInvalid, configuration.refuse.contains(record.reason) {
                throw PushError(
                    code: .tokenRefused,
                    message:
                        "APNs reported this device token \(record.reason.wireValue) for '\(topic)' at \(Self.iso(record.invalidSince)); "
                        + "it is refused until the device registers it again later than that",
                    reason: record.reason, field: "device_token")
            }
        }

        let result = try await next.send(notification, context: context)
        await recordIfInvalid(notification, result: result, context: context)
        return result
    }

    /// The hooks' form, for a tenant that refuses no token (``FeedbackConfiguration/refuse``
    /// empty): refusing reads the store, which only the `async` form can.
    public var offersHooks: Bool { configuration.refuse.isEmpty }

    /// Records the token (and queues the webhook) as the `async` form does, as a follow-up:
    /// the send's outcome is handed on once it is recorded.
    public func didSend(
        _ notification: HeraldCore.Notification, context: PushContext, startedAt: ContinuousClock.Instant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp? {
        guard case .success(let result) = outcome, Self.invalidity(notification, result) != nil else { return nil }
        return { await recordIfInvalid(notification, result: result, context: context) }
    }

    /// APNs' reason and the notification's topic when the answer says the token is invalid for
    /// that topic (a reason `feedback` records); nil otherwise.
    private static func invalidity(_ notification: HeraldCore.Notification, _ result: PushResult)
        -> (reason: APNsReason, topic: String)?
    {
        guard let reason = result.reason, FeedbackConfiguration.recordedReasons.contains(reason), let topic = notification.topic
        else { return nil }
        return (reason, topic)
    }

    /// Records the token invalid when APNs said so, and tells the tenant's webhook.
    private func recordIfInvalid(_ notification: HeraldCore.Notification, result: PushResult, context: PushContext) async {
        guard let (reason, topic) = Self.invalidity(notification, result) else { return }
        let record = InvalidTokenRecord(
            token: notification.deviceToken, topic: topic, environment: context.environment, reason: reason,
            apnsTimestamp: result.response.timestamp, recordedAt: environment.clock.date)
        do {
            try await environment.invalidTokens.record(record)
            context.logger.info(
                "device token recorded invalid",
                metadata: ["herald.reason": reason.wireValue, "herald.device-token": notification.deviceToken.redacted])
        } catch {
            context.logger.error("recording an invalid device token failed", metadata: ["herald.error": "\(error)"])
        }
        if let webhook = configuration.webhook {
            let delivery = WebhookDelivery.make(
                record: record, tenant: context.tenant, apnsID: result.notificationID, webhook: webhook,
                sentAt: environment.clock.date)
            if let queue = environment.webhookQueue {
                do {
                    try await queue.enqueue(
                        delivery.request, tenant: context.tenant, attempts: delivery.attempts,
                        initialBackoff: delivery.initialBackoff)
                } catch {
                    context.logger.error(
                        "webhook not queued; the token is recorded invalid but the tenant is not told",
                        metadata: ["herald.error": "\(error)"])
                }
            } else {
                let sender = environment.webhooks
                let clock = environment.clock
                let logger = context.logger
                environment.tasks.run {
                    await delivery.deliver(using: sender, clock: clock, logger: logger)
                }
            }
        }
    }

    static func iso(_ date: Date) -> String {
        date.formatted(.iso8601)
    }
}
