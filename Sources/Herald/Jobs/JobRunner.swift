import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// How a ``JobRunner`` works through accepted batch jobs.
public struct JobRunnerConfiguration: Sendable, Hashable {
    /// Notifications of one tenant's jobs on the wire at once (all its jobs together). It also
    /// bounds the runner's send tasks: each job worked on has at most this many.
    public var concurrencyPerTenant: Int = 100
    /// Items claimed from the store at a time, per job. A job worked on holds at most one claim's
    /// items not yet handed to a send task plus its send tasks' count of the last claim's (the
    /// next claim is made when no more than that are left), and the items its send tasks took,
    /// one each.
    public var claimSize: Int = 500
    /// Outcomes of a job written to the store in one transaction, at most (a commit group). The
    /// send tasks do not wait for their outcomes to be written: a job's items sent without a
    /// durable outcome are at most its sends on the wire (``concurrencyPerTenant``) plus this
    /// many, which bounds the items sent again after a crash under at-least-once.
    public var commitGroup: Int = 64
    /// Jobs of one tenant worked on at once (its other unfinished jobs wait in the store, oldest
    /// first). With ``claimSize`` and ``concurrencyPerTenant`` it bounds the runner's memory and
    /// tasks per tenant, however many unfinished jobs the store holds.
    public var jobsPerTenant: Int = 2
    /// How long a claim holds its items; after that another claimant may take them.
    public var lease: Duration = .seconds(300)
    /// The base of the name items are claimed under (`jobs.claimant`). Each runner claims as
    /// ``claimantName`` (`<claimant>/<instance>`). With ``exclusiveStore``, when it resumes a job
    /// it first takes back the leases of earlier instances of the same base name (their process
    /// is gone: one process at a time holds the store, see `StoreLock`).
    public var claimant: String = "herald"
    /// True when this runner's process is the store's only user (SQLite, under `StoreLock`):
    /// leases of other instances of the same base name are taken back when a job resumes. False
    /// for a store shared by several instances (PostgreSQL): their leases are live; those of a
    /// dead instance are released by the instance registry (`InstanceHeartbeat`) or end.
    public var exclusiveStore: Bool = true
    /// This runner's instance, unique per process (a random id unless a test sets one).
    public var instance: String = String(UUID().uuidString.lowercased().prefix(8))
    /// True: a job whose items can be sent by callback (``JobRunner``'s `drive`: at-least-once,
    /// every middleware with hooks, a transport with a callback form; on a shared store the
    /// driving task checks its items' leases a group at a time) is sent that way, by one task,
    /// instead of by send tasks. On by default and in `herald serve`; false keeps send tasks for
    /// every job (tests compare the two paths).
    public var sendsByCallback: Bool = true
    /// True: such a job's feeder, driving task and writer task run on the executor its tenant's
    /// transport offers (``PushTransport/sendingExecutor``: the event loop its connection answers
    /// on), so the sends' ends and the driving task's next sends share one thread: less CPU an
    /// item, but the job's steps then run on a loop without preemption, and whatever else that
    /// loop serves (other tenants' API requests) waits behind them. False (the default, and
    /// `herald serve`'s unless `jobs.on_connection_loop` is set) keeps them on the global executor.
    public var drivesOnConnectionLoop: Bool = false

    /// How often the runner looks for unfinished jobs on its own (jobs of tenants loaded later,
    /// jobs paused by a transient failure). New jobs start at once through ``JobRunner/jobAccepted(_:)``.
    public var rescanInterval: Duration = .seconds(5)

    /// How often the runner tells the job ends left untold (``JobEndNotifier/tellUntoldEnds(endedBefore:)``:
    /// an instance stopped between a job's final state and its event, or the store's write
    /// failed), and how long after its end a job is left to the call that ended it first.
    public var untoldEndsInterval: Duration = .seconds(30)
    public var untoldEndsGrace: Duration = .seconds(30)

    /// The name this runner claims items under: `<claimant>/<instance>`.
    public var claimantName: String { "\(claimant)/\(instance)" }

    /// How often the runner renews the leases of the jobs it works on: a third of ``lease``
    /// (at least 10 ms), so that a lease never ends while its items are being worked on.
    public var renewInterval: Duration { max(lease / 3, .milliseconds(10)) }

    public init() {}
}

/// Counters of the runner's work, for tests and benchmarks (the bounds hold at every moment).
public struct JobRunnerStatistics: Sendable, Hashable {
    /// Item sends under way now (a permit held; on the wire or being recorded).
    public var itemsInFlight = 0
    /// The most item sends under way at once, since the runner was made.
    public var peakItemsInFlight = 0
    /// Send tasks alive now (each takes items one at a time, under a tenant permit).
    public var sendTasks = 0
    public var peakSendTasks = 0
    /// Claimed items held in memory now (all jobs together).
    public var claimedItemsHeld = 0
    public var peakClaimedItemsHeld = 0
    /// Jobs being worked on now.
    public var activeJobs = 0
    public var peakActiveJobs = 0
}

