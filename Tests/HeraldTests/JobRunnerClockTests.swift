import Foundation
import Herald
import HeraldCore
import HeraldTestSupport
import HeraldStore
import Synchronization
import Testing

/// The job runner's timers (the rescan, the lease renewal) and its retry wait run on the router's
/// clock: here a ``SteppedPushClock`` that moves only when the test advances it, so each test
/// waits for the runner to be asleep (an event) and then moves time, instead of sleeping.
///
/// The time limit only ends a runner that misses its wake-up (a broken wait sleeps on a clock that
/// never moves again): such a test has failed already, and is cancelled instead of hanging.
@Suite("Job runner: timers and the retry wait on the runner's clock", .timeLimit(.minutes(2)))
struct JobRunnerClockTests {
    typealias Bounds = JobRunnerBoundsTests

    /// A tenant whose items answered 503 are retried one minute after their send (no jitter).
    static func tenant() -> TenantConfiguration {
        var tenant = Fixtures.tenant("acme")
        tenant.delivery.initialBackoff = .seconds(60)
        tenant.delivery.maxBackoff = .seconds(60)
        tenant.delivery.jitter = 0
        return tenant
    }

    static func runner(_ router: Router, _ store: any PushStore, rescan: Duration = .seconds(3600)) -> JobRunner {
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 2
        configuration.rescanInterval = rescan
        return JobRunner(router: router, store: store, configuration: configuration)
    }

    /// A runner whose job of three items was answered 503 once each, asleep until their retry
    /// is due a minute later (no time has passed on `clock`).
    private static func runnerWaitingForRetries(clock: SteppedPushClock) async throws -> (
        runner: JobRunner, router: Router, store: SQLitePushStore, transport: Bounds.CountingTransport, job: JobID
    ) {
        let store = try Fixtures.store()
        let transport = Bounds.CountingTransport(failFirstOfEvery: 1)
        let router = try Fixtures.router(transports: transport, store: store, clock: clock)
        await router.install([tenant()])
        let id = try JobID("retries")
        _ = try await store.createJob(
            tenant: Bounds.tenant, id: id, environment: nil, notifications: Bounds.notes(3, seed: 21),
            createdAt: clock.date)
        return (runner(router, store), router, store, transport, id)
    }

    @Test("a job whose only items wait for a retry sleeps until the first is due, then sends them")
    func sleepsUntilTheFirstRetryIsDue() async throws {
        let clock = SteppedPushClock()
        let (runner, router, store, transport, id) = try await Self.runnerWaitingForRetries(clock: clock)
        let due = clock.now.advanced(by: .seconds(60))
        async let running: Void = runner.run()

        try await Bounds.eventually("each item was sent once and the runner sleeps until the first retry is due") {
            transport.total == 3 && clock.deadlines.contains(due)
        }
        // Asleep: nothing is sent, and no earlier wake-up is due (no polling).
        #expect(transport.total == 3)
        #expect(clock.deadlines.allSatisfy { $0 >= due }, "sleeps under way: \(clock.deadlines)")
        #expect(try await store.job(tenant: Bounds.tenant, id: id)?.state == .running)

        clock.advance(to: due)
        try await Bounds.eventually("the job finished") {
            try await store.job(tenant: Bounds.tenant, id: id)?.state == .finished
        }
        runner.stop()
        await running
        await router.shutdown()
        #expect(transport.total == 6)
        #expect(transport.byID.values.allSatisfy { $0 == 2 })
        #expect(try await store.progress(tenant: Bounds.tenant, job: id) == JobProgress(pending: 0, sent: 3, failed: 0))
    }

