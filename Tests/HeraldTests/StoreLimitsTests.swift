import Foundation
import GRDB
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

/// The store against a hostile tenant: big template batches, quotas, dates that would trap,
/// retention, and one process per store.
@Suite("Store: payloads once, quotas, retention, checked dates, process lock")
struct StoreLimitsTests {
    let acme = Fixtures.tenantID("acme")
    let other = Fixtures.tenantID("other")
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    static func template(_ count: Int, payloadBytes: Int) -> [HeraldCore.Notification] {
        let payload = Array(#"{"aps":{"alert":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: payloadBytes) + Array(#""}}"#.utf8)
        return (0..<count).map { index in
            var bytes = [UInt8](repeating: 0xab, count: 32)
            bytes[28] = UInt8(truncatingIfNeeded: index >> 24)
            bytes[29] = UInt8(truncatingIfNeeded: index >> 16)
            bytes[30] = UInt8(truncatingIfNeeded: index >> 8)
            bytes[31] = UInt8(truncatingIfNeeded: index)
            return HeraldCore.Notification(deviceToken: DeviceToken(bytes: bytes), topic: "com.example.app", payload: payload)
        }
    }

    @Test("a template batch stores its payload once, and every item reads it back")
    func payloadOnce() async throws {
        let store = try Fixtures.store()
        let job = try JobID("template")
        let notes = Self.template(2_000, payloadBytes: 4_000)
        _ = try await store.createJob(tenant: acme, id: job, environment: nil, notifications: notes, createdAt: t0)
        let payloads = try await store.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM job_payload WHERE tenant = ? AND job_id = ?", arguments: [acme.rawValue, job.rawValue]) ?? -1
        }
        // The chunk rows hold each item's fields and a payload id, nothing more (v10).
        let itemBytes = try store.chunkBytesBeyondFields(tenant: acme, job: job)
        #expect(payloads == 1)
        #expect(itemBytes == 0, "items keep no payload copy of their own")
        let items = try await store.items(tenant: acme, job: job, fromIndex: 1_990, limit: 100)
        #expect(items.count == 10 && items.allSatisfy { $0.notification.payload == notes[0].payload })
        let claimed = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 3, claimant: "r/1", now: t0, leaseUntil: t0.addingTimeInterval(60))
        #expect(claimed.map(\.notification.payload) == Array(repeating: notes[0].payload, count: 3))

        // A list batch with different payloads keeps each one (and reuses runs of equal ones).
        var list = Self.template(4, payloadBytes: 10)
        list[2].payload = Array(#"{"aps":{"alert":"other"}}"#.utf8)
        _ = try await store.createJob(tenant: acme, id: try JobID("list"), environment: nil, notifications: list, createdAt: t0)
        let read = try await store.items(tenant: acme, job: try JobID("list"), fromIndex: 0, limit: 10)
        #expect(read.map(\.notification.payload) == list.map(\.payload))
    }

    @Test("quotas: active jobs and pending items per tenant, checked in the job's transaction, other tenants unaffected")
    func quotas() async throws {
        let store = try Fixtures.store()
        let limits = JobLimits(maxActiveJobs: 2, maxPendingItems: 10)
        func create(_ id: String, _ count: Int, tenant: TenantID? = nil) async throws -> JobCreation {
            try await store.createJob(
                tenant: tenant ?? acme, id: try JobID(id), environment: nil, notifications: Self.template(count, payloadBytes: 1),
                createdAt: t0, limits: limits)
        }
        _ = try await create("a", 6)
        await #expect(throws: StoreError.self) { _ = try await create("too-many-items", 5) }
        do {
            _ = try await create("too-many-items", 5)
        } catch let error as StoreError {
            #expect(error.isQuotaExceeded && error.message.contains("jobs.max_pending_items_per_tenant"))
        }
        _ = try await create("b", 4)
        do {
            _ = try await create("third", 1)
            Issue.record("a third active job was accepted")
        } catch let error as StoreError {
            #expect(error.isQuotaExceeded && error.message.contains("jobs.max_active_jobs_per_tenant"))
        }
        // A retried request gets its existing job back, over the limit or not.
        #expect(try await create("a", 6) == .existing(try #require(try await store.job(tenant: acme, id: try JobID("a")))))
        // Another tenant has its own limits.
        _ = try await create("c", 10, tenant: other)
        // A finished job does not count.
        try await store.updateJob(tenant: acme, id: try JobID("a"), state: .finished, at: t0)
        _ = try await create("d", 6)
        // Overflowing sums are refused, never a trap.
        let huge = JobLimits(maxActiveJobs: 100, maxPendingItems: Int.max)
        _ = try await store.createJob(
            tenant: acme, id: try JobID("e"), environment: nil, notifications: Self.template(1, payloadBytes: 1), createdAt: t0,
            limits: huge)
    }