/// Sends the items of accepted batch jobs through the ``Router``, with bounded concurrency per
/// tenant, and records each item's outcome in the store.
///
/// Durability rests on the store: a job and all its items are stored before the API accepts
/// it; an item's outcome is recorded as soon as its send ends; items are claimed under this
/// runner's claimant name. After a crash, the next runner resumes every job that is not
/// finished: items with a recorded outcome are never sent again. Each request is marked "on the
/// wire" in the store before it is written (``WireMarks``, one write for the sends that start
/// together) — except an at-least-once item when this process has the store to itself
/// (``JobRunnerConfiguration/exclusiveStore``), which is sent again after a crash either way; an
/// item claimed again with that mark and no outcome (its request may have reached APNs, or its
/// answer arrived but was not recorded) is sent again with the same apns-id under
/// at-least-once, and recorded `unknown` without a send under at-most-once. When an outcome
/// cannot be recorded, the job stops sending at once (the rest of its claimed items stay
/// pending) and resumes at a later scan.
///
/// Memory and tasks are bounded by configuration, not by the store: per tenant, at most
/// ``JobRunnerConfiguration/jobsPerTenant`` jobs are worked on, each holding at most one claim
/// and as many items as it has send tasks not handed out (``JobFeed``) and at most
/// ``JobRunnerConfiguration/concurrencyPerTenant`` send tasks with one item each; the tenant's
/// permits bound the sends on the wire for all its jobs together.
///
/// ```swift
/// let runner = JobRunner(router: router, store: store)
/// async let running: Void = runner.run()
/// runner.jobAccepted(job)      // after the API stored it
/// runner.stop()                // graceful: in-flight sends finish, the rest stays pending
/// await running
/// ```
public final class JobRunner: Sendable {
    public let configuration: JobRunnerConfiguration
    private let router: Router
    private let store: any PushStore
    private let logger: Logger
    private let permits: TenantPermits
    private let events: AsyncStream<Event>
    private let eventSink: AsyncStream<Event>.Continuation
    private let state = Mutex(State())
    private let delivery: BatchItemDelivery
    /// Told when this runner finishes a job (the tenant's `job.finished` webhook).
    private let jobEnded: (any JobEndNotifier)?

    private enum Event: Sendable {
        /// The periodic scan: every unfinished job, paused ones included.
        case tick
        /// A scan for jobs waiting for a slot (paused jobs wait for the next tick).
        case scan
        case job(Job)
        /// Another instance stored a job (a notification): read it and start it.
        case stored(TenantID, JobID)
    }

    private struct JobKey: Hashable, Sendable {
        var tenant: TenantID
        var job: JobID
    }

    private struct State {
        var started = false
        var stopping = false
        var running: Set<JobKey> = []
        var runningPerTenant: [TenantID: Int] = [:]
        /// Jobs that paused on a transient failure: only the periodic scan starts them again.
        var paused: Set<JobKey> = []
        /// The feeds of the jobs being worked on (a cancel stops one).
        var feeds: [JobKey: JobFeed] = [:]
        var statistics = JobRunnerStatistics()
    }

    public init(
        router: Router, store: any PushStore, configuration: JobRunnerConfiguration = JobRunnerConfiguration(), logger: Logger? = nil,
        jobEnded: (any JobEndNotifier)? = nil
    ) {
        self.router = router
        self.jobEnded = jobEnded
        self.store = store
        self.configuration = configuration
        var logger = logger ?? router.configuration.logger
        logger[metadataKey: "herald.component"] = "job-runner"
        self.logger = logger
        self.permits = TenantPermits(permitsPerTenant: max(1, configuration.concurrencyPerTenant))
        self.delivery = BatchItemDelivery(
            router: router, random: { Double.random(in: $0) }, exclusiveStore: configuration.exclusiveStore)
        (events, eventSink) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
    }

    // MARK: Control

    /// Starts a freshly stored job at once if its tenant has a free job slot (otherwise it
    /// starts when one frees; the periodic scan would find it too).
    public func jobAccepted(_ job: Job) {
        eventSink.yield(.job(job))
    }

    /// A job was stored by another instance (a notification from the shared store): it is read
    /// and started as ``jobAccepted(_:)`` would.
    public func jobStored(tenant: TenantID, id: JobID) {
        eventSink.yield(.stored(tenant, id))
    }

    /// The job was cancelled in the store (through this instance's API, or another's, which
    /// told this one): if this runner works on it, its feed stops now — nothing more is handed
    /// out, the sends on the wire finish and their outcomes are recorded, and the job ends
    /// (cancelled, not paused). A runner that was not told stops at its next claim or lease
    /// check, which a cancelled job fails.
    public func jobCancelled(tenant: TenantID, id: JobID) {
        let feed = state.withLock { $0.feeds[JobKey(tenant: tenant, job: id)] }
        feed?.stop(.cancelled)
    }

    /// Looks for unfinished jobs now (after tenants were loaded or reloaded).
    public func rescan() {
        eventSink.yield(.tick)
    }

