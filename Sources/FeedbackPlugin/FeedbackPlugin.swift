import Crypto
import Foundation
import HeraldCore

/// `feedback`: remembers the device tokens APNs reports invalid, refuses later sends to them,
/// and tells the tenant by a signed webhook.
///
/// On 410 Unregistered or ExpiredToken (a Live Activity's token after the activity ended), and
/// on 400 BadDeviceToken / DeviceTokenNotForTopic, it records the token,
/// topic, environment and APNs' timestamp in the tenant's store. Later sends to a recorded token
/// are refused locally (`TokenRefused`, for the reasons listed in `refuse`) until the tenant
/// registers the token again with a registration time later than APNs' timestamp.
///
/// ```yaml
/// plugins:
///   - name: feedback
///     options:
///       refuse: [Unregistered, ExpiredToken] # default; [] records only
/// webhook:                                   # the tenant's webhook: every event goes there
///   url: https://hooks.acme.example/apns
///   secret: env:ACME_WEBHOOK_SECRET          # or file:secrets/webhook.key (relative to the tenant file)
/// ```
///
/// Each recorded token is a `device_token.invalid` event to the tenant's webhook
/// (``PluginEnvironment/webhook``, the tenant file's `webhook:` section), a JSON POST signed
/// with HMAC-SHA256: `X-Herald-Signature: sha256=<hex>` over `<X-Herald-Timestamp>.<body>`. It is
/// retried with backoff on failures and 5xx/429 answers; redirects are not followed (a 3xx is a
/// refusal). Unless the tenant file allows it, a URL whose host resolves to a loopback,
/// link-local or private address is refused (the resolved address is checked, and the
/// connection goes to that address). Under `herald serve` webhooks go through the store's
/// outbox: a fixed number of senders, bounded per tenant, kept across restarts.
///
/// The options `webhook`, `secret` and `webhook_*` are accepted and not read here: the tenant
/// file loader reads them as the tenant's webhook when the file has no `webhook:` section, with
/// a deprecation warning.
public struct FeedbackPluginFactory: PluginFactory {
    public let name = "feedback"

    public init() {}

    public func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware
    {
        FeedbackMiddleware(
            configuration: try FeedbackConfiguration(options: options),
            environment: environment)
    }
}

public struct FeedbackConfiguration: Sendable, Hashable {
    /// The reasons that get recorded.
    public static let recordedReasons: Set<APNsReason> = [
        .unregistered, .expiredToken, .badDeviceToken, .deviceTokenNotForTopic,
    ]

    /// Recorded reasons for which later sends are refused locally.
    public var refuse: Set<APNsReason> = Self.defaultRefused

    /// The reasons refused when `refuse` is not given: the token is gone for good.
    public static let defaultRefused: Set<APNsReason> = [.unregistered, .expiredToken]

    public init(refuse: Set<APNsReason> = Self.defaultRefused) {
        self.refuse = refuse
    }

    /// Reads `refuse`. The webhook options (``TenantWebhook/feedbackOptionKeys``) are accepted
    /// and left to the tenant file loader, which reads them as the tenant's webhook.
    public init(options: JSONValue) throws(PluginOptionError) {
        let reader = try PluginOptions(options, allowed: Set(["refuse"] + TenantWebhook.feedbackOptionKeys))
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
    }
}

/// The `feedback` middleware for one tenant.
public struct FeedbackMiddleware: PushMiddleware {
    public let configuration: FeedbackConfiguration
    private let environment: PluginEnvironment

    public init(configuration: FeedbackConfiguration, environment: PluginEnvironment) {
        self.configuration = configuration
        self.environment = environment
    }

    /// With tokens to refuse (``FeedbackConfiguration/refuse``): a check of the token in the
    /// tenant's store before the send, refusing one recorded invalid. The check answers by
    /// callback: the lookups of the tenant's sends under way are read together, without a task
    /// each.
    public func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
        // A broadcast goes to a channel: no device token to refuse.
        guard !configuration.refuse.isEmpty, let token = notification.deviceToken else { return .proceed }
        let topic = notification.topic
        let (refuse, invalidTokens) = (configuration.refuse, environment.invalidTokens)
        return .check(answering: { answer in
            invalidTokens.lookUp(token, topic: topic, environment: context.environment) { found in
                answer(Self.verdict(found, refuse: refuse, topic: topic, context: context))
            }
        })
    }

    /// A lookup's verdict: a refusal for a token recorded invalid for a reason in `refuse`; a
    /// failed lookup lets the send go (logged, unless the lookup was skipped after a failure).
    private static func verdict(
        _ found: Result<InvalidTokenRecord?, any Error>, refuse: Set<APNsReason>, topic: String, context: PushContext
    ) -> Result<Void, any Error> {
        let record: InvalidTokenRecord?
        switch found {
        case .success(let found):
            record = found
        case .failure(is StoreLookupSkipped):
            // The store failed a lookup moments ago (logged once then): send without waiting.
            record = nil
        case .failure(let error):
            // The store is down: sending to a possibly invalid token is the lesser harm.
            context.logger.warning("invalid-token lookup failed; sending anyway", metadata: ["herald.error": "\(error)"])
            record = nil
        }
        guard let record, record.isInvalid, refuse.contains(record.reason) else { return .success(()) }
        return .failure(
            PushError(
                code: .tokenRefused,
                message:
                    "APNs reported this device token \(record.reason.wireValue) for '\(topic)' at \(iso(record.invalidSince)); "
                    + "it is refused until the device registers it again later than that",
                reason: record.reason, field: "device_token"))
    }

    /// Records the token (and queues the webhook) when APNs said it is invalid, as a follow-up:
    /// the send's outcome is handed on once it is recorded.
    public func didSend(
        _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp? {
        guard case .success(let result) = outcome, Self.invalidity(notification, result) != nil else { return nil }
        return { await recordIfInvalid(notification, result: result, context: context) }
    }

    /// APNs' reason and the notification's topic when the answer says the token is invalid for
    /// that topic (a reason `feedback` records); nil otherwise.
    private static func invalidity(_ notification: AdmittedNotification, _ result: PushResult)
        -> (reason: APNsReason, topic: String)?
    {
        guard notification.deviceToken != nil, let reason = result.reason,
            FeedbackConfiguration.recordedReasons.contains(reason)
        else { return nil }
        return (reason, notification.topic)
    }

    /// Records the token invalid when APNs said so, and tells the tenant's webhook (if it has one).
    private func recordIfInvalid(_ notification: AdmittedNotification, result: PushResult, context: PushContext) async {
        guard let (reason, topic) = Self.invalidity(notification, result), let token = notification.deviceToken else { return }
        let record = InvalidTokenRecord(
            token: token, topic: topic, environment: context.environment, reason: reason,
            apnsTimestamp: result.response.timestamp, recordedAt: environment.clock.date)
        do {
            try await environment.invalidTokens.record(record)
            context.logger.info(
                "device token recorded invalid",
                metadata: ["herald.reason": reason.wireValue, "herald.device-token": token.redacted])
        } catch {
            context.logger.error("recording an invalid device token failed", metadata: ["herald.error": "\(error)"])
        }
        if let webhook = environment.webhook {
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
