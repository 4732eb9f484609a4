import Foundation
import HeraldCore
import HeraldStore
import Logging

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
/// The runner is the scheduler: it finds unfinished jobs (at start, on each event, and every
/// ``JobRunnerConfiguration/rescanInterval``), starts each as far as its tenant's job slots
/// allow, renews the leases of the jobs it works on and sweeps for job ends left untold. Each job
/// is worked on by a ``JobRun``: its feeder (``JobFeeder``, with ``DueRetryWait`` when only
/// retries not due yet are left), its senders (``JobSendTasks`` or ``JobCallbackSender``) and its
/// writer (``OutcomeGroups``). Every timer and wait runs on the router's clock
/// (``RouterConfiguration/clock``), whose sleeps must wait: a test drives the runner with a
/// clock it advances, not with ``HeraldCore/ManualPushClock`` (whose sleeps return at once).
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
    private let state = JobRunnerState()
    private let delivery: BatchItemDelivery
    /// Told when this runner finishes a job (the tenant's `job.finished` webhook).
    private let jobEnded: (any JobEndNotifier)?

    private enum Event: Sendable {
        /// The periodic scan: every unfinished job, paused ones (``JobRun/Resume/atNextTick``) included.
        case tick
        /// A scan for jobs waiting for a slot (paused jobs wait for the next tick).
        case scan
        case job(Job)
        /// Another instance stored a job (a notification): read it and start it.
        case stored(TenantID, JobID)
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
        let run = state.values.withLock { $0.runs[JobRunnerState.JobKey(tenant: tenant, job: id)] }
        run?.feed.stop(.cancelled)
    }

    /// Looks for unfinished jobs now (after tenants were loaded or reloaded).
    public func rescan() {
        eventSink.yield(.tick)
    }

    /// Graceful stop: no new item is sent; sends on the wire finish and their outcomes are
    /// recorded; everything else stays pending in the store. ``run()`` returns when that is done.
    public func stop() {
        if state.stop() { eventSink.finish() }
    }

    /// True once ``stop()`` was called.
    public var isStopping: Bool { state.isStopping }

    /// The tenant's job permits held now: its sends on the wire, and permits its jobs' driving
    /// tasks took ahead. 0 once its jobs are idle.
    public func permitsHeld(by tenant: TenantID) -> Int {
        guard let pool = permits.existingPool(for: tenant) else { return 0 }
        return pool.permits - pool.counts.available
    }

    /// Jobs being worked on now.
    public var activeJobCount: Int { state.values.withLock { $0.running.count } }

    /// True while a run of the job is under way: until it returns, its senders may still send.
    /// After a cancel, false means nothing more of the job goes out from this runner.
    public func isRunning(_ job: JobID, of tenant: TenantID) -> Bool {
        state.values.withLock { $0.running.contains(JobRunnerState.JobKey(tenant: tenant, job: job)) }
    }

    /// Item sends under way now (a tenant permit held).
    public var itemsInFlight: Int { state.statistics.itemsInFlight }

    /// The runner's counters now, with their peaks.
    public var statistics: JobRunnerStatistics { state.statistics }


    // MARK: Running

    /// Resumes every unfinished job of the loaded tenants, then runs new ones until ``stop()``.
    /// Call it once.
    public func run() async {
        let first = state.values.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started
        }
        guard first else {
            logger.error("job runner started twice; the second run returns at once")
            return
        }
        logger.info("job runner started", metadata: ["herald.claimant": "\(configuration.claimantName)"])
        let clock = router.configuration.clock
        let sink = eventSink
        await withDiscardingTaskGroup { jobs in
            await withTaskGroup(of: Void.self) { ticker in
                ticker.addTask {
                    await clock.repeating(every: self.configuration.rescanInterval) { sink.yield(.tick) }
                }
                ticker.addTask {
                    await clock.repeating(every: self.configuration.renewInterval) { await self.renewLeases() }
                }
                if let jobEnded = self.jobEnded {
                    let grace = self.configuration.untoldEndsGrace.secondsValue
                    ticker.addTask {
                        await clock.repeating(every: self.configuration.untoldEndsInterval) {
                            await jobEnded.tellUntoldEnds(endedBefore: clock.date.addingTimeInterval(-grace))
                            self.state.adjust { $0.untoldEndSweeps += 1 } peak: { _ in }
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
                            if let job = try await self.unlessStopped({ try await self.store.job(tenant: tenant, id: id) }) ?? nil,
                                !job.state.isFinal
                            {
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
        let running = state.values.withLock { Array($0.running) }
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
    /// far as each tenant's job slots allow. One store call lists them for every tenant, however
    /// many there are: a scan of 10,000 idle tenants is one query, not 10,000.
    private func scan(into jobs: inout DiscardingTaskGroup, includingPaused: Bool) async {
        if includingPaused { state.values.withLock { $0.paused.removeAll() } }
        // Of a tenant's oldest jobs, at most those running here already and those paused cannot
        // start: that many more than its slots leaves none it could start unlisted.
        let perTenant = state.values.withLock { max(1, configuration.jobsPerTenant) + $0.running.count + $0.paused.count }
        let unfinished: [Job]
        do {
            guard let listed = try await unlessStopped({ try await self.store.unfinishedJobs(perTenant: perTenant) }) else { return }
            unfinished = listed
        } catch {
            logger.storeFailure("cannot list unfinished jobs", error: error)
            return
        }
        for job in unfinished where router.runtime(for: job.tenant) != nil {
            if isStopping { return }
            start(job, in: &jobs, includingPaused: includingPaused)
        }
    }

    /// `read`'s result, or nil once the runner stops first (the read cancelled): a scan's store
    /// read must not hold up a graceful stop. A store that stopped answering leaves it waiting for
    /// its whole call timeout (`storage.postgres.call_timeout`), longer than `shutdown_timeout`.
    private func unlessStopped<T: Sendable>(_ read: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await state.stopped.unlessOpened(read)
    }

    private func start(_ job: Job, in jobs: inout DiscardingTaskGroup, includingPaused: Bool) {
        let key = JobRunnerState.JobKey(tenant: job.tenant, job: job.id)
        let slots = max(1, configuration.jobsPerTenant)
        let claimed = state.values.withLock { state -> Bool in
            guard !state.stopping, !state.running.contains(key),
                state.runningPerTenant[key.tenant, default: 0] < slots,
                includingPaused || !state.paused.contains(key)
            else { return false }
            state.running.insert(key)
            state.runningPerTenant[key.tenant, default: 0] += 1
            state.statistics.activeJobs += 1
            state.statistics.peakActiveJobs = max(state.statistics.peakActiveJobs, state.statistics.activeJobs)
            state.statistics.runsStarted += 1
            return true
        }
        guard claimed else { return }
        let sink = eventSink
        jobs.addTask {
            let run = JobRun(
                job, router: self.router, store: self.store, configuration: self.configuration, delivery: self.delivery,
                state: self.state, permits: self.permits.pool(for: job.tenant), jobEnded: self.jobEnded, logger: self.logger)
            let resume = await run.run()
            self.state.values.withLock { state in
                state.running.remove(key)
                state.runningPerTenant[key.tenant, default: 1] -= 1
                if state.runningPerTenant[key.tenant] == 0 { state.runningPerTenant[key.tenant] = nil }
                state.statistics.activeJobs -= 1
                if resume == .atNextTick { state.paused.insert(key) }
            }
            // A slot is free: the tenant's next waiting job starts now, not at the next tick.
            sink.yield(.scan)
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let parts = duration.components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
