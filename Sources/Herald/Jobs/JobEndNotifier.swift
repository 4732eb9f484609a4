import FeedbackPlugin
import Foundation
import HeraldCore
import HeraldStore
import Logging

/// Told when a batch job ends: by the job runner that moved it to `finished`, and by the cancel
/// that moved it to `cancelled`. Only the call that moved the job tells (the store keeps the
/// first final state), and the store records the end as told in the same transaction that
/// queues its event (``JobEndLedger``), so on any number of instances a job's end is told once;
/// an end left untold (the instance stopped between the job's final state and its event, or the
/// store's write failed) is told by the next sweep of any instance (``tellUntoldEnds(endedBefore:)``).
public protocol JobEndNotifier: Sendable {
    /// - Parameters:
    ///   - job: the job, in its final state (`finished` or `cancelled`).
    ///   - progress: its counts as they stood at the end; a cancelled job's items without an
    ///     outcome then (`pending`) are the cancelled ones (sends on the wire at the cancel may
    ///     still get their outcome).
    ///   - at: when it ended (the job's `updated_at`).
    func jobEnded(_ job: Job, progress: JobProgress, at: Date) async
    /// Tells the ends not told yet of the jobs that ended before `endedBefore` (at most a
    /// hundred a call, oldest first).
    func tellUntoldEnds(endedBefore: Date) async
}

/// Where a job's end goes (``WebhookOutbox``): its event, if any, stored with the mark that the
/// end was told, in one transaction.
public protocol JobEndQueue: Sendable {
    /// Records the end of `job` as told and stores `request` (nil: nothing to send) under the
    /// tenant's outbox bound. False when the end was told already. A full outbox records the end
    /// as told without its event and throws (the event is reported, not queued).
    func tellJobEnd(
        _ request: WebhookRequest?, tenant: TenantID, job: JobID, attempts: Int, initialBackoff: Duration, at: Date
    ) async throws -> Bool
    /// ``JobEndLedger/untoldJobEnds(endedBefore:limit:)``.
    func untoldJobEnds(endedBefore: Date, limit: Int) async throws -> [Job]
}

/// Tells the tenant through its webhook (its tenant file's `webhook:` section): a signed
/// `job.finished` or `job.cancelled` event queued in the durable webhook outbox. A tenant without
/// a webhook, or not running any more, is told nothing (the job's report stays in
/// `GET /v1/jobs/{id}`); its end is recorded as told all the same.
public struct TenantWebhookJobNotifier: JobEndNotifier {
    let router: Router
    let queue: any JobEndQueue
    /// Where the sweep reads an untold job's counts.
    let store: any PushStore
    let logger: Logger

    public init(router: Router, queue: any JobEndQueue, store: any PushStore, logger: Logger) {
        self.router = router
        self.queue = queue
        self.store = store
        var logger = logger
        logger[metadataKey: "herald.component"] = "job-events"
        self.logger = logger
    }

    public func jobEnded(_ job: Job, progress: JobProgress, at: Date) async {
        guard job.state.isFinal else { return }
        let event = "job.\(job.state.rawValue)"
        var request: WebhookRequest? = nil
        var attempts = 1
        var backoff = Duration.seconds(1)
        if let tenant = router.runtime(for: job.tenant)?.configuration, let webhook = tenant.webhook {
            let cancelled = job.state == .cancelled ? progress.pending : 0
            let end = TenantWebhook.JobEnd(
                state: job.state.rawValue, jobID: job.id.rawValue, items: job.itemCount, sent: progress.sent, failed: progress.failed,
                unknown: progress.unknown, cancelled: cancelled, endedAt: at)
            request = webhook.jobEndedRequest(tenant: tenant.id, end: end, sentAt: router.configuration.clock.date)
            attempts = webhook.attempts
            backoff = webhook.initialBackoff
        }
        let metadata: Logger.Metadata = ["herald.tenant": "\(job.tenant)", "herald.job": "\(job.id)", "herald.event": "\(event)"]
        do {
            let told = try await queue.tellJobEnd(
                request, tenant: job.tenant, job: job.id, attempts: attempts, initialBackoff: backoff,
                at: router.configuration.clock.date)
            if told, request != nil { logger.info("job end sent to the tenant's webhook", metadata: metadata) }
        } catch let error as WebhookError {
            logger.error("job end webhook not queued", metadata: metadata.merging(["herald.error": "\(error)"]) { $1 })
        } catch {
            logger.warning(
                "job end not recorded; a later sweep tells it",
                metadata: metadata.merging(["herald.error": "\(error)"]) { $1 })
        }
    }

    public func tellUntoldEnds(endedBefore: Date) async {
        let untold: [Job]
        do {
            untold = try await queue.untoldJobEnds(endedBefore: endedBefore, limit: 100)
        } catch {
            logger.warning("cannot list the job ends not told yet; the next sweep tries again", metadata: ["herald.error": "\(error)"])
            return
        }
        for job in untold {
            do {
                guard let progress = try await store.progress(tenant: job.tenant, job: job.id) else { continue }
                logger.info(
                    "telling a job end left untold", metadata: ["herald.tenant": "\(job.tenant)", "herald.job": "\(job.id)"])
                await jobEnded(job, progress: progress, at: job.updatedAt)
            } catch {
                logger.warning(
                    "cannot read an untold job end's counts; the next sweep tries again",
                    metadata: ["herald.tenant": "\(job.tenant)", "herald.job": "\(job.id)", "herald.error": "\(error)"])
            }
        }
    }
}
