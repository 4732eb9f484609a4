import Foundation
import Herald
import HeraldCore
import HeraldStore
import Logging
import Synchronization
import Testing

/// The job runner under a hostile tenant's load: many unfinished batches, a store that fails.
@Suite("Job runner: bounds and store failures")
struct JobRunnerBoundsTests {
    static let tenant = Fixtures.tenantID("acme")

    /// A transport that answers 200 after a short pause (so that sends overlap) and counts what
    /// it was sent, per apns-id, and the sends that returned.
    final class CountingTransport: PushTransport, TransportProvider {
        private let sent = Mutex<[String: Int]>([:])
        private let delay: Duration
        private let failFirstOfEvery: Int?
        private let holdFirstSends: (@Sendable (HeraldCore.Notification) async -> Void)?
        private let byCallback: Bool

        /// - Parameters:
        ///   - failFirstOfEvery: of every this many notifications (in the order of their first
        ///     sends), the first one's first send is answered 503 ServiceUnavailable.
        ///   - holdFirstSends: when given, a notification's first send waits for it instead of
        ///     `delay` (later sends still take `delay`).
        ///   - byCallback: it says it has a callback form (``PushTransport/startSend(_:deadline:completion:)``'s
        ///     default, a task awaiting `send`), so that the job runner may send by callback.
        init(
            delay: Duration = .milliseconds(1), failFirstOfEvery: Int? = nil, byCallback: Bool = false,
            holdFirstSends: (@Sendable (HeraldCore.Notification) async -> Void)? = nil
        ) {
            self.byCallback = byCallback
            self.delay = delay
            self.failFirstOfEvery = failFirstOfEvery
            self.holdFirstSends = holdFirstSends
        }

        var total: Int { sent.withLock { $0.values.reduce(0, +) } }
        var byID: [String: Int] { sent.withLock { $0 } }
        /// Sends that returned.
        var finished: Int { returned.withLock { $0 } }
        private let returned = Mutex(0)

        func send(_ admitted: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse {
            let notification = admitted.notification
            let (fail, first) = sent.withLock { sent -> (Bool, Bool) in
                let id = admitted.id.rawValue
                let earlier = sent[id] ?? 0
                sent[id] = earlier + 1
                guard let every = failFirstOfEvery, earlier == 0 else { return (false, earlier == 0) }
                return ((sent.count - 1) % every == 0, true)
            }
            defer { returned.withLock { $0 += 1 } }
            if first, let holdFirstSends {
                await holdFirstSends(notification)
            } else {
                try await Task.sleep(for: delay)
            }
            if fail { return APNsResponse(status: 503, apnsID: notification.id, reason: .serviceUnavailable) }
            return APNsResponse(status: 200, apnsID: notification.id)
        }

        var sendsByCallback: Bool { byCallback }

        func shutdown() async {}

        func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport { self }
    }

    /// A store whose outcome writes fail while `failing` is set (after `failAfter` successes).
    final class FlakyStore: PushStore {
        let base: any PushStore
        private let state = Mutex<(recorded: Int, failAfter: Int?, failures: Int)>((0, nil, 0))

        init(_ base: any PushStore) { self.base = base }

        func failRecords(after count: Int?) { state.withLock { $0 = (0, count, 0) } }
        var failures: Int { state.withLock { $0.failures } }
        /// While set, outcome writes wait (polling) before they write.
        func holdRecords(_ hold: Bool) { recordsHeld.withLock { $0 = hold } }
        private let recordsHeld = Mutex(false)

        /// Each outcome write and next attempt waits this long before it writes.
        func slowRecords(_ delay: Duration) { recordDelay.withLock { $0 = delay } }
        private let recordDelay = Mutex(Duration.zero)
        private func waitRecordDelay() async throws {
            let delay = recordDelay.withLock { $0 }
            if delay > .zero { try await Task.sleep(for: delay) }
        }

        /// Before an outcome write: waits while writes are held, then the write delay; counts the
        /// write against ``failRecords(after:)`` and throws once it is past the limit.
        private func beforeRecord() async throws {
            while recordsHeld.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            try await waitRecordDelay()
            let fail = state.withLock { state -> Bool in
                guard let limit = state.failAfter, state.recorded >= limit else {
                    state.recorded += 1
                    return false
                }
                state.failures += 1
                return true
            }
            if fail { throw StoreError.corrupt("disk I/O error (test)") }
        }