    @Test("a cancel wakes the job's retry wait at once: the job ends cancelled, its retries unsent")
    func aCancelEndsTheRetryWait() async throws {
        let clock = SteppedPushClock()
        let (runner, router, store, transport, id) = try await Self.runnerWaitingForRetries(clock: clock)
        let due = clock.now.advanced(by: .seconds(60))
        async let running: Void = runner.run()
        try await Bounds.eventually("the runner sleeps until the first retry is due") {
            transport.total == 3 && clock.deadlines.contains(due)
        }

        #expect(try await store.updateJob(tenant: Bounds.tenant, id: id, state: .cancelled, at: clock.date))
        runner.jobCancelled(tenant: Bounds.tenant, id: id)
        try await Bounds.eventually("the job's run ended") { runner.activeJobCount == 0 }
        #expect(!clock.deadlines.contains(due))
        // A run that missed the wake-up still ends (the test fails above, it does not hang).
        if runner.activeJobCount > 0 { clock.advance(to: due) }
        runner.stop()
        await running
        await router.shutdown()
        #expect(transport.total == 3)
        #expect(try await store.job(tenant: Bounds.tenant, id: id)?.state == .cancelled)
    }

    @Test("the runner's stop wakes every job's retry wait: run() returns, the retries stay pending")
    func theStopEndsTheRetryWait() async throws {
        let clock = SteppedPushClock()
        let (runner, router, store, transport, id) = try await Self.runnerWaitingForRetries(clock: clock)
        let due = clock.now.advanced(by: .seconds(60))
        let stopped = Mutex(false)
        async let running: Void = {
            await runner.run()
            stopped.withLock { $0 = true }
        }()
        try await Bounds.eventually("the runner sleeps until the first retry is due") {
            transport.total == 3 && clock.deadlines.contains(due)
        }

        runner.stop()
        try await Bounds.eventually("run() returned") { stopped.withLock { $0 } }
        // A runner that missed the wake-up still returns (the test fails above, it does not hang).
        if !stopped.withLock({ $0 }) { clock.advance(to: due) }
        await running
        await router.shutdown()
        #expect(transport.total == 3)
        let progress = try #require(try await store.progress(tenant: Bounds.tenant, job: id))
        #expect(progress.pending == 3 && progress.retrying == 3, "\(progress)")
    }

    /// A job of four items in a test store over SQLite (``JobRunnerBoundsTests/FlakyStore``),
    /// with a router on `clock`.
    private static func fourItemJob(_ name: String, seed: UInt8, clock: SteppedPushClock) async throws -> (
        base: SQLitePushStore, store: Bounds.FlakyStore, transport: Bounds.CountingTransport, router: Router, job: JobID
    ) {
        let base = try Fixtures.store()
        let store = Bounds.FlakyStore(base)
        let transport = Bounds.CountingTransport()
        let router = try Fixtures.router(transports: transport, store: store, clock: clock)
        await router.install([Fixtures.tenant("acme")])
        let id = try JobID(name)
        _ = try await store.createJob(
            tenant: Bounds.tenant, id: id, environment: nil, notifications: Bounds.notes(4, seed: seed),
            createdAt: clock.date)
        return (base, store, transport, router, id)
    }

    /// Once the runner sleeps until its next rescan, moves `clock` there and waits until the job
    /// finished.
    private static func rescanUntilFinished(_ clock: SteppedPushClock, rescan: Duration, _ store: any PushStore, job: JobID)
        async throws
    {
        let tick = clock.now.advanced(by: rescan)
        try await Bounds.eventually("the runner's rescan sleeps until its next tick") { clock.deadlines.contains(tick) }
        #expect(try await store.job(tenant: Bounds.tenant, id: job)?.state == .running)
        clock.advance(to: tick)
        try await Bounds.eventually("the job resumed and finished") {
            try await store.job(tenant: Bounds.tenant, id: job)?.state == .finished
        }
    }

    @Test("a paused job resumes at the rescan of the runner's clock")
    func thePeriodicScanRunsOnTheClock() async throws {
        let clock = SteppedPushClock()
        let (base, store, _, router, id) = try await Self.fourItemJob("paused", seed: 22, clock: clock)
        store.failRecords(after: 0)
        let rescan = Duration.seconds(60)
        let runner = Self.runner(router, store, rescan: rescan)
        async let running: Void = runner.run()

        try await Bounds.eventually("the outcome write failed and the job paused") {
            store.failures >= 1 && runner.activeJobCount == 0
        }
        store.failRecords(after: nil)
        try await Self.rescanUntilFinished(clock, rescan: rescan, base, job: id)
        runner.stop()
        await running
        await router.shutdown()
        #expect(try await base.progress(tenant: Bounds.tenant, job: id) == JobProgress(pending: 0, sent: 4, failed: 0))
    }

