import FeedbackPlugin
import Foundation
import HeraldCore
import Logging

/// Tells a tenant that its client certificate is about to expire, through the webhook of its
/// `feedback` plugin (the tenant's one configured callback), as a signed `credential.expiring`
/// event queued in the durable webhook outbox. Tenants without a feedback webhook are told
/// nothing (the warning in the log and the gauge remain). The monitor calls it at most once a
/// day per tenant, from 14 days before expiry.
public struct FeedbackWebhookExpiryNotifier: CredentialExpiryNotifier {
    let queue: any WebhookQueue
    let environment: [String: String]
    let logger: Logger

    public init(queue: any WebhookQueue, environment: [String: String], logger: Logger) {
        self.queue = queue
        self.environment = environment
        var logger = logger
        logger[metadataKey: "herald.component"] = "credential-health"
        self.logger = logger
    }

    public func certificateExpiring(_ health: CredentialHealth, tenant: TenantConfiguration, now: Date) async {
        guard let notAfter = health.certificateNotAfter,
            let webhook = FeedbackWebhookTarget.webhook(
                of: tenant, environment: environment, logger: logger, event: "credential.expiring")
        else { return }
        let request = webhook.credentialExpiringRequest(tenant: tenant.id, notAfter: notAfter, sentAt: now)
        do {
            try await queue.enqueue(request, tenant: tenant.id, attempts: webhook.attempts, initialBackoff: webhook.initialBackoff)
            logger.notice("certificate expiry sent to the tenant's webhook", metadata: ["herald.tenant": "\(tenant.id)"])
        } catch {
            logger.error(
                "certificate expiry webhook not queued", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
        }
    }
}