        func recordOutcome(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws -> Bool {
            try await beforeRecord()
            return try await base.recordOutcome(tenant: tenant, job: job, index: index, result: result)
        }

        /// The base store's own group write, held and delayed as one write. While
        /// ``failRecords(after:)`` counts writes, each change is written with its own call
        /// instead, so that exactly the writes before the limit are durable.
        func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
            if state.withLock({ $0.failAfter }) != nil {
                return try await recordEachChange(tenant: tenant, job: job, changes)
            }
            while recordsHeld.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            try await waitRecordDelay()
            return try await base.recordChanges(tenant: tenant, job: job, changes)
        }

        func recordInvalidToken(_ record: InvalidTokenRecord, tenant: TenantID) async throws {
            try await base.recordInvalidToken(record, tenant: tenant)
        }
        func invalidTokens(tenant: TenantID, lookups: [InvalidTokenLookup]) async throws -> [InvalidTokenRecord?] {
            try await base.invalidTokens(tenant: tenant, lookups: lookups)
        }
        func invalidTokens(tenant: TenantID, limit: Int) async throws -> [InvalidTokenRecord] {
            try await base.invalidTokens(tenant: tenant, limit: limit)
        }
        func registerToken(tenant: TenantID, token: DeviceToken, topic: String?, registeredAt: Date) async throws -> Int {
            try await base.registerToken(tenant: tenant, token: token, topic: topic, registeredAt: registeredAt)
        }
        func removeInvalidToken(tenant: TenantID, token: DeviceToken, topic: String?) async throws -> Int {
            try await base.removeInvalidToken(tenant: tenant, token: token, topic: topic)
        }
        func createJob(
            tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
            createdAt: Date, limits: JobLimits?
        ) async throws -> JobCreation {
            try await base.createJob(
                tenant: tenant, id: id, environment: environment, notifications: notifications, createdAt: createdAt,
                limits: limits)
        }
        func job(tenant: TenantID, id: JobID) async throws -> Job? { try await base.job(tenant: tenant, id: id) }
        func jobs(tenant: TenantID, states: Set<JobState>?, limit: Int, after: JobListPosition?) async throws -> [Job] {
            try await base.jobs(tenant: tenant, states: states, limit: limit, after: after)
        }
        func unfinishedJobs(perTenant: Int) async throws -> [Job] {
            let silent = listings.withLock { listings -> Bool in
                listings.calls += 1
                return listings.silent
            }
            if silent {
                // A store that never answers: only a cancellation ends the call.
                defer { listings.withLock { $0.givenUp += 1 } }
                try await Task.sleep(for: .seconds(24 * 3600))
            }
            return try await base.unfinishedJobs(perTenant: perTenant)
        }
        /// Calls of `unfinishedJobs` (each scan of the runner lists the unfinished jobs once).
        var jobListings: Int { listings.withLock { $0.calls } }
        /// While set, `unfinishedJobs` never answers (until its caller gives it up).
        func silenceListings(_ silent: Bool) { listings.withLock { $0.silent = silent } }
        /// Silent listings that ended (cancelled by their caller).
        var listingsGivenUp: Int { listings.withLock { $0.givenUp } }
        private let listings = Mutex<(calls: Int, silent: Bool, givenUp: Int)>((0, false, 0))
        func updateJob(tenant: TenantID, id: JobID, state: JobState, at: Date) async throws -> Bool {
            try await base.updateJob(tenant: tenant, id: id, state: state, at: at)
        }
        func claimPendingItems(tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date)
            async throws -> [JobItem]
        {
            try await base.claimPendingItems(
                tenant: tenant, job: job, limit: limit, claimant: claimant, now: now, leaseUntil: leaseUntil)
        }
        /// Called at each claim with its index hint, before the claim.
        func observeClaims(_ observer: @escaping @Sendable (Int) -> Void) { claimObserver.withLock { $0 = observer } }
        private let claimObserver = Mutex<(@Sendable (Int) -> Void)?>(nil)
        /// Called after each claim with the items it returned.
        func observeClaimed(_ observer: @escaping @Sendable ([JobItem]) -> Void) { claimedObserver.withLock { $0 = observer } }
        private let claimedObserver = Mutex<(@Sendable ([JobItem]) -> Void)?>(nil)
        /// Off: the store says it may ignore the hint (as a store without one would).
        func claimStrictly(_ strict: Bool) { strictClaims.withLock { $0 = strict } }
        private let strictClaims = Mutex(true)