    @Test("a job whose pending items are leased elsewhere runs again at the rescan, not as soon as its run ends")
    func itemsLeasedElsewhereWaitForTheRescan() async throws {
        let clock = SteppedPushClock()
        let (base, store, transport, router, id) = try await Self.fourItemJob("shared", seed: 24, clock: clock)
        // Another instance holds two of the items for an hour.
        let elsewhere = try await base.claimPendingItems(
            tenant: Bounds.tenant, job: id, limit: 2, claimant: "other-instance", now: clock.date,
            leaseUntil: clock.date.addingTimeInterval(3600))
        #expect(elsewhere.count == 2)
        let rescan = Duration.seconds(60)
        var configuration = JobRunnerConfiguration()
        configuration.rescanInterval = rescan
        configuration.exclusiveStore = false
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        async let running: Void = runner.run()

        // The run sends the two items it can claim and ends; the scan that follows the end of a
        // run (the second listing, after the first scan's) leaves the job alone.
        try await Bounds.eventually("the run sent what it could claim and the scan after it listed the jobs") {
            transport.total == 2 && runner.activeJobCount == 0 && store.jobListings >= 2
        }
        // The runner handles its events in order: once a job accepted after that scan has
        // started, the scan's own starts are made.
        let other = try JobID("other")
        let stored = try await store.createJob(
            tenant: Bounds.tenant, id: other, environment: nil, notifications: Bounds.notes(1, seed: 25),
            createdAt: clock.date)
        runner.jobAccepted(stored.job)
        try await Bounds.eventually("the other job finished") {
            try await base.job(tenant: Bounds.tenant, id: other)?.state == .finished
        }
        #expect(runner.statistics.runsStarted == 2, "runs: \(runner.statistics.runsStarted)")

        // The other instance's leases are released; at the rescan the job's next run sends the rest.
        #expect(try await base.releaseLeases(tenant: Bounds.tenant, job: id, claimantBase: "other-instance", keeping: "") == 2)
        try await Self.rescanUntilFinished(clock, rescan: rescan, base, job: id)
        runner.stop()
        await running
        await router.shutdown()
        #expect(transport.total == 5 && transport.byID.values.allSatisfy { $0 == 1 })
    }

    @Test("the leases of a job being worked on are renewed every third of the lease on the runner's clock")
    func leasesAreRenewedOnTheClock() async throws {
        let clock = SteppedPushClock()
        let store = try Fixtures.store()
        let released = Mutex(false)
        // Every first send waits until the test releases it: the items stay claimed meanwhile.
        let transport = Bounds.CountingTransport(holdFirstSends: { _ in
            while !released.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(5)) }
        })
        let router = try Fixtures.router(transports: transport, store: store, clock: clock)
        await router.install([Fixtures.tenant("acme")])
        let id = try JobID("leases")
        _ = try await store.createJob(
            tenant: Bounds.tenant, id: id, environment: nil, notifications: Bounds.notes(4, seed: 23),
            createdAt: clock.date)
        let runner = Self.runner(router, store)
        let lease = runner.configuration.lease
        let start = clock.date
        async let running: Void = runner.run()

        try await Bounds.eventually("two sends are held") { transport.total == 2 }
        func leases() async throws -> Set<Date> {
            Set(try await store.items(tenant: Bounds.tenant, job: id, fromIndex: 0, limit: 4).compactMap(\.leaseUntil))
        }
        #expect(try await leases() == [start.addingTimeInterval(lease.secondsValue)])
        let renewal = clock.now.advanced(by: runner.configuration.renewInterval)
        try await Bounds.eventually("the renewal sleeps until its time") { clock.deadlines.contains(renewal) }

        clock.advance(to: renewal)
        let renewed = start.addingTimeInterval((runner.configuration.renewInterval + lease).secondsValue)
        try await Bounds.eventually("the leases were renewed") { try await leases() == [renewed] }

        released.withLock { $0 = true }
        try await Bounds.eventually("the job finished") {
            try await store.job(tenant: Bounds.tenant, id: id)?.state == .finished
        }
        runner.stop()
        await running
        await router.shutdown()
        #expect(transport.total == 4)
    }
}