    @Test("retention: finished jobs go after the retention, in bounded transactions; unfinished and recent ones stay")
    func retention() async throws {
        let store = try Fixtures.store()
        let clock = ManualPushClock()
        let day: TimeInterval = 86_400
        let start = clock.date
        // (A final state is final: "new-done" runs until it finishes six days later.)
        for (name, state) in [("old-done", JobState.finished), ("old-cancelled", .cancelled), ("old-running", .running), ("new-done", .running)] {
            _ = try await store.createJob(
                tenant: acme, id: try JobID(name), environment: nil, notifications: Self.template(25, payloadBytes: 10),
                createdAt: start)
            try await store.updateJob(tenant: acme, id: try JobID(name), state: state, at: start)
        }
        let maintenance = StoreMaintenance(store: store, retention: .seconds(7 * 86_400), clock: clock)
        clock.advance(by: .seconds(6 * 86_400))
        #expect(try await store.updateJob(tenant: acme, id: try JobID("new-done"), state: .finished, at: clock.date))
        // Before the retention ends, the report of a finished job is still there.
        #expect(await maintenance.runOnce() == RetentionSweep(jobs: 0, items: 0, complete: true))
        #expect(try await store.outcomes(tenant: acme, job: try JobID("old-done")).first?.count == 25)

        clock.advance(by: .seconds(Int64(1.5 * day)))
        let sweep = try await store.deleteExpiredJobs(before: clock.date.addingTimeInterval(-7 * day), itemsPerTransaction: 10, maxItems: 1_000_000)
        #expect(sweep == RetentionSweep(jobs: 2, items: 50, complete: true))
        #expect(try await store.job(tenant: acme, id: try JobID("old-done")) == nil)
        #expect(try await store.job(tenant: acme, id: try JobID("old-cancelled")) == nil)
        #expect(try await store.job(tenant: acme, id: try JobID("old-running")) != nil, "an unfinished job is never deleted")
        #expect(try await store.job(tenant: acme, id: try JobID("new-done")) != nil)
        let left = try await store.pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM job_payload") ?? -1
        }
        #expect(left == 2, "the deleted jobs' payloads went with them")

        // A budget stops a sweep part way; the next goes on.
        clock.advance(by: .seconds(7 * 86_400))
        try await store.updateJob(tenant: acme, id: try JobID("old-running"), state: .finished, at: start)
        // (v10: whole chunks of items, at least one a transaction: here the 25 items of one job.)
        let partial = try await store.deleteExpiredJobs(before: clock.date.addingTimeInterval(-7 * day), itemsPerTransaction: 10, maxItems: 10)
        #expect(partial == RetentionSweep(jobs: 0, items: 25, complete: false))
        #expect(await maintenance.runOnce() == RetentionSweep(jobs: 2, items: 25, complete: true))
        #expect(try await store.jobs(tenant: acme, states: nil, limit: 10).isEmpty)
    }

    @Test("the WAL is limited in size and checkpointed")
    func wal() async throws {
        let store = try Fixtures.store()
        #expect(try await store.journalSizeLimit() == SQLitePushStore.journalSizeLimitBytes)
        _ = try await store.createJob(
            tenant: acme, id: try JobID("w"), environment: nil, notifications: Self.template(500, payloadBytes: 100), createdAt: t0)
        #expect(store.walSize() > 0)
        try await store.checkpoint()
        #expect(store.walSize() == 0)
    }

    @Test("dates no store can keep are an error naming the field, never a trap", arguments: [1e16, -1e16, 1e300, .infinity, .nan])
    func hostileDates(seconds: Double) async throws {
        let store = try Fixtures.store()
        do {
            try await store.registerToken(
                tenant: acme, token: Fixtures.token, topic: nil, registeredAt: Date(timeIntervalSince1970: seconds))
            Issue.record("accepted a date \(seconds) seconds from 1970")
        } catch let error as StoreError {
            #expect(error.isInvalidArgument && error.message.contains("registered_at"))
        }
        // An APNs timestamp out of range is clamped: the outcome is still recorded.
        _ = try await store.createJob(tenant: acme, id: try JobID("d"), environment: nil, notifications: [Fixtures.note()], createdAt: t0)
        let outcome = try await store.recordAndReadBack(
            tenant: acme, job: try JobID("d"), index: 0,
            result: JobItemResult(
                state: .failed, status: 410, reason: "Unregistered", apnsID: nil,
                apnsTimestamp: Date(timeIntervalSince1970: seconds), finishedAt: t0))
        #expect(outcome.item.state == .failed)
    }

    @Test("a second lock on the same store is refused with a clear error; the lock goes with its holder")
    func processLock() throws {
        let path = Fixtures.temporaryDirectory("herald-lock") + "/herald.sqlite"
        var first: StoreLock? = try StoreLock(databasePath: path)
        #expect(first != nil)
        do {
            _ = try StoreLock(databasePath: path)
            Issue.record("a second lock was granted")
        } catch {
            #expect(error.isLocked)
            #expect(error.message.contains("in use by another herald process") && error.message.contains("pid \(getpid())"))
        }
        first = nil
        let again = try StoreLock(databasePath: path)
        #expect(again.path == path + ".lock")
    }

    @Test("a released lock can be taken while its first holder still lives; releasing twice is harmless")
    func releasedLock() throws {
        let path = Fixtures.temporaryDirectory("herald-lock") + "/herald.sqlite"
        let first = try StoreLock(databasePath: path)
        #expect(throws: StoreError.self) { try StoreLock(databasePath: path) }
        first.release()
        first.release()
        let second = try StoreLock(databasePath: path)
        // The first one's end (its deinit) does not touch the second's lock.
        _ = first
        #expect(throws: StoreError.self) { try StoreLock(databasePath: path) }
        second.release()
    }
}
