import HeraldCore
import HeraldStore
import Logging

/// One job worked on by a ``JobRunner``: its feeder (``JobFeeder``) claims the pending items one
/// claim at a time into the job's feed, its senders (``JobSendTasks`` or ``JobCallbackSender``)
/// send them under the tenant's permits, its writer records the outcomes in commit groups
/// (``OutcomeGroups``); the job is marked finished when nothing is pending.
struct JobRun: Sendable {
    let job: Job
    let router: Router
    let store: any PushStore
    let configuration: JobRunnerConfiguration
    let delivery: BatchItemDelivery
    let state: JobRunnerState
    /// The tenant's job permits (all its jobs' sends on the wire).
    let permits: PermitPool
    /// Told when this run finishes the job.
    let jobEnded: (any JobEndNotifier)?
    let logger: Logger

    init(
        _ job: Job, router: Router, store: any PushStore, configuration: JobRunnerConfiguration,
        delivery: BatchItemDelivery, state: JobRunnerState, permits: PermitPool, jobEnded: (any JobEndNotifier)?,
        logger: Logger
    ) {
        self.job = job
        self.router = router
        self.store = store
        self.configuration = configuration
        self.delivery = delivery
        self.state = state
        self.permits = permits
        self.jobEnded = jobEnded
        var logger = logger
        logger[metadataKey: "herald.tenant"] = "\(job.tenant)"
        logger[metadataKey: "herald.job"] = "\(job.id)"
        self.logger = logger
    }

    /// When the runner starts the job again after a run.
    enum Resume: Sendable {
        /// Whenever it finds the job unfinished: the run ended because the job is final (finished
        /// or cancelled) or the runner stops.
        case whenFound
        /// At the runner's next periodic scan, not before: the job paused on a transient failure,
        /// or its pending items are leased elsewhere (another instance sends them, or they come
        /// free when a dead instance's leases end). Started again at once, the run would claim
        /// nothing and end again, over and over, until they come back.
        case atNextTick
    }