        var claimsFromIndexStrictly: Bool { strictClaims.withLock { $0 } && base.claimsFromIndexStrictly }
        func claimPendingItems(
            tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date, fromIndex: Int
        ) async throws -> [JobItem] {
            claimObserver.withLock { $0 }?(fromIndex)
            let items = try await base.claimPendingItems(
                tenant: tenant, job: job, limit: limit, claimant: claimant, now: now, leaseUntil: leaseUntil,
                fromIndex: fromIndex)
            claimedObserver.withLock { $0 }?(items)
            return items
        }
        func releaseLeases(tenant: TenantID, job: JobID, claimantBase: String, keeping: String) async throws -> Int {
            try await base.releaseLeases(tenant: tenant, job: job, claimantBase: claimantBase, keeping: keeping)
        }
        func renewLeases(tenant: TenantID, job: JobID, claimant: String, leaseUntil: Date) async throws -> Int {
            try await base.renewLeases(tenant: tenant, job: job, claimant: claimant, leaseUntil: leaseUntil)
        }
        func items(tenant: TenantID, job: JobID, fromIndex: Int, limit: Int) async throws -> [JobItem] {
            try await base.items(tenant: tenant, job: job, fromIndex: fromIndex, limit: limit)
        }
        func progress(tenant: TenantID, job: JobID) async throws -> JobProgress? {
            try await base.progress(tenant: tenant, job: job)
        }
        func deferItem(tenant: TenantID, job: JobID, index: Int, retry: JobItemRetry) async throws -> Bool {
            try await waitRecordDelay()
            return try await base.deferItem(tenant: tenant, job: job, index: index, retry: retry)
        }
        func nextAttempt(tenant: TenantID, job: JobID) async throws -> Date? {
            try await base.nextAttempt(tenant: tenant, job: job)
        }
        /// Each `markOnWire` call's indexes, in call order.
        var markCalls: [[Int]] { marks.withLock { $0.calls } }
        /// While set, `markOnWire` and `leasedItems` calls wait (polling) before they write or read.
        func holdMarks(_ hold: Bool) { marks.withLock { $0.hold = hold } }
        /// While set, `markOnWire` and `leasedItems` calls fail.
        func failMarks(_ fail: Bool) { marks.withLock { $0.fail = fail } }
        private let marks = Mutex<(calls: [[Int]], hold: Bool, fail: Bool)>(([], false, false))

        /// Each `leasedItems` call's indexes, in call order.
        var checkCalls: [[Int]] { checks.withLock { $0 } }
        private let checks = Mutex<[[Int]]>([])

        /// The first `leasedItems` call that asks for one of these indexes answers it as leased
        /// elsewhere (another claimant took it meanwhile); later calls answer as the store does.
        func takeElsewhereOnce(_ indexes: Set<Int>) { takenElsewhere.withLock { $0 = indexes } }
        private let takenElsewhere = Mutex<Set<Int>>([])

        func leasedItems(tenant: TenantID, job: JobID, indexes: [Int], claimant: String) async throws -> Set<Int> {
            checks.withLock { $0.append(indexes) }
            while marks.withLock({ $0.hold }) { try await Task.sleep(for: .milliseconds(5)) }
            if marks.withLock({ $0.fail }) { throw StoreError.corrupt("disk I/O error (test)") }
            let leased = try await base.leasedItems(tenant: tenant, job: job, indexes: indexes, claimant: claimant)
            let taken = takenElsewhere.withLock { taken in
                defer { taken.subtract(indexes) }
                return taken.intersection(indexes)
            }
            return leased.subtracting(taken)
        }

        func markOnWire(tenant: TenantID, job: JobID, indexes: [Int], claimant: String, at: Date) async throws -> Set<Int> {
            marks.withLock { $0.calls.append(indexes) }
            while marks.withLock({ $0.hold }) { try await Task.sleep(for: .milliseconds(5)) }
            if marks.withLock({ $0.fail }) { throw StoreError.corrupt("disk I/O error (test)") }
            return try await base.markOnWire(tenant: tenant, job: job, indexes: indexes, claimant: claimant, at: at)
        }
    }

    static func notes(_ count: Int, seed: UInt8) -> [HeraldCore.Notification] {
        let payload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        return (0..<count).map { index in
            var bytes = [UInt8](repeating: seed, count: 32)
            bytes[30] = UInt8(truncatingIfNeeded: index >> 8)
            bytes[31] = UInt8(truncatingIfNeeded: index)
            return HeraldCore.Notification(
                deviceToken: DeviceToken(bytes: bytes), topic: "com.example.app", payload: payload)
        }
    }

