import FeedbackPlugin
import Foundation
import HeraldCore
import HeraldStore
import Logging

/// Told when a batch job ends: by the job runner that moved it to `finished`, and by the cancel
/// that moved it to `cancelled`. Only the call that moved the job tells (the store keeps the
/// first final state), so on any number of instances a job's end is told once.
public protocol JobEndNotifier: Sendable {
    /// - Parameters:
    ///   - job: the job, in its final state (`finished` or `cancelled`).
    ///   - progress: its counts as they stood at the end; a cancelled job's items without an
    ///     outcome then (`pending`) are the cancelled ones (sends on the wire at the cancel may
    ///     still get their outcome).
    func jobEnded(_ job: Job, progress: JobProgress, at: Date) async
}

/// Tells the tenant through the webhook of its `feedback` plugin: a signed `job.finished` or
/// `job.cancelled` event queued in the durable webhook outbox. A tenant without a feedback
/// webhook, or no longer running, is told nothing (the job's report stays in `GET /v1/jobs/{id}`).
public struct FeedbackWebhookJobNotifier: JobEndNotifier {
    let router: Router
    let queue: any WebhookQueue
    let logger: Logger

    public init(router: Router, queue: any WebhookQueue, logger: Logger) {
        self.router = router
        self.queue = queue
        var logger = logger
        logger[metadataKey: "herald.component"] = "job-events"
        self.logger = logger
    }

    public func jobEnded(_ job: Job, progress: JobProgress, at: Date) async {
        guard job.state.isFinal, let tenant = router.runtime(for: job.tenant)?.configuration else { return }
        let event = "job.\(job.state.rawValue)"
        guard
            let webhook = FeedbackWebhookTarget.webhook(
                of: tenant, environment: router.configuration.environment, logger: logger, event: event)
        else { return }
        let cancelled = job.state == .cancelled ? progress.pending : 0
        let end = FeedbackConfiguration.Webhook.JobEnd(
            state: job.state.rawValue, jobID: job.id.rawValue, items: job.itemCount, sent: progress.sent, failed: progress.failed,
            unknown: progress.unknown, cancelled: cancelled, endedAt: at)
        let request = webhook.jobEndedRequest(tenant: tenant.id, end: end, sentAt: router.configuration.clock.date)
        do {
            try await queue.enqueue(request, tenant: tenant.id, attempts: webhook.attempts, initialBackoff: webhook.initialBackoff)
            logger.info(
                "job end sent to the tenant's webhook",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.job": "\(job.id)", "herald.event": "\(event)"])
        } catch {
            logger.error(
                "job end webhook not queued",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.job": "\(job.id)", "herald.error": "\(error)"])
        }
    }
}
