import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// How a ``JobRunner`` works through accepted batch jobs.
public struct JobRunnerConfiguration: Sendable, Hashable {
    /// Notifications of one tenant's jobs on the wire at once (all its jobs together).
    public var concurrencyPerTenant: Int = 100
    /// Items claimed from the store at a time, per job.
    public var claimSize: Int = 500
    /// How long a claim holds its items; after that another claimant may take them.
    public var lease: Duration = .seconds(300)
    /// The name items are claimed under. A runner restarted with the same name takes back the
    /// items it held at once (they were leased to it); use one name per store.
    public var claimant: String = "herald"
    /// How often the runner looks for unfinished jobs on its own (jobs of tenants loaded later,
    /// jobs paused by a transient failure). New jobs start at once through ``JobRunner/jobAccepted(_:)``.
    public var rescanInterval: Duration = .seconds(5)

    public init() {}
}

/// Sends the items of accepted batch jobs through the ``Router``, with bounded concurrency per
/// tenant, and records each item's outcome in the store.
///
/// Durability rests on the store: a job and all its items are stored before the API accepts
/// it; an item's outcome is recorded as soon as its send ends; items are claimed under a stable
/// claimant name. After a crash, the next runner resumes every job that is not finished: items
/// with a recorded outcome are never sent again; an item whose request was on the wire (or
/// whose answer had arrived but was not yet recorded) is sent again, with the same apns-id.
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

    private enum Event: Sendable {
        case scan
        case job(Job)
    }

    private struct JobKey: Hashable, Sendable {
        var tenant: TenantID
        var job: JobID
    }

    private struct State {
        var started = false
        var stopping = false
        var running: Set<JobKey> = []
        var itemsInFlight = 0
    }

    /// What became of one item's send.
    private enum ItemOutcome: Sendable {
        /// The outcome is recorded.
        case recorded
        /// Not sent (stopping) or not recordable now: the item stays pending for a later round.
        case leftPending
        /// A transient condition (tenant reloading or gone, store failure): pause the job.
        case pause
    }

    public init(router: Router, store: any PushStore, configuration: JobRunnerConfiguration = JobRunnerConfiguration(), logger: Logger? = nil) {
        self.router = router
        self.store = store
        self.configuration = configuration
        var logger = logger ?? router.configuration.logger
        logger[metadataKey: "herald.component"] = "job-runner"
        self.logger = logger
        self.permits = TenantPermits(permitsPerTenant: max(1, configuration.concurrencyPerTenant))
        self.delivery = BatchItemDelivery(router: router, store: store, random: { Double.random(in: $0) })
        (events, eventSink) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
    }

    // MARK: Control

    /// Starts a freshly stored job at once (the periodic scan would find it too, later).
    public func jobAccepted(_ job: Job) {
        eventSink.yield(.job(job))
    }

    /// Looks for unfinished jobs now (after tenants were loaded or reloaded).
    public func rescan() {
        eventSink.yield(.scan)
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

    /// Jobs being worked on now.
    public var activeJobCount: Int { state.withLock { $0.running.count } }

    /// Item sends under way now (on the wire or waiting for a tenant permit).
    public var itemsInFlight: Int { state.withLock { $0.itemsInFlight } }

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
        logger.info("job runner started", metadata: ["herald.claimant": "\(configuration.claimant)"])
        let interval = configuration.rescanInterval
        let sink = eventSink
        await withDiscardingTaskGroup { jobs in
            await withTaskGroup(of: Void.self) { ticker in
                ticker.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: interval)
                        sink.yield(.scan)
                    }
                }
                await self.scan(into: &jobs)
                for await event in self.events {
                    if self.isStopping { break }
                    switch event {
                    case .scan: await self.scan(into: &jobs)
                    case .job(let job): self.start(job, in: &jobs)
                    }
                }
                ticker.cancelAll()
            }
        }
        logger.info("job runner stopped")
    }

    /// Starts every unfinished job of every loaded tenant that is not running yet, oldest first.
    private func scan(into jobs: inout DiscardingTaskGroup) async {
        for tenant in router.tenantIDs {
            if isStopping { return }
            let unfinished: [Job]
            do {
                unfinished = try await store.jobs(tenant: tenant, states: [.accepted, .running], limit: 10_000)
            } catch {
                logger.error("cannot list unfinished jobs", metadata: ["herald.tenant": "\(tenant)", "herald.error": "\(error)"])
                continue
            }
            for job in unfinished.reversed() { start(job, in: &jobs) }
        }
    }

    private func start(_ job: Job, in jobs: inout DiscardingTaskGroup) {
        let key = JobKey(tenant: job.tenant, job: job.id)
        let claimed = state.withLock { state -> Bool in
            guard !state.stopping, !state.running.contains(key) else { return false }
            state.running.insert(key)
            return true
        }
        guard claimed else { return }
        jobs.addTask {
            await self.process(job)
            _ = self.state.withLock { $0.running.remove(key) }
        }
    }

    /// Works through one job: claims its pending items in chunks, sends them (bounded by the
    /// tenant's permits), records each outcome, and marks the job finished when nothing is pending.
    private func process(_ job: Job) async {
        var logger = self.logger
        logger[metadataKey: "herald.tenant"] = "\(job.tenant)"
        logger[metadataKey: "herald.job"] = "\(job.id)"
        let clock = router.configuration.clock
        if job.state == .accepted {
            do {
                try await store.updateJob(tenant: job.tenant, id: job.id, state: .running, at: clock.date)
            } catch {
                logger.error("cannot mark the job running", metadata: ["herald.error": "\(error)"])
                return
            }
            logger.info("job started", metadata: ["herald.items": "\(job.itemCount)"])
        } else {
            logger.info("job resumed", metadata: ["herald.items": "\(job.itemCount)"])
        }

        let pool = permits.pool(for: job.tenant)
        let claimSize = max(1, configuration.claimSize)
        let leaseSeconds = Self.seconds(configuration.lease)
        var paused = false
        let itemLogger = logger
        repeat {
        await withTaskGroup(of: (Int, ItemOutcome).self) { group in
            var inFlight = Set<Int>()
            while true {
                if !paused, !isStopping, inFlight.count <= claimSize / 2 {
                    let now = clock.date
                    var fresh: [JobItem] = []
                    do {
                        // The claim returns the lowest-index eligible items, among them the ones
                        // in flight here (leased to this claimant: skipped) and any left from an
                        // earlier run (resumed); asking for inFlight.count more leaves room for
                        // claimSize fresh ones.
                        let claimed = try await store.claimPendingItems(
                            tenant: job.tenant, job: job.id, limit: inFlight.count + claimSize, claimant: configuration.claimant,
                            now: now, leaseUntil: now.addingTimeInterval(leaseSeconds))
                        fresh = claimed.filter { !inFlight.contains($0.index) }
                    } catch {
                        logger.error("cannot claim job items", metadata: ["herald.error": "\(error)"])
                        paused = true
                    }
                    for item in fresh {
                        inFlight.insert(item.index)
                        group.addTask { (item.index, await self.send(item, of: job, permits: pool, logger: itemLogger)) }
                    }
                    if fresh.isEmpty, inFlight.isEmpty { break }
                }
                guard let (index, outcome) = await group.next() else { break }
                inFlight.remove(index)
                if outcome == .pause, !paused {
                    paused = true
                    logger.warning("job paused; it resumes at the next scan")
                }
            }
        }
            if paused || isStopping { break }
        } while await waitForDueRetries(job, logger: logger)
        guard !paused, !isStopping else { return }
        await finishIfDone(job, logger: logger)
    }

    /// When the job's only unfinished items are waiting for a retry, sleeps (on the router's
    /// clock, in short steps so that a stop is not held up) until the earliest is due or the
    /// rescan interval passed, and returns true to claim again; false when none waits.
    private func waitForDueRetries(_ job: Job, logger: Logger) async -> Bool {
        let clock = router.configuration.clock
        let next: Date?
        do {
            next = try await store.nextAttempt(tenant: job.tenant, job: job.id)
        } catch {
            logger.error("cannot read the job's next retry time", metadata: ["herald.error": "\(error)"])
            return false
        }
        guard let next else { return false }
        var remaining = min(max(0, next.timeIntervalSince(clock.date)), Self.seconds(configuration.rescanInterval))
        while remaining > 0, !isStopping {
            let step = min(remaining, 0.25)
            do {
                try await clock.sleep(until: clock.now.advanced(by: .milliseconds(Int64(step * 1000))))
            } catch {
                return false
            }
            remaining -= step
        }
        return !isStopping
    }

    private func finishIfDone(_ job: Job, logger: Logger) async {
        do {
            guard let progress = try await store.progress(tenant: job.tenant, job: job.id) else { return }
            guard progress.pending == 0 else {
                logger.debug("job has items leased elsewhere; it resumes at the next scan", metadata: ["herald.pending": "\(progress.pending)"])
                return
            }
            try await store.updateJob(tenant: job.tenant, id: job.id, state: .finished, at: router.configuration.clock.date)
            logger.info(
                "job finished", metadata: ["herald.sent": "\(progress.sent)", "herald.failed": "\(progress.failed)"])
        } catch {
            logger.error("cannot finish the job", metadata: ["herald.error": "\(error)"])
        }
    }

    /// Sends one item (once a tenant permit is free) and records its outcome.
    private func send(_ item: JobItem, of job: Job, permits pool: PermitPool, logger: Logger) async -> ItemOutcome {
        state.withLock { $0.itemsInFlight += 1 }
        await pool.acquire()
        defer {
            pool.release()
            state.withLock { $0.itemsInFlight -= 1 }
        }
        guard !isStopping else { return .leftPending }

        // The tenant's delivery policy decides: recorded, or deferred to its next attempt.
        switch await delivery.deliver(item, of: job, logger: logger) {
        case .recorded, .deferred: return .recorded
        case .leftPending: return .leftPending
        case .pause: return .pause
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let parts = duration.components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}