    /// Runs `runner` until `condition` holds (waiting as ``eventually(_:_:)`` does), then stops it
    /// and shuts `router` down.
    static func run(_ runner: JobRunner, router: Router, until what: String, _ condition: () async throws -> Bool)
        async throws
    {
        async let running: Void = runner.run()
        try await eventually(what, condition)
        runner.stop()
        await running
        await router.shutdown()
    }

    /// Waits (generously) until `condition` holds.
    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<3000 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("timed out waiting until \(what)")
    }

    @Test("with 40 unfinished batches, sends, send tasks, claimed items and active jobs stay within the permits")
    func boundsWithManyJobs() async throws {
        let store = try Fixtures.store()
        let transport = CountingTransport()
        let router = try Fixtures.router(transports: transport, store: store, clock: SystemPushClock())
        await router.install([Fixtures.tenant("acme")])
        for job in 0..<40 {
            _ = try await store.createJob(
                tenant: Self.tenant, id: try JobID("job-\(job)"), environment: nil,
                notifications: Self.notes(25, seed: UInt8(job)), createdAt: Date())
        }
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 4
        configuration.claimSize = 10
        configuration.jobsPerTenant = 2
        configuration.rescanInterval = .milliseconds(100)
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        try await Self.run(runner, router: router, until: "every job finished") {
            try await store.jobs(tenant: Self.tenant, states: [.finished], limit: 100).count == 40
        }

        let statistics = runner.statistics
        #expect(transport.total == 1000, "every item sent once")
        #expect(transport.byID.values.allSatisfy { $0 == 1 })
        #expect(statistics.peakItemsInFlight <= 4, "sends in flight: \(statistics.peakItemsInFlight)")
        #expect(statistics.peakSendTasks <= 2 * 4, "send tasks: \(statistics.peakSendTasks)")
        // Per job: one claim not handed out yet plus the last claim's low-water mark (the next is
        // claimed when no more than its 4 send tasks' worth are left), and the items its send
        // tasks took, one each.
        #expect(statistics.peakClaimedItemsHeld <= 2 * (10 + 4 + 4), "claimed items in memory: \(statistics.peakClaimedItemsHeld)")
        #expect(statistics.peakActiveJobs <= 2, "jobs worked on at once: \(statistics.peakActiveJobs)")
        #expect(statistics.peakItemsInFlight >= 1 && statistics.itemsInFlight == 0 && statistics.sendTasks == 0)
    }

    /// A scan's listing that the store never answers (a query the PostgreSQL client lost waits
    /// out `call_timeout`) is given up at the stop: the run returns while the call still waits.
    @Test("a stop does not wait for a scan's listing that the store never answers", .timeLimit(.minutes(1)))
    func stopGivesUpASilentListing() async throws {
        let store = FlakyStore(try Fixtures.store())
        store.silenceListings(true)
        let router = try Fixtures.router(transports: CountingTransport(), store: store, clock: SystemPushClock())
        await router.install([Fixtures.tenant("acme")])
        var configuration = JobRunnerConfiguration()
        configuration.rescanInterval = .seconds(3600)
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        async let running: Void = runner.run()
        try await Self.eventually("the first scan lists the unfinished jobs") { store.jobListings == 1 }
        #expect(store.listingsGivenUp == 0)
        runner.stop()
        await running
        #expect(store.listingsGivenUp == 1, "the listing was cancelled, not answered")
        await router.shutdown()
    }

