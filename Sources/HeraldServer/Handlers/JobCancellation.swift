import Foundation
import Herald
import HeraldCore
import HeraldStore
import Logging

/// Cancels a batch job: the store first (a final state stays final, so a finish and a cancel
/// cannot both win), then this instance's runner, then the other instances. The one path of the
/// tenant's `POST /v1/jobs/{id}/cancel`, the operator's `POST /admin/tenants/{id}/jobs/{job}/cancel`
/// and the console's cancel button.
struct JobCancellation: Sendable {
    let store: any PushStore
    /// This instance's runner, told of a cancel (nil in tests of the reports alone).
    var runner: JobRunner? = nil
    /// The other instances, told of a cancel (a shared store; nil on SQLite).
    var notifier: (any StoreNotifier)? = nil
    var clock: any PushClock = SystemPushClock()
    var logger = Logger(label: "herald.jobs")
    /// Told of the cancel (the tenant's `job.cancelled` webhook), with the counts as they stood.
    var jobEnded: (any JobEndNotifier)? = nil

    /// Cancels `job` unless it is final, tells this instance's runner and the other instances,
    /// and returns the job as it stands: `cancelled`, or `finished` when the runner finished it
    /// first. A job cancelled already is returned as it is (a repeat is harmless).
    func cancel(_ job: Job, by whom: String) async throws -> Job {
        guard !job.state.isFinal else { return job }
        let (tenant, jobID) = (job.tenant, job.id)
        // In whole milliseconds, as both stores keep it: the answer says what GET will.
        let at = Date(timeIntervalSince1970: (clock.date.timeIntervalSince1970 * 1000).rounded() / 1000)
        guard try await store.updateJob(tenant: tenant, id: jobID, state: .cancelled, at: at) else {
            // Not moved: the runner finished it first, or another cancel came first (the store
            // keeps the first final state). Read which.
            return try await store.job(tenant: tenant, id: jobID) ?? job
        }
        var current = job
        current.state = .cancelled
        current.updatedAt = at
        logger.info("job cancelled", metadata: ["herald.tenant": "\(tenant)", "herald.job": "\(jobID)", "herald.by": "\(whom)"])
        runner?.jobCancelled(tenant: tenant, id: jobID)
        // Told in the background: the answer does not wait on PostgreSQL (an instance that misses
        // it stops at its next claim or lease check anyway). One per job: only the cancel that
        // moved the job gets here.
        if let notifier {
            let logger = self.logger
            Task { await PeerNotifications.tellJobCancelled(notifier, tenant: tenant, job: jobID, logger: logger) }
        }
        if let jobEnded {
            let (store, logger, cancelled) = (self.store, self.logger, current)
            Task {
                do {
                    guard let progress = try await store.progress(tenant: tenant, job: jobID) else { return }
                    await jobEnded.jobEnded(cancelled, progress: progress, at: at)
                } catch {
                    logger.error(
                        "cannot read the cancelled job's counts; its webhook is not sent",
                        metadata: ["herald.tenant": "\(tenant)", "herald.job": "\(jobID)", "herald.error": "\(error)"])
                }
            }
        }
        return current
    }
}
