import Foundation
import HeraldCore
import HeraldStore
import Testing

@testable import Herald

/// Items marked on the wire before their send (`WireMarks`, `PushStore.markOnWire`) and what a
/// runner that takes a dead instance's leases back does with them, per guarantee.
@Suite("Delivery: on the wire across a crash")
struct OnTheWireTests {
    static let tenant = Fixtures.tenantID("acme")
    typealias Flaky = JobRunnerBoundsTests.FlakyStore

    /// A job of `count` items, all leased to a dead instance `herald/dead` of the runner, which
    /// marked `marked` on the wire before it died.
    static func crashedJob(_ store: SQLitePushStore, count: Int, marked: [Int]) async throws -> JobID {
        let id = try JobID("crashed")
        _ = try await store.createJob(
            tenant: tenant, id: id, environment: nil, notifications: JobRunnerBoundsTests.notes(count, seed: 3),
            createdAt: Date())
        try await store.updateJob(tenant: tenant, id: id, state: .running, at: Date())
        let claimed = try await store.claimPendingItems(
            tenant: tenant, job: id, limit: count, claimant: "herald/dead", now: Date(),
            leaseUntil: Date().addingTimeInterval(3600))
        #expect(claimed.count == count)
        #expect(
            try await store.markOnWire(tenant: tenant, job: id, indexes: marked, claimant: "herald/dead", at: Date())
                == Set(marked))
        return id
    }

    /// Runs a runner of instance `new` until the job finished.
    /// - Parameter exclusiveStore: false to run it as on a shared store (PostgreSQL).
    /// - Parameter byCallback: the transport offers a callback form, so that an at-least-once job
    ///   is sent by the runner's driving task instead of by send tasks.
    static func resume(
        _ store: any PushStore, guarantee: DeliveryGuarantee, job id: JobID, exclusiveStore: Bool = true,
        byCallback: Bool = false, lease: Duration = .seconds(300)
    ) async throws -> JobRunnerBoundsTests.CountingTransport {
        let transport = JobRunnerBoundsTests.CountingTransport(byCallback: byCallback)
        let router = try Fixtures.router(transports: transport, store: store, clock: SystemPushClock())
        var acme = Fixtures.tenant("acme")
        acme.delivery.guarantee = guarantee
        await router.install([acme])
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 4
        configuration.claimSize = 8
        configuration.instance = "new"
        configuration.exclusiveStore = exclusiveStore
        configuration.lease = lease
        configuration.rescanInterval = .milliseconds(200)
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        try await JobRunnerBoundsTests.run(runner, router: router, until: "the job finished") {
            try await store.job(tenant: Self.tenant, id: id)?.state == .finished
        }
        return transport
    }

    @Test("at-most-once: items on the wire at the crash are recorded unknown, never sent; the rest sent once")
    func atMostOnceReportsTheMarkedUnknown() async throws {
        let store = try Fixtures.store()
        let id = try await Self.crashedJob(store, count: 20, marked: [2, 5, 11])
        let transport = try await Self.resume(store, guarantee: .atMostOnce, job: id)
        let items = try await store.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 100)
        for item in items {
            let apnsID = try #require(item.notification.id?.rawValue)
            if [2, 5, 11].contains(item.index) {
                #expect(item.state == .unknown && item.result?.reason == DeliveryReason.unknown)
                #expect(item.result?.message?.contains("on the wire") == true)
                #expect(transport.byID[apnsID] == nil, "item \(item.index) was sent again")
            } else {
                #expect(item.state == .sent)
                #expect(transport.byID[apnsID] == 1)
            }
        }
        #expect(transport.total == 17)
        let progress = try await store.progress(tenant: Self.tenant, job: id)
        #expect(progress == JobProgress(pending: 0, sent: 17, failed: 0, retrying: 0, unknown: 3))
    }

    @Test("at-least-once: items on the wire at the crash are sent again with their stored apns-id")
    func atLeastOnceResendsTheMarked() async throws {
        let store = try Fixtures.store()
        let id = try await Self.crashedJob(store, count: 20, marked: [2, 5, 11])
        let stored = try await store.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 100)
        let transport = try await Self.resume(store, guarantee: .atLeastOnce, job: id)
        #expect(transport.total == 20)
        #expect(Set(transport.byID.keys) == Set(stored.compactMap { $0.notification.id?.rawValue }))
        #expect(transport.byID.values.allSatisfy { $0 == 1 })
        let items = try await store.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 100)
        #expect(items.allSatisfy { $0.state == .sent })
        // Under at-least-once with the store to itself the runner sends without a wire mark: only
        // the items marked before the crash carry one.
        #expect(items.filter { $0.onWireAt != nil }.map(\.index) == [2, 5, 11])
    }

    /// A job of 30 items whose first 29 are claimed by `herald/a`, and that claimant's marks.
    static func heldJob(_ name: String, seed: UInt8) async throws -> (SQLitePushStore, Flaky, JobID, WireMarks) {
        let base = try Fixtures.store()
        let store = Flaky(base)
        let id = try JobID(name)
        _ = try await store.createJob(
            tenant: tenant, id: id, environment: nil, notifications: JobRunnerBoundsTests.notes(30, seed: seed),
            createdAt: Date())
        _ = try await store.claimPendingItems(
            tenant: tenant, job: id, limit: 29, claimant: "herald/a", now: Date(),
            leaseUntil: Date().addingTimeInterval(3600))
        return (base, store, id, WireMarks(store: store, tenant: tenant, job: id, claimant: "herald/a", clock: SystemPushClock()))
    }

    /// Asks for item 0 alone, and while the store holds that call (until `started`), for items
    /// 1 to 29; then lets the store go on. Returns each item's answer.
    static func askTogether(
        _ store: Flaky, _ marks: WireMarks, started: @escaping @Sendable () -> Bool,
        _ ask: @escaping @Sendable (Int) async throws -> Bool
    ) async throws -> [Int: Bool] {
        store.holdMarks(true)
        return try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
            group.addTask { (0, try await ask(0)) }
            try await JobRunnerBoundsTests.eventually("the first call started") { started() }
            for index in 1..<30 { group.addTask { (index, try await ask(index)) } }
            try await JobRunnerBoundsTests.eventually("the others wait") { marks.waitingCount == 29 }
            store.holdMarks(false)
            var answers: [Int: Bool] = [:]
            for try await (index, answer) in group { answers[index] = answer }
            return answers
        }
    }

    @Test("marks asked for while one is written go out together in the next write; each waits for its own")
    func marksAreGroupCommitted() async throws {
        let (base, store, id, marks) = try await Self.heldJob("marks", seed: 4)

        // Index 29 is not leased to this claimant: it is not marked, and not to be sent.
        let answers = try await Self.askTogether(store, marks, started: { store.markCalls.count == 1 }) { try await marks.mark($0) }
        #expect(answers.count == 30 && answers.filter(\.value).count == 29 && answers[29] == false)
        #expect(store.markCalls.count == 2, "\(store.markCalls)")
        #expect(store.markCalls.last?.sorted() == Array(1..<30))
        let items = try await base.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 100)
        #expect(items.filter { $0.onWireAt != nil }.map(\.index) == Array(0..<29))

        // A failed write fails every mark of its batch: none of them may be sent.
        store.failMarks(true)
        await #expect(throws: StoreError.self) { _ = try await marks.mark(3) }
        store.failMarks(false)
        #expect(try await marks.mark(3))
        #expect(marks.waitingCount == 0)
    }

    /// A new job of `count` items in a fresh store, seen through a ``Flaky`` wrapper.
    static func newJob(_ name: String, count: Int, seed: UInt8) async throws -> (SQLitePushStore, Flaky, JobID) {
        let base = try Fixtures.store()
        let store = Flaky(base)
        let id = try JobID(name)
        _ = try await store.createJob(
            tenant: tenant, id: id, environment: nil, notifications: JobRunnerBoundsTests.notes(count, seed: seed),
            createdAt: Date())
        return (base, store, id)
    }

    /// Runs the job as on a shared store, sent by callback, with leases of a second.
    static func resumeSharedByCallback(_ store: Flaky, job id: JobID) async throws -> JobRunnerBoundsTests.CountingTransport {
        try await resume(store, guarantee: .atLeastOnce, job: id, exclusiveStore: false, byCallback: true, lease: .seconds(1))
    }

    @Test("on a shared store, at-least-once items are checked before their send and not marked; at-most-once items are marked", arguments: DeliveryGuarantee.allCases)
    func sharedStoreChecksOrMarks(_ guarantee: DeliveryGuarantee) async throws {
        let count = 40
        let (base, store, id) = try await Self.newJob("shared", count: count, seed: 6)
        let transport = try await Self.resume(store, guarantee: guarantee, job: id, exclusiveStore: false)

        #expect(transport.total == count && transport.byID.values.allSatisfy { $0 == 1 })
        let items = try await base.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 100)
        #expect(items.allSatisfy { $0.state == .sent })
        switch guarantee {
        case .atLeastOnce:
            #expect(store.markCalls.isEmpty, "\(store.markCalls)")
            #expect(store.checkCalls.flatMap { $0 }.sorted() == Array(0..<count))
            #expect(items.allSatisfy { $0.onWireAt == nil })
        case .atMostOnce:
            #expect(store.checkCalls.isEmpty, "\(store.checkCalls)")
            #expect(store.markCalls.flatMap { $0 }.sorted() == Array(0..<count))
            #expect(items.allSatisfy { $0.onWireAt != nil })
        }
    }

    @Test("on a shared store a job sent by callback checks its items' leases a group at a time before their sends; an item taken elsewhere is not sent then")
    func sharedStoreByCallbackChecksLeasesInGroups() async throws {
        let count = 200
        let (base, store, id) = try await Self.newJob("shared-callbacks", count: count, seed: 8)
        // Three items' leases are found taken by another claimant at their first check: they are
        // not sent then. Their lease (ours still, in the store) runs out, a later claim takes them
        // again, and they are sent once, after a check that finds them ours.
        let elsewhere: Set<Int> = [5, 70, 199]
        store.takeElsewhereOnce(elsewhere)
        let transport = try await Self.resumeSharedByCallback(store, job: id)

        #expect(transport.total == count && transport.byID.values.allSatisfy { $0 == 1 }, "\(transport.byID.values.filter { $0 != 1 })")
        let items = try await base.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: count)
        #expect(items.count == count && items.allSatisfy { $0.state == .sent })
        // Checked, not marked; a group at a time (at most 64), each item once more for the three.
        let checks = store.checkCalls
        #expect(store.markCalls.isEmpty, "\(store.markCalls)")
        #expect(checks.allSatisfy { $0.count <= 64 })
        // Send tasks (4 here) could only have their own items checked together: a group larger
        // than that is the driving task's.
        #expect(checks.contains { $0.count > 4 } && checks.count < count / 4, "\(checks.map(\.count))")
        var checkedTimes: [Int: Int] = [:]
        for index in checks.joined() { checkedTimes[index, default: 0] += 1 }
        #expect(Set(checkedTimes.keys) == Set(0..<count))
        #expect(elsewhere.allSatisfy { checkedTimes[$0] == 2 }, "\(elsewhere.map { checkedTimes[$0] ?? 0 })")
    }

    @Test("on a shared store a job sent by callback whose lease check fails sends nothing of that group and pauses; it finishes later")
    func sharedStoreByCallbackFailedCheckPauses() async throws {
        let count = 40
        let (base, store, id) = try await Self.newJob("shared-check-fails", count: count, seed: 9)
        store.failMarks(true)
        let finishing = Task { try await Self.resumeSharedByCallback(store, job: id) }
        try await JobRunnerBoundsTests.eventually("checks were refused") { store.checkCalls.count >= 2 }
        let items = try await base.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: count)
        #expect(items.allSatisfy { $0.state == .pending })
        store.failMarks(false)
        let transport = try await finishing.value
        #expect(transport.total == count && transport.byID.values.allSatisfy { $0 == 1 })
        let after = try await base.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: count)
        #expect(after.allSatisfy { $0.state == .sent })
    }

    @Test("lease checks asked for together are read together; an item leased elsewhere is not to be sent; nothing is written")
    func checksAreGroupedAndWriteNothing() async throws {
        let (base, store, id, marks) = try await Self.heldJob("checks", seed: 7)
        let answers = try await Self.askTogether(store, marks, started: { store.checkCalls.count == 1 }) { try await marks.check($0) }
        #expect(answers.count == 30 && answers.filter(\.value).count == 29 && answers[29] == false)
        #expect(store.checkCalls.count == 2 && store.checkCalls.last?.sorted() == Array(1..<30), "\(store.checkCalls)")
        #expect(store.markCalls.isEmpty)
        #expect(try await base.items(tenant: Self.tenant, job: id, fromIndex: 0, limit: 100).allSatisfy { $0.onWireAt == nil })

        // A failed read fails the check: the item must not be sent.
        store.failMarks(true)
        await #expect(throws: StoreError.self) { _ = try await marks.check(3) }
        store.failMarks(false)
        #expect(try await marks.check(3))
    }
}