    @Test("a failed outcome write stops the job's sends at once; the job resumes later and finishes")
    func failedOutcomeWriteStopsTheJob() async throws {
        let base = try Fixtures.store()
        let store = FlakyStore(base)
        store.failRecords(after: 3)
        let transport = CountingTransport()
        let router = try Fixtures.router(transports: transport, store: store, clock: SystemPushClock())
        await router.install([Fixtures.tenant("acme")])
        let id = try JobID("flaky")
        _ = try await store.createJob(
            tenant: Self.tenant, id: id, environment: nil, notifications: Self.notes(20, seed: 7), createdAt: Date())

        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 1
        configuration.claimSize = 20
        configuration.rescanInterval = .seconds(3600)  // resumes only when the test asks
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        async let running: Void = runner.run()

        try await Self.eventually("the outcome write failed") { store.failures >= 1 }
        try await Self.eventually("the job paused") { runner.activeJobCount == 0 }
        // 3 outcomes recorded, the 4th write failed; the sends do not wait for their outcomes'
        // writes, so a few more may have gone out meanwhile, but no more than one send on the
        // wire plus one commit group (`commitGroup`) beyond the last durable outcome. After the
        // failure nothing more is written or sent.
        let sentAtPause = transport.total
        let unrecorded = sentAtPause - 3
        #expect(unrecorded >= 1 && unrecorded <= 1 + configuration.commitGroup, "sent without an outcome: \(unrecorded)")
        // The failed group's writes (one call per item while this store counts failures).
        let failures = store.failures
        #expect(failures >= 1 && failures <= unrecorded)
        let progress = try #require(try await base.progress(tenant: Self.tenant, job: id))
        #expect(progress.pending == 17 && progress.sent == 3)

        store.failRecords(after: nil)
        runner.rescan()
        try await Self.eventually("the job finished") {
            try await base.job(tenant: Self.tenant, id: id)?.state == .finished
        }
        runner.stop()
        await running
        await router.shutdown()
        // Only the items whose outcomes were not written went out twice (same apns-id).
        #expect(transport.total == 20 + unrecorded)
        #expect(transport.byID.values.filter { $0 == 2 }.count == unrecorded)
        #expect(transport.byID.values.allSatisfy { $0 <= 2 })
    }

    @Test("sends run ahead of their outcomes' writes by at most the permits plus one commit group")
    func sendsAheadOfOutcomesAreBounded() async throws {
        let base = try Fixtures.store()
        let store = FlakyStore(base)
        store.holdRecords(true)
        let transport = CountingTransport()
        let router = try Fixtures.router(transports: transport, store: store, clock: SystemPushClock())
        await router.install([Fixtures.tenant("acme")])
        let id = try JobID("ahead")
        _ = try await store.createJob(
            tenant: Self.tenant, id: id, environment: nil, notifications: Self.notes(200, seed: 9), createdAt: Date())
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 4
        configuration.commitGroup = 8
        configuration.claimSize = 200
        configuration.rescanInterval = .seconds(3600)
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        async let running: Void = runner.run()

        // No outcome can be written: the sends stop once 4 + 8 items are out without one. Once
        // the four send tasks all wait for a commit slot, none has a send under way and none can
        // take another item.
        try await Self.eventually("every send task waits for a commit slot") {
            runner.statistics.sendersWaitingForCommitSlot == 4
        }
        #expect(transport.total == 12, "sent without a durable outcome: \(transport.total)")
        #expect(runner.statistics.peakItemsInFlight <= 4)
        #expect(try await base.progress(tenant: Self.tenant, job: id)?.sent == 0)

        store.holdRecords(false)
        try await Self.eventually("the job finished") {
            try await base.job(tenant: Self.tenant, id: id)?.state == .finished
        }
        runner.stop()
        await running
        await router.shutdown()
        #expect(transport.total == 200)
        #expect(transport.byID.values.allSatisfy { $0 == 1 })
        #expect(try await base.progress(tenant: Self.tenant, job: id) == JobProgress(pending: 0, sent: 200, failed: 0))
    }

    @Test("a runner takes back the leases of its earlier instances, not other claimants'")
    func takesBackOwnLeases() async throws {
        let store = try Fixtures.store()
        let id = try JobID("leases")
        _ = try await store.createJob(
            tenant: Self.tenant, id: id, environment: nil, notifications: Self.notes(8, seed: 1), createdAt: Date())
        let now = Date()
        let until = now.addingTimeInterval(300)
        for (claimant, count) in [("herald/old1", 2), ("herald", 2), ("heraldx/a", 2), ("other/b", 2)] {
            let claimed = try await store.claimPendingItems(
                tenant: Self.tenant, job: id, limit: count, claimant: claimant, now: now, leaseUntil: until)
            #expect(claimed.count == count)
        }
        let released = try await store.releaseLeases(
            tenant: Self.tenant, job: id, claimantBase: "herald", keeping: "herald/new")
        #expect(released == 4)
        let items = try await store.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 10)
        #expect(items.compactMap(\.claimant).sorted() == ["heraldx/a", "heraldx/a", "other/b", "other/b"])
        let mine = try await store.claimPendingItems(
            tenant: Self.tenant, job: id, limit: 10, claimant: "herald/new", now: now, leaseUntil: until)
        #expect(mine.map(\.index) == [0, 1, 2, 3])
    }
}