    /// Works through the job until nothing is pending for this runner, it pauses, it is
    /// cancelled or the runner stops.
    func run() async -> Resume {
        let clock = router.configuration.clock
        let claimant = configuration.claimantName
        do {
            if job.state == .accepted {
                guard try await store.updateJob(tenant: job.tenant, id: job.id, state: .running, at: clock.date) else {
                    // Final (or deleted) since it was read: cancelled, or finished by another
                    // instance. Nothing to do.
                    logger.info("job not started: it is finished or cancelled already")
                    return .whenFound
                }
                logger.info("job started", metadata: ["herald.items": "\(job.itemCount)"])
            } else if configuration.exclusiveStore {
                // Leases of an earlier instance of this runner are taken back now rather than
                // when they end: that process is gone.
                let released = try await store.releaseLeases(
                    tenant: job.tenant, job: job.id, claimantBase: configuration.claimant, keeping: claimant)
                logger.info("job resumed", metadata: ["herald.items": "\(job.itemCount)", "herald.released": "\(released)"])
            } else {
                logger.info("job resumed", metadata: ["herald.items": "\(job.itemCount)"])
            }
        } catch {
            logger.storeFailure("cannot start the job", error: error)
            return .atNextTick
        }

        let claimSize = max(1, configuration.claimSize)
        let senders = max(1, min(configuration.concurrencyPerTenant, claimSize, job.itemCount))
        let outcomes = OutcomeGroups(inFlight: senders, groupSize: configuration.commitGroup)
        let retryWait = DueRetryWait(
            job: job, store: store, clock: clock, longest: configuration.rescanInterval, logger: logger)
        // Once the feed stops, the due retries it never handed out never report: the feeder
        // must not wait for them (it would never return, and neither would the runner's stop).
        // Nor does it wait for retries not due yet: the job's run ends.
        let feed = JobFeed(
            marks: WireMarks(store: store, tenant: job.tenant, job: job.id, claimant: claimant, clock: clock),
            routes: BatchItemDelivery.Routes(logger: logger),
            stopped: {
                outcomes.endWatch()
                retryWait.end()
            })
        let key = JobRunnerState.JobKey(tenant: job.tenant, job: job.id)
        state.register(key, JobRunnerState.RunningJob(feed: feed, retryWait: retryWait))
        defer { state.unregister(key) }
        // Sends without a task each when the tenant's transport has a callback form and the
        // items need no wire mark (``BatchItemDelivery/start``;
        // on a shared store the driving task checks their leases itself, a group at a time).
        let runtime = router.runtime(for: job.tenant)
        let byCallbacks =
            configuration.sendsByCallback
            && runtime.map { $0.startsSendsByCallback && $0.configuration.delivery.guarantee == .atLeastOnce } == true
        // Such a job runs on its transport's home loop: the sends' ends run there, and so does
        // the task that starts the next ones (no wake-up of another thread between the two).
        let executor = byCallbacks && configuration.drivesOnConnectionLoop ? runtime?.transport.sendingExecutor : nil
        let feeder = JobFeeder(
            job: job, store: store, configuration: configuration, clock: clock, state: state, retryWait: retryWait,
            logger: logger)
        // The feeder claims (in this task), the senders send, one writer writes the outcomes;
        // the group returns when all three are done and every change handed over is written.
        let end = await withTaskExecutorPreference(executor) {
            await withDiscardingTaskGroup(returning: JobFeeder.End.self) { group in
                group.addTask { await writeOutcomes(outcomes, feed: feed) }
                group.addTask {
                    if byCallbacks {
                        await JobCallbackSender(
                            job: job, delivery: delivery, store: store, configuration: configuration, state: state,
                            logger: logger
                        ).send(feed, outcomes: outcomes, permits: permits)
                    } else {
                        await JobSendTasks(job: job, delivery: delivery, state: state)
                            .send(feed, outcomes: outcomes, permits: permits, tasks: senders)
                    }
                    outcomes.close()
                }
                let end = await feeder.feed(feed, outcomes: outcomes, lowWater: senders)
                let unsent = feed.finish()
                state.adjust { $0.claimedItemsHeld -= unsent } peak: { _ in }
                return end
            }
        }
        switch (feed.stopReason, end) {
        case (.cancelled, _), (nil, .cancelled):
            logger.info("job cancelled; its items without an outcome are not sent")
            return .whenFound
        case (.pause, _), (nil, .paused):
            logger.warning("job paused; its unsent items stay pending and it resumes at the next scan")
            return .atNextTick
        case (.stopping, _), (nil, .stopped):
            return .whenFound
        case (nil, .done):
            guard !state.isStopping else { return .whenFound }
            return await finishIfDone()
        }
    }

    /// The job's writer: writes its outcomes and next attempts in commit groups
    /// (``PushStore/recordChanges(tenant:job:_:)``) until its senders ended and nothing is
    /// left. A failed write pauses the job: that group's items stay pending in the store.
    private func writeOutcomes(_ outcomes: OutcomeGroups, feed: JobFeed) async {
        let (store, job) = (self.store, self.job)
        let error = await outcomes.runWriter { changes in
            _ = try await store.recordChanges(tenant: job.tenant, job: job.id, changes)
        }
        if let error {
            feed.stop(.pause)
            logger.storeFailure(
                "cannot record job items' outcomes; the job pauses and those items stay pending (sent again or reported unknown when it resumes)",
                error: error)
        }
    }

    /// Marks the job finished when nothing of it is pending: this runner claims nothing more of it.
    private func finishIfDone() async -> Resume {
        do {
            guard let progress = try await store.progress(tenant: job.tenant, job: job.id) else { return .whenFound }
            guard progress.pending == 0 else {
                logger.debug("job has items leased elsewhere; it resumes at the next scan", metadata: ["herald.pending": "\(progress.pending)"])
                return .atNextTick
            }
            let at = router.configuration.clock.date
            guard try await store.updateJob(tenant: job.tenant, id: job.id, state: .finished, at: at) else {
                // Final already (the store keeps the first final state): another instance finished
                // it (its last items were sent here and there), or it was cancelled meanwhile.
                logger.info("job not marked finished here: it is finished or cancelled already")
                return .whenFound
            }
            logger.info(
                "job finished", metadata: ["herald.sent": "\(progress.sent)", "herald.failed": "\(progress.failed)"])
            if let jobEnded {
                var finished = job
                finished.state = .finished
                finished.updatedAt = at
                await jobEnded.jobEnded(finished, progress: progress, at: at)
            }
            return .whenFound
        } catch {
            logger.storeFailure("cannot finish the job", error: error)
            return .atNextTick
        }
    }
}