    /// Graceful stop: no new item is sent; sends on the wire finish and their outcomes are
    /// recorded; everything else stays pending in the store. ``run()`` returns when that is done.
    public func stop() {
        let first = state.withLock { state -> Bool in
            defer { state.stopping = true }
            return !state.stopping
        }
        if first { eventSink.finish() }
    }

    /// True once ``stop()`` was called.
    public var isStopping: Bool { state.withLock { $0.stopping } }

    /// The tenant's job permits held now: its sends on the wire, and permits its jobs' driving
    /// tasks took ahead. 0 once its jobs are idle.
    public func permitsHeld(by tenant: TenantID) -> Int {
        guard let pool = permits.existingPool(for: tenant) else { return 0 }
        return pool.permits - pool.counts.available
    }

    /// Jobs being worked on now.
    public var activeJobCount: Int { state.withLock { $0.running.count } }

    /// Item sends under way now (a tenant permit held).
    public var itemsInFlight: Int { state.withLock { $0.statistics.itemsInFlight } }

    /// The runner's counters now, with their peaks.
    public var statistics: JobRunnerStatistics { state.withLock { $0.statistics } }

    // MARK: Running

    /// Resumes every unfinished job of the loaded tenants, then runs new ones until ``stop()``.
    /// Call it once.
    public func run() async {
        let first = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started
        }
        guard first else {
            logger.error("job runner started twice; the second run returns at once")
            return
        }
        logger.info("job runner started", metadata: ["herald.claimant": "\(configuration.claimantName)"])
        let interval = configuration.rescanInterval
        let renewal = configuration.renewInterval
        let sink = eventSink
        await withDiscardingTaskGroup { jobs in
            await withTaskGroup(of: Void.self) { ticker in
                ticker.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: interval)
                        sink.yield(.tick)
                    }
                }
                ticker.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: renewal)
                        if Task.isCancelled { break }
                        await self.renewLeases()
                    }
                }
                if let jobEnded = self.jobEnded {
                    let (every, grace) = (self.configuration.untoldEndsInterval, Self.seconds(self.configuration.untoldEndsGrace))
                    let clock = self.router.configuration.clock
                    ticker.addTask {
                        while !Task.isCancelled {
                            try? await Task.sleep(for: every)
                            if Task.isCancelled { break }
                            await jobEnded.tellUntoldEnds(endedBefore: clock.date.addingTimeInterval(-grace))
                        }
                    }
                }
                await self.scan(into: &jobs, includingPaused: true)
                for await event in self.events {
                    if self.isStopping { break }
                    switch event {
                    case .tick: await self.scan(into: &jobs, includingPaused: true)
                    case .scan: await self.scan(into: &jobs, includingPaused: false)
                    case .job(let job): self.start(job, in: &jobs, includingPaused: false)
                    case .stored(let tenant, let id):
                        guard self.router.runtime(for: tenant) != nil else { continue }
                        do {
                            if let job = try await self.store.job(tenant: tenant, id: id), !job.state.isFinal {
                                self.start(job, in: &jobs, includingPaused: false)
                            }
                        } catch {
                            self.logger.warning(
                                "cannot read a job another instance stored; the next scan finds it",
                                metadata: ["herald.tenant": "\(tenant)", "herald.job": "\(id)", "herald.error": "\(error)"])
                        }
                    }
                }
                ticker.cancelAll()
            }
        }
        logger.info("job runner stopped")
    }

    /// Extends the leases this runner holds on the items of every job it works on by one
    /// ``JobRunnerConfiguration/lease`` from now. A failure is logged: the next renewal tries
    /// again (a lease lasts three renewal intervals).
    private func renewLeases() async {
        let running = state.withLock { Array($0.running) }
        guard !running.isEmpty else { return }
        let clock = router.configuration.clock
        let claimant = configuration.claimantName
        let leaseSeconds = Self.seconds(configuration.lease)
        for key in running {
            do {
                try await store.renewLeases(
                    tenant: key.tenant, job: key.job, claimant: claimant,
                    leaseUntil: clock.date.addingTimeInterval(leaseSeconds))
            } catch {
                logger.warning(
                    "cannot renew the job's leases",
                    metadata: ["herald.tenant": "\(key.tenant)", "herald.job": "\(key.job)", "herald.error": "\(error)"])
            }
        }
    }

    /// Starts unfinished jobs of every loaded tenant that is not running yet, oldest first, as
    /// far as the tenant's job slots allow.
    private func scan(into jobs: inout DiscardingTaskGroup, includingPaused: Bool) async {
        if includingPaused { state.withLock { $0.paused.removeAll() } }
        let slots = max(1, configuration.jobsPerTenant)
        for tenant in router.tenantIDs {
            if isStopping { return }
            let busy = state.withLock { $0.runningPerTenant[tenant, default: 0] }
            guard busy < slots else { continue }
            let unfinished: [Job]
            do {
                unfinished = try await store.jobs(tenant: tenant, states: [.accepted, .running], limit: 10_000)
            } catch {
                logger.storeFailure("cannot list unfinished jobs", error: error, metadata: ["herald.tenant": "\(tenant)"])
                continue
            }
            for job in unfinished.reversed() {
                start(job, in: &jobs, includingPaused: includingPaused)
                if state.withLock({ $0.runningPerTenant[tenant, default: 0] }) >= slots { break }
            }
        }
    }

    private func start(_ job: Job, in jobs: inout DiscardingTaskGroup, includingPaused: Bool) {
        let key = JobKey(tenant: job.tenant, job: job.id)
        let slots = max(1, configuration.jobsPerTenant)
        let claimed = state.withLock { state -> Bool in
            guard !state.stopping, !state.running.contains(key),
                state.runningPerTenant[key.tenant, default: 0] < slots,
                includingPaused || !state.paused.contains(key)
            else { return false }
            state.running.insert(key)
            state.runningPerTenant[key.tenant, default: 0] += 1
            state.statistics.activeJobs += 1
            state.statistics.peakActiveJobs = max(state.statistics.peakActiveJobs, state.statistics.activeJobs)
            return true
        }
        guard claimed else { return }
        let sink = eventSink
        jobs.addTask {
            let paused = await self.process(job)
            self.state.withLock { state in
                state.running.remove(key)
                state.runningPerTenant[key.tenant, default: 1] -= 1
                if state.runningPerTenant[key.tenant] == 0 { state.runningPerTenant[key.tenant] = nil }
                state.statistics.activeJobs -= 1
                if paused { state.paused.insert(key) }
            }
            // A slot is free: the tenant's next waiting job starts now, not at the next tick.
            sink.yield(.scan)
        }
    }

    /// Works through one job: its feeder claims the pending items one claim at a time, its send
    /// tasks send them (bounded by the tenant's permits), its writer records the outcomes in
    /// commit groups; the job is marked finished when nothing is pending.
    /// - Returns: true when the job paused on a transient failure (it resumes at the next tick).
    private func process(_ job: Job) async -> Bool {
        var logger = self.logger
        logger[metadataKey: "herald.tenant"] = "\(job.tenant)"
        logger[metadataKey: "herald.job"] = "\(job.id)"
        let clock = router.configuration.clock
        let claimant = configuration.claimantName
        do {
            if job.state == .accepted {
                guard try await store.updateJob(tenant: job.tenant, id: job.id, state: .running, at: clock.date) else {
                    // Final (or deleted) since it was read: cancelled, or finished by another
                    // instance. Nothing to do.
                    logger.info("job not started: it is finished or cancelled already")
                    return false
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
            return true
        }

        let pool = permits.pool(for: job.tenant)
        let claimSize = max(1, configuration.claimSize)
        let senders = max(1, min(configuration.concurrencyPerTenant, claimSize, job.itemCount))
        let itemLogger = logger
        let outcomes = OutcomeGroups(inFlight: senders, groupSize: configuration.commitGroup)
        // Once the feed stops, the due retries it never handed out never report: the feeder
        // must not wait for them (it would never return, and neither would the runner's stop).
        let feed = JobFeed(
            marks: WireMarks(store: store, tenant: job.tenant, job: job.id, claimant: claimant, clock: clock),
            routes: BatchItemDelivery.Routes(), stopped: { outcomes.endWatch() })
        let key = JobKey(tenant: job.tenant, job: job.id)
        state.withLock { $0.feeds[key] = feed }
        defer { _ = state.withLock { $0.feeds.removeValue(forKey: key) } }
        // Sends without a task each when the tenant's runtime can (every middleware has hooks,
        // the transport a callback form) and the items need no wire mark (``BatchItemDelivery/start``;
        // on a shared store `drive` checks their leases itself, a group at a time).
        let runtime = router.runtime(for: job.tenant)
        let byCallbacks =
            configuration.sendsByCallback
            && runtime.map { $0.startsSendsByCallback && $0.configuration.delivery.guarantee == .atLeastOnce } == true
        // Such a job runs on its transport's home loop: the sends' ends run there, and so does
        // the task that starts the next ones (no wake-up of another thread between the two).
        let executor = byCallbacks && configuration.drivesOnConnectionLoop ? runtime?.transport.sendingExecutor : nil
        // The feeder claims (in this task), the send tasks send, one writer writes the outcomes;
        // the group returns when all three are done and every change handed over is written.
        let end = await withTaskExecutorPreference(executor) {
            await withDiscardingTaskGroup(returning: FeedEnd.self) { group in
                group.addTask { await self.writeOutcomes(outcomes, of: job, feed: feed, logger: itemLogger) }
                group.addTask {
                    if byCallbacks {
                        await self.drive(feed, outcomes: outcomes, of: job, permits: pool, logger: itemLogger)
                    } else {
                        await withDiscardingTaskGroup { sends in
                            for _ in 0..<senders {
                                sends.addTask { await self.work(feed, outcomes: outcomes, of: job, permits: pool, logger: itemLogger) }
                            }
                        }
                    }
                    outcomes.close()
                }
                let end = await self.feedClaims(of: job, into: feed, outcomes: outcomes, lowWater: senders, logger: logger)
                let unsent = feed.finish()
                adjust { $0.claimedItemsHeld -= unsent } peak: { _ in }
                return end
            }
        }
        switch (feed.stopReason, end) {
        case (.cancelled, _), (nil, .cancelled):
            logger.info("job cancelled; its items without an outcome are not sent")
            return false
        case (.pause, _), (nil, .paused):
            logger.warning("job paused; its unsent items stay pending and it resumes at the next scan")
            return true
        case (.stopping, _), (nil, .stopped):
            return false
        case (nil, .done):
            guard !isStopping else { return false }
            await finishIfDone(job, logger: logger)
            return false
        }
    }

    /// How a job's feeder ended.
    private enum FeedEnd: Sendable {
        /// No pending item is left for this runner (or only items leased elsewhere).
        case done
        /// The runner stops, or the feed stopped (its reason says why).
        case stopped
        /// A claim failed: the job pauses.
        case paused
        /// The job was cancelled (a claim found it so).
        case cancelled
    }

    /// The job's feeder: claims its pending items one claim at a time into `feed`. The next claim
    /// is made as soon as no more than `lowWater` items of the last one are left to hand out (the
    /// send tasks' count: the claim is back before they run dry), while the others are on the
    /// wire — their indexes lie below the claim's hint, and the store never returns a pending
    /// item below it (``PushStore/claimsFromIndexStrictly``) — once the due retries of the last
    /// claim have their changes committed (by then they were all sent, so none is left in the
    /// feed for the claim to return again). When the store may ignore the hint, and when a claim
    /// finds nothing, it first waits until every item is handed out and handed back and its
    /// change written, so that the claim sees every outcome and next attempt.
    ///
    /// A due retry is claimed whatever its index (and whoever of this runner holds it), and it
    /// stays a due retry in the store until its new outcome or next attempt is committed: handed
    /// back is not enough (a claim made between the two would send it again). The claim's new
    /// items need no wait: one answered with a next attempt becomes a due retry only when that
    /// change is committed, after its send ended.
    private func feedClaims(
        of job: Job, into feed: JobFeed, outcomes: OutcomeGroups, lowWater: Int, logger: Logger
    ) async -> FeedEnd {
        let clock = router.configuration.clock
        let claimant = configuration.claimantName
        let claimSize = max(1, configuration.claimSize)
        let leaseSeconds = Self.seconds(configuration.lease)
        // Pending items below this were claimed in this run: the next claim searches from here
        // (a pending item below, leased elsewhere and released, is found by the job's next run:
        // the job is not finished while it waits).
        var fromIndex = 0
        // True when no item is taken and every change is written (a claim sees every outcome).
        var settled = true
        while !isStopping {
            if !settled {
                if !store.claimsFromIndexStrictly {
                    guard await Self.settle(feed, outcomes) else { return .stopped }
                    settled = true
                } else {
                    guard await feed.waitUntilRemaining(atMost: lowWater) else { return .stopped }
                    // The last claim's due retries (watched) are due retries in the store until
                    // their changes are committed: the next claim would return them again.
                    guard await outcomes.waitUntilWatchedDurable() else { return .stopped }
                }
            }
            let now = clock.date
            let claimed: [JobItem]
            do {
                claimed = try await store.claimPendingItems(
                    tenant: job.tenant, job: job.id, limit: claimSize, claimant: claimant, now: now,
                    leaseUntil: now.addingTimeInterval(leaseSeconds), fromIndex: fromIndex)
            } catch {
                logger.storeFailure("cannot claim job items; the job pauses", error: error)
                return .paused
            }
            if claimed.isEmpty {
                if !settled {
                    // The items still on the wire may come back as due retries: claim again once
                    // their changes are written.
                    guard await Self.settle(feed, outcomes) else { return .stopped }
                    settled = true
                    continue
                }
                // A cancelled job claims nothing: end here rather than wait for its retries.
                if await isCancelled(job, logger: logger) { return .cancelled }
                // Items deferred to a later attempt: wait for the first to be due, then claim again.
                if await waitForDueRetries(job, feed: feed, logger: logger) { continue }
                return .done
            }
            for item in claimed where !Self.isDueRetry(item) { fromIndex = max(fromIndex, item.index + 1) }
            outcomes.watch(claimed.lazy.filter(Self.isDueRetry).count)
            adjust { $0.claimedItemsHeld += claimed.count } peak: { $0.peakClaimedItemsHeld = max($0.peakClaimedItemsHeld, $0.claimedItemsHeld) }
            feed.refill(claimed)
            settled = false
        }
        return .stopped
    }

    /// A claimed item that is not new: a due retry (`retrying`), which a claim returns whatever
    /// its index (a new item is `pending`).
    private static func isDueRetry(_ item: JobItem) -> Bool { item.state != .pending }

    /// Waits until every item is handed out, the send tasks handed back every item they took and
    /// the writer wrote every change. False when the feed stopped or a write failed.
    private static func settle(_ feed: JobFeed, _ outcomes: OutcomeGroups) async -> Bool {
        guard await feed.waitUntilHandedOut(), await feed.waitUntilIdle() else { return false }
        return await outcomes.waitUntilDurable()
    }

    /// One send task of a job: takes the feed's next item, then under a slot of the job's commit
    /// groups and a tenant permit sends it and hands its outcome to the writer, until the feed
    /// runs out or stops. It does not wait for the outcome to be written.
    nonisolated(nonsending) private func work(
        _ feed: JobFeed, outcomes: OutcomeGroups, of job: Job, permits pool: PermitPool, logger: Logger
    ) async {
        adjust { $0.sendTasks += 1 } peak: { $0.peakSendTasks = max($0.peakSendTasks, $0.sendTasks) }
        defer { adjust { $0.sendTasks -= 1 } peak: { _ in } }
        while let item = await feed.next() {
            // The feeder waits for a due retry's change to be committed before it claims again.
            let retry = Self.isDueRetry(item)
            defer { handBack(feed) }
            guard await outcomes.reserve() else {
                feed.stop(.pause)
                return
            }
            await pool.acquire()
            guard !isStopping else {
                feed.stop(.stopping)
                pool.release()
                outcomes.cancel(watched: retry)
                return
            }
            // Stopped meanwhile (a failed write, a paused tenant): the item stays pending.
            guard feed.stopReason == nil else {
                pool.release()
                outcomes.cancel(watched: retry)
                return
            }
            adjust { $0.itemsInFlight += 1 } peak: { $0.peakItemsInFlight = max($0.peakItemsInFlight, $0.itemsInFlight) }
            let step = await delivery.deliver(item, of: job, marks: feed.marks, routes: feed.routes, logger: logger)
            adjust { $0.itemsInFlight -= 1 } peak: { _ in }
            pool.release()
            guard Self.hand(step, watched: retry, to: outcomes, feed: feed) else { return }
        }
    }

    /// Hands an attempt's step to the writer (or frees its slot).
    /// - Returns: false when the job's sends stop (the feed is stopped).
    private static func hand(_ step: BatchItemDelivery.Step, watched: Bool, to outcomes: OutcomeGroups, feed: JobFeed) -> Bool {
        switch step {
        case .write(let change):
            outcomes.add(change, watched: watched)
            return true
        case .notOurs:
            outcomes.cancel(watched: watched)
            return true
        case .leftPending:
            outcomes.cancel(watched: watched)
            feed.stop(.stopping)
            return false
        case .pause:
            outcomes.cancel(watched: watched)
            feed.stop(.pause)
            return false
        }
    }

    /// The job's sends without a task each: one task takes the feed's items, a slot of the job's
    /// commit groups and a tenant permit each, as ``work(_:outcomes:of:permits:logger:)`` does,
    /// and starts each send with ``BatchItemDelivery/start(_:of:routes:leaseChecked:logger:completion:)``;
    /// the send's end (on a connection's event loop) frees the permit, hands the step to the
    /// writer and the item back to the feed — for all the sends that end in one pass of that
    /// loop together (``LoopTickGathering``). The task waits only for an item, a slot or permits;
    /// it takes up to ``permitsTakenAhead(ofPool:)`` permits at a time, and gives back those it
    /// has not used before it waits for anything else. On a shared store it first reads the leases of
    /// the item the feed gave and of those ready behind it (``LeaseCheckedItems``): one that is
    /// not its claimant's any more is given up unsent, and a failed read pauses the job. An item
    /// that needs the `async` form (its
    /// tenant reloaded to at-most-once meanwhile) is sent by a child task, under the same permit.
    /// Returns when the feed runs out or stops and every send started has ended.
    nonisolated(nonsending) private func drive(
        _ feed: JobFeed, outcomes: OutcomeGroups, of job: Job, permits pool: PermitPool, logger: Logger
    ) async {
        adjust { $0.sendTasks += 1 } peak: { $0.peakSendTasks = max($0.peakSendTasks, $0.sendTasks) }
        defer { adjust { $0.sendTasks -= 1 } peak: { _ in } }
        let started = SendsUnderWay()
        // The sends' ends, handled together per event-loop pass: the counters, the writer's
        // groups, the feed, the permits and the sends under way, each once for all of them.
        let ended = LoopTickGathering<EndedSend> { ended in
            self.adjust { $0.itemsInFlight -= ended.count } peak: { _ in }
            for send in ended { _ = Self.hand(send.step, watched: send.watched, to: outcomes, feed: feed) }
            self.handBack(feed, count: ended.count)
            pool.release(ended.count)
            started.end(ended.count)
        }
        let delivery = self.delivery
        // On a shared store each item's lease is checked before its send, a group at a time.
        var leases = configuration.exclusiveStore ? nil : LeaseCheckedItems()
        // Permits taken ahead (``PermitPool/acquire(upTo:)``), each for a send still to start:
        // given back before any other wait, so that none idles while this task waits.
        let gathering = Self.permitsTakenAhead(ofPool: pool.permits)
        await withDiscardingTaskGroup { asyncSends in
            var ahead = 0
            func giveBackAhead() {
                pool.release(ahead)
                ahead = 0
            }
            sending: while true {
                let item: JobItem
                var lease = LeaseCheckedItems.Lease.ours
                if leases != nil {
                    if leases?.isEmpty == true {
                        // A store read follows: no permit is held across it.
                        giveBackAhead()
                        guard let first = await feed.next() else { break sending }
                        await leases?.check(first, from: feed, of: job, store: store, claimant: configuration.claimantName)
                    }
                    guard let next = leases?.removeFirst() else { break sending }
                    (item, lease) = next
                } else if let ready = feed.nextIfReady() {
                    item = ready
                } else {
                    giveBackAhead()
                    guard let next = await feed.next() else { break sending }
                    item = next
                }
                let retry = Self.isDueRetry(item)
                var reserved = outcomes.reserveIfFree()
                if reserved == nil {
                    giveBackAhead()
                    reserved = await outcomes.reserve()
                }
                guard reserved == true else {
                    feed.stop(.pause)
                    handBack(feed)
                    break
                }
                switch lease {
                case .ours:
                    break
                case .notOurs:
                    // It got an outcome, or another claimant took its lease: not sent, not written.
                    _ = Self.hand(.notOurs, watched: retry, to: outcomes, feed: feed)
                    handBack(feed)
                    continue
                case .unreadable(let error):
                    logger.storeFailure(
                        "cannot check a job item's lease before its send; it is not sent now", error: error,
                        metadata: ["herald.index": "\(item.index)"])
                    _ = Self.hand(.pause, watched: retry, to: outcomes, feed: feed)
                    handBack(feed)
                    break sending
                }
                if ahead == 0 { ahead = await pool.acquire(upTo: gathering) }
                ahead -= 1
                // Stopping, or stopped meanwhile (a failed write, a paused tenant): the item stays pending.
                guard !isStopping, feed.stopReason == nil else {
                    if isStopping { feed.stop(.stopping) }
                    pool.release()
                    outcomes.cancel(watched: retry)
                    handBack(feed)
                    break
                }
                adjust { $0.itemsInFlight += 1 } peak: { $0.peakItemsInFlight = max($0.peakItemsInFlight, $0.itemsInFlight) }
                started.begin()
                let end: @Sendable (BatchItemDelivery.Step) -> Void = { step in
                    ended.add(EndedSend(step: step, watched: retry))
                }
                if !delivery.start(item, of: job, routes: feed.routes, leaseChecked: leases != nil, logger: logger, completion: end) {
                    asyncSends.addTask {
                        end(await delivery.deliver(item, of: job, marks: feed.marks, routes: feed.routes, logger: logger))
                    }
                }
            }
            giveBackAhead()
        }
        // Checked but not started (the feed stopped): they stay as they are in the store.
        while leases?.removeFirst() != nil { handBack(feed) }
        await started.waitUntilNone()
    }

    /// How many permits a job's driving task takes at once when it must wait for them: an eighth
    /// of the tenant's (at least one). It is then woken once for that many ended sends, not once
    /// or twice for each, and starts that many in one turn; meanwhile at least seven eighths of
    /// the tenant's permits' sends stay on the wire.
    static func permitsTakenAhead(ofPool permits: Int) -> Int { max(1, permits / 8) }

    /// A send of ``drive(_:outcomes:of:permits:logger:)`` that ended: its step, and whether its
    /// item was a due retry (watched by the writer).
    struct EndedSend: Sendable {
        var step: BatchItemDelivery.Step
        var watched: Bool
    }

    /// Items taken from `feed` are done with (their changes handed to the writer, or not sent).
    private func handBack(_ feed: JobFeed, count: Int = 1) {
        feed.handBack(count)
        adjust { $0.claimedItemsHeld -= count } peak: { _ in }
    }

    /// The job's writer: writes its outcomes and next attempts in commit groups
    /// (``PushStore/recordChanges(tenant:job:_:)``) until its send tasks ended and nothing is
    /// left. A failed write pauses the job: that group's items stay pending in the store.
    private func writeOutcomes(_ outcomes: OutcomeGroups, of job: Job, feed: JobFeed, logger: Logger) async {
        let store = self.store
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

    private func adjust(_ change: (inout JobRunnerStatistics) -> Void, peak: (inout JobRunnerStatistics) -> Void) {
        state.withLock { state in
            change(&state.statistics)
            peak(&state.statistics)
        }
    }

    private func finishIfDone(_ job: Job, logger: Logger) async {
        do {
            guard let progress = try await store.progress(tenant: job.tenant, job: job.id) else { return }
            guard progress.pending == 0 else {
                logger.debug("job has items leased elsewhere; it resumes at the next scan", metadata: ["herald.pending": "\(progress.pending)"])
                return
            }
            let at = router.configuration.clock.date
            guard try await store.updateJob(tenant: job.tenant, id: job.id, state: .finished, at: at) else {
                // Final already (the store keeps the first final state): another instance finished
                // it (its last items were sent here and there), or it was cancelled meanwhile.
                logger.info("job not marked finished here: it is finished or cancelled already")
                return
            }
            logger.info(
                "job finished", metadata: ["herald.sent": "\(progress.sent)", "herald.failed": "\(progress.failed)"])
            if let jobEnded {
                var finished = job
                finished.state = .finished
                finished.updatedAt = at
                await jobEnded.jobEnded(finished, progress: progress, at: at)
            }
        } catch {
            logger.storeFailure("cannot finish the job", error: error)
        }
    }

    /// When the job's only unfinished items wait for a retry, sleeps (on the router's clock, in
    /// short steps so that a stop is not held up) until the earliest is due or the rescan
    /// interval passed, and returns true to claim again; false when none waits.
    private func waitForDueRetries(_ job: Job, feed: JobFeed, logger: Logger) async -> Bool {
        let clock = router.configuration.clock
        let next: Date?
        do {
            next = try await store.nextAttempt(tenant: job.tenant, job: job.id)
        } catch {
            logger.storeFailure("cannot read the job's next retry time", error: error)
            return false
        }
        guard let next else { return false }
        var remaining = min(max(0, next.timeIntervalSince(clock.date)), Self.seconds(configuration.rescanInterval))
        while remaining > 0, !isStopping, feed.stopReason == nil {
            let step = min(remaining, 0.25)
            do {
                try await clock.sleep(until: clock.now.advanced(by: .milliseconds(Int64(step * 1000))))
            } catch {
                return false
            }
            remaining -= step
        }
        return !isStopping && feed.stopReason == nil
    }

    /// True when the job was cancelled in the store (read when a claim found nothing: a cancel
    /// made through another instance that did not reach this one ends the job here).
    private func isCancelled(_ job: Job, logger: Logger) async -> Bool {
        do {
            return try await store.job(tenant: job.tenant, id: job.id)?.state == .cancelled
        } catch {
            logger.storeFailure("cannot read the job's state", error: error)
            return false
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let parts = duration.components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}

/// Sends started by callback and not ended yet, for the task that started them to wait for.
final class SendsUnderWay: Sendable {
    private struct State {
        var count = 0
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    func begin() { state.withLock { $0.count += 1 } }

    /// `count` sends ended.
    func end(_ count: Int = 1) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.count -= count
            guard state.count == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns when every send begun has ended. One waiter at a time.
    func waitUntilNone() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let none = state.withLock { state -> Bool in
                guard state.count > 0 else { return true }
                state.waiter = continuation
                return false
            }
            if none { continuation.resume() }
        }
    }
}

/// The driving task's items on a shared store (PostgreSQL), each with its lease checked just
/// before the group waits for its permits and is sent: another instance may have taken a lease (this one's heartbeat was
/// late and its leases were released, or one ran out), and an item whose lease is not this
/// claimant's any more, or that has an outcome, must not be sent. One read
/// (``HeraldStore/PushStore/leasedItems(tenant:job:indexes:claimant:)``) checks the item the
/// feed gave and the ones ready behind it, up to ``group``; the task that holds it is the only
/// one that sends the job's items, so the check is grouped here rather than in ``WireMarks``
/// (which groups the checks of concurrent send tasks).
struct LeaseCheckedItems {
    enum Lease {
        case ours
        /// It has an outcome, or its lease is another claimant's: not to be sent.
        case notOurs
        /// The check failed: not to be sent now (the job pauses).
        case unreadable(any Error)
    }

    /// Items checked in one read, at most.
    static let group = 64

    private var items: [(JobItem, Lease)] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }

    mutating func removeFirst() -> (JobItem, Lease)? {
        guard head < items.count else { return nil }
        defer { head += 1 }
        return items[head]
    }

    /// Checks `first` and the items `feed` has ready behind it (taken from the feed: each is
    /// handed back by whoever sends it or gives it up).
    mutating func check(_ first: JobItem, from feed: JobFeed, of job: Job, store: any PushStore, claimant: String) async {
        var taken = [first]
        while taken.count < Self.group, let item = feed.nextIfReady() { taken.append(item) }
        let leased: Result<Set<Int>, any Error>
        do {
            leased = .success(try await store.leasedItems(tenant: job.tenant, job: job.id, indexes: taken.map(\.index), claimant: claimant))
        } catch {
            leased = .failure(error)
        }
        items.removeAll(keepingCapacity: true)
        head = 0
        for item in taken {
            switch leased {
            case .success(let ours): items.append((item, ours.contains(item.index) ? .ours : .notOurs))
            case .failure(let error): items.append((item, .unreadable(error)))
            }
        }
    }
}
