import FeedbackPlugin
import Foundation
import HeraldCore
import Logging

/// Tells a tenant that its client certificate is about to expire, through the tenant's webhook
/// (its tenant file's `webhook:` section), as a signed `credential.expiring` event queued in the
/// durable webhook outbox. Tenants without a webhook are told nothing (the warning in the log
/// and the gauge remain). The monitor calls it at most once a day per tenant, from 14 days
/// before expiry.
public struct TenantWebhookExpiryNotifier: CredentialExpiryNotifier {
    let queue: any WebhookQueue
    let logger: Logger

    public init(queue: any WebhookQueue, logger: Logger) {
        self.queue = queue
        var logger = logger
        logger[metadataKey: "herald.component"] = "credential-health"
        self.logger = logger
    }

    public func certificateExpiring(_ health: CredentialHealth, tenant: TenantConfiguration, now: Date) async {
        guard let notAfter = health.certificateNotAfter, let webhook = tenant.webhook else { return }
        let request = webhook.credentialExpiringRequest(tenant: tenant.id, notAfter: notAfter, sentAt: now)
        do {
            try await queue.enqueue(
                request, tenant: tenant.id, attempts: webhook.attempts, initialBackoff: webhook.initialBackoff)
            logger.notice(
                "certificate expiry sent to the tenant's webhook", metadata: ["herald.tenant": "\(tenant.id)"])
        } catch {
            logger.error(
                "certificate expiry webhook not queued",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
        }
    }
}
