import Foundation
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

/// The ``PushStore`` and ``JobReports`` contract, run against every backend (``StoreBackend``):
/// the embedded SQLite store and PostgreSQL. Tests of one backend's specifics (SQLite's file,
/// WAL mode, query plans, migrations of old files) stay in their own suites.
@Suite("Store contract")
struct StoreContractTests {
    let acme = Fixtures.tenantID("acme")
    let other = Fixtures.tenantID("other")
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    @Test("invalid tokens: newer timestamps win, re-registration later than APNs' timestamp lifts the refusal", arguments: StoreBackend.allCases)
    func invalidTokens(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkInvalidTokens)
    }

    private func checkInvalidTokens(_ store: any PushStore & JobReports) async throws {
        func record(_ timestamp: Date?, at: Date, reason: APNsReason = .unregistered) -> InvalidTokenRecord {
            InvalidTokenRecord(
                token: Fixtures.token, topic: "com.example.app", environment: .production, reason: reason,
                apnsTimestamp: timestamp, recordedAt: at)
        }
        try await store.recordInvalidToken(
            record(t0.addingTimeInterval(100), at: t0.addingTimeInterval(200)), tenant: acme)
        try await store.recordInvalidToken(
            record(t0.addingTimeInterval(50), at: t0.addingTimeInterval(300)), tenant: acme)
        var stored = try #require(
            try await store.invalidToken(
                tenant: acme, token: Fixtures.token, topic: "com.example.app", environment: .production))
        #expect(stored.apnsTimestamp == t0.addingTimeInterval(100))
        #expect(stored.recordedAt == t0.addingTimeInterval(300))
        #expect(stored.isInvalid)

        // Registered before APNs' timestamp: still invalid.
        #expect(
            try await store.registerToken(
                tenant: acme, token: Fixtures.token, topic: nil, registeredAt: t0.addingTimeInterval(90)) == 1)
        stored = try #require(
            try await store.invalidToken(
                tenant: acme, token: Fixtures.token, topic: "com.example.app", environment: .production))
        #expect(stored.isInvalid)
        // Registered after it: valid again.
        try await store.registerToken(
            tenant: acme, token: Fixtures.token, topic: "com.example.app", registeredAt: t0.addingTimeInterval(101))
        stored = try #require(
            try await store.invalidToken(
                tenant: acme, token: Fixtures.token, topic: "com.example.app", environment: .production))
        #expect(!stored.isInvalid)
        // APNs reports it again, later: invalid again, the registration time kept.
        try await store.recordInvalidToken(
            record(t0.addingTimeInterval(500), at: t0.addingTimeInterval(600)), tenant: acme)
        stored = try #require(
            try await store.invalidToken(
                tenant: acme, token: Fixtures.token, topic: "com.example.app", environment: .production))
        #expect(stored.isInvalid && stored.registeredAt == t0.addingTimeInterval(101))

        #expect(try await store.invalidTokens(tenant: acme, limit: 10).count == 1)
        #expect(try await store.removeInvalidToken(tenant: acme, token: Fixtures.token, topic: nil) == 1)
        #expect(try await store.invalidTokens(tenant: acme, limit: 10).isEmpty)
    }

    @Test(
        "invalid-token lookups read together (one call, and sends' lookups at once) are each answered with their own key's record",
        arguments: StoreBackend.allCases)
    func invalidTokenLookupsReadTogether(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkInvalidTokenLookupsReadTogether)
    }

    private func checkInvalidTokenLookupsReadTogether(_ store: any PushStore & JobReports) async throws {
        struct Asked: Hashable, Sendable {
            var tenant: TenantID
            var lookup: InvalidTokenLookup
        }
        // Each recorded key differs from the others in its tenant, environment, topic or token;
        // each is asked for as recorded (twice) and with one of its fields changed (none recorded).
        var recorded: [Asked: Date] = [:]
        var asked: [Asked] = []
        for index in 0..<24 {
            let token = try DeviceToken(hex: String(repeating: "5e", count: 31) + String(format: "%02x", index))
            let key = Asked(
                tenant: index % 2 == 0 ? acme : other,
                lookup: InvalidTokenLookup(
                    token: token, topic: index % 4 < 2 ? "com.example.app" : "com.example.app.voip",
                    environment: index % 3 == 0 ? .production : .development))
            let timestamp = t0.addingTimeInterval(Double(index))
            try await store.recordInvalidToken(
                InvalidTokenRecord(
                    token: token, topic: key.lookup.topic, environment: key.lookup.environment, reason: .unregistered,
                    apnsTimestamp: timestamp, recordedAt: t0.addingTimeInterval(1_000)),
                tenant: key.tenant)
            recorded[key] = timestamp
            var otherTenant = key
            otherTenant.tenant = key.tenant == acme ? other : acme
            var otherEnvironment = key
            otherEnvironment.lookup.environment = key.lookup.environment == .production ? .development : .production
            var otherTopic = key
            otherTopic.lookup.topic = key.lookup.topic + ".other"
            asked += [key, key, otherTenant, otherEnvironment, otherTopic]
        }
        func expected(_ key: Asked) -> Date? { recorded[key] }

        // One call a tenant: an answer a lookup, in order.
        for tenant in [acme, other] {
            let mine = asked.filter { $0.tenant == tenant }
            let records = try await store.invalidTokens(tenant: tenant, lookups: mine.map(\.lookup))
            #expect(records.count == mine.count)
            for (key, record) in zip(mine, records) {
                #expect(record?.apnsTimestamp == expected(key), "\(key)")
                #expect(record == nil || (record?.token == key.lookup.token && record?.topic == key.lookup.topic))
            }
        }
        #expect(try await store.invalidTokens(tenant: acme, lookups: []).isEmpty)

        // Sends' lookups at once, as the feedback plugin makes them: grouped by tenant.
        let recorders = [acme: TenantInvalidTokens(tenant: acme, store: store), other: TenantInvalidTokens(tenant: other, store: store)]
        let answers = try await withThrowingTaskGroup(of: (Int, Date?, Bool).self) { group in
            for (offset, key) in asked.enumerated() {
                let recorder = try #require(recorders[key.tenant])
                group.addTask {
                    let record = try await recorder.invalidToken(key.lookup.token, topic: key.lookup.topic, environment: key.lookup.environment)
                    return (offset, record?.apnsTimestamp, record != nil)
                }
            }
            var answers: [Int: (Date?, Bool)] = [:]
            for try await (offset, timestamp, found) in group { answers[offset] = (timestamp, found) }
            return answers
        }
        #expect(answers.count == asked.count)
        for (offset, key) in asked.enumerated() {
            #expect(answers[offset]?.1 == (recorded[key] != nil), "\(key)")
            #expect(answers[offset]?.0 == expected(key), "\(key)")
        }
    }

    @Test("every query is scoped by tenant", arguments: StoreBackend.allCases)
    func scoping(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkScoping)
    }

    private func checkScoping(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("shared-id")
        try await store.recordInvalidToken(
            InvalidTokenRecord(
                token: Fixtures.token, topic: "com.example.app", environment: .production, reason: .unregistered,
                apnsTimestamp: t0, recordedAt: t0),
            tenant: acme)
        _ = try await store.createJob(
            tenant: acme, id: id, environment: nil, notifications: [Fixtures.note()], createdAt: t0)

        #expect(
            try await store.invalidToken(
                tenant: other, token: Fixtures.token, topic: "com.example.app", environment: .production) == nil)
        #expect(try await store.invalidTokens(tenant: other, limit: 10).isEmpty)
        #expect(
            try await store.registerToken(
                tenant: other, token: Fixtures.token, topic: nil, registeredAt: t0.addingTimeInterval(10)) == 0)
        #expect(try await store.removeInvalidToken(tenant: other, token: Fixtures.token, topic: nil) == 0)
        #expect(try await store.job(tenant: other, id: id) == nil)
        #expect(try await store.jobs(tenant: other, states: nil, limit: 10).isEmpty)
        #expect(try await store.progress(tenant: other, job: id) == nil)
        #expect(
            try await store.claimPendingItems(
                tenant: other, job: id, limit: 10, claimant: "x", now: t0, leaseUntil: t0.addingTimeInterval(60)
            ).isEmpty)
        #expect(try await store.updateJob(tenant: other, id: id, state: .cancelled, at: t0) == false)
        await #expect(throws: StoreError.self) {
            _ = try await store.recordAndReadBack(
                tenant: other, job: id, index: 0,
                result: JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0))
        }
        // The same job id is free for another tenant, and stays separate.
        let theirs = try await store.createJob(
            tenant: other, id: id, environment: nil,
            notifications: [Fixtures.note(), Fixtures.note(), Fixtures.note()], createdAt: t0)
        guard case .created(let job) = theirs else { Issue.record("expected a new job"); return }
        #expect(job.itemCount == 3)
        #expect(try await store.job(tenant: acme, id: id)?.itemCount == 1)
    }

    @Test("jobs: creation, claims and results are idempotent", arguments: StoreBackend.allCases)
    func jobs(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkJobs)
    }

    private func checkJobs(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("batch-7")
        var withID = Fixtures.note()
        let fixedID = Fixtures.apnsID()
        withID.id = fixedID
        let notes = [
            withID, Fixtures.note(topic: "com.example.app.voip", pushType: .voip), Fixtures.note(), Fixtures.note(),
        ]
        let created = try await store.createJob(
            tenant: acme, id: id, environment: .development, notifications: notes, createdAt: t0)
        guard case .created = created else { Issue.record("expected a new job"); return }
        let again = try await store.createJob(
            tenant: acme, id: id, environment: .development, notifications: [Fixtures.note()],
            createdAt: t0.addingTimeInterval(5))
        #expect(again == .existing(created.job))

        let items = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: 10)
        #expect(items.count == 4)
        #expect(items[0].notification.id == fixedID)
        #expect(items.allSatisfy { $0.notification.id != nil && $0.state == .pending })
        #expect(items[1].notification.pushType == .voip && items[1].notification.topic == "com.example.app.voip")
        #expect(items[1].notification.payload == notes[1].payload)

        // Claims: the same claimant gets the same items back; another gets the rest.
        let lease = t0.addingTimeInterval(60)
        let first = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 2, claimant: "runner-a", now: t0, leaseUntil: lease)
        #expect(first.map(\.index) == [0, 1])
        let repeated = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 2, claimant: "runner-a", now: t0, leaseUntil: lease)
        #expect(repeated.map(\.index) == [0, 1])
        let second = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "runner-b", now: t0, leaseUntil: lease)
        #expect(second.map(\.index) == [2, 3])
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 10, claimant: "runner-c", now: t0, leaseUntil: lease
            ).isEmpty)
        // An expired lease can be taken over.
        let takeover = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 1, claimant: "runner-c", now: lease.addingTimeInterval(1),
            leaseUntil: lease.addingTimeInterval(60))
        #expect(takeover.map(\.index) == [0])

        // Results: the first one recorded wins.
        let sent = JobItemResult(
            state: .sent, status: 200, reason: nil, apnsID: fixedID, finishedAt: t0.addingTimeInterval(2))
        let outcome = try await store.recordAndReadBack(tenant: acme, job: id, index: 0, result: sent)
        guard case .recorded(let item) = outcome else { Issue.record("expected recorded"); return }
        #expect(item.state == .sent && item.result == sent && item.claimant == nil)
        let late = JobItemResult(
            state: .failed, status: 410, reason: "Unregistered", apnsID: fixedID, apnsTimestamp: t0,
            finishedAt: t0.addingTimeInterval(3))
        #expect(try await store.recordAndReadBack(tenant: acme, job: id, index: 0, result: late) == .alreadyRecorded(item))
        let failed = try await store.recordAndReadBack(tenant: acme, job: id, index: 1, result: late)
        #expect(failed.item.result?.reason == "Unregistered" && failed.item.result?.apnsTimestamp == t0)
        #expect(try await store.progress(tenant: acme, job: id) == JobProgress(pending: 2, sent: 1, failed: 1))
        // Finished items are never claimed again.
        let rest = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "runner-d", now: lease.addingTimeInterval(120),
            leaseUntil: lease.addingTimeInterval(180))
        #expect(rest.map(\.index) == [2, 3])

        // APNs' apns-unique-id (the development environment's) is kept with a failed outcome and
        // read back with the item and the failed items; a plain success keeps none.
        let uniqueIDs = try ["6a1c2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "0f1e2d3c-4b5a-4697-8877-665544332211"].map {
            try #require(APNsUniqueID($0))
        }
        let withUniqueID = [
            JobItemResult(
                state: .sent, status: 200, reason: nil, apnsID: items[2].notification.id, finishedAt: t0.addingTimeInterval(4),
                attempts: 1, uniqueID: uniqueIDs[0]),
            JobItemResult(
                state: .failed, status: 400, reason: "BadDeviceToken", apnsID: items[3].notification.id,
                finishedAt: t0.addingTimeInterval(4), attempts: 1, uniqueID: uniqueIDs[1]),
        ]
        _ = try await store.recordChanges(
            tenant: acme, job: id,
            [JobItemChange(index: 2, change: .outcome(withUniqueID[0])), JobItemChange(index: 3, change: .outcome(withUniqueID[1]))])
        let kept = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: 10)
        #expect(kept.map { $0.result?.uniqueID } == [nil, nil, nil, uniqueIDs[1]])
        var plain = withUniqueID[0]
        plain.uniqueID = nil
        #expect(kept[2].result == plain && kept[3].result == withUniqueID[1])
        let failedKept = try await store.failedItems(tenant: acme, job: id, afterIndex: -1, limit: 10)
        #expect(failedKept.map(\.index) == [1, 3] && failedKept.last?.result?.uniqueID == uniqueIDs[1])

        #expect(try await store.updateJob(tenant: acme, id: id, state: .running, at: t0.addingTimeInterval(1)))
        #expect(try await store.jobs(tenant: acme, states: [.running], limit: 10).map(\.id) == [id])
        #expect(try await store.jobs(tenant: acme, states: [.finished], limit: 10).isEmpty)
    }

    @Test("a tenant's jobs are listed newest first, by id within a millisecond, and paged from a position", arguments: StoreBackend.allCases)
    func jobListing(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkJobListing)
    }

    private func checkJobListing(_ store: any PushStore & JobReports) async throws {
        // Five jobs: three created in the same millisecond (listed by id), one older, one newer;
        // another tenant's job in between, never listed.
        let created: [(String, TimeInterval)] = [("m-b", 10), ("m-a", 10), ("m-c", 10), ("old", 5), ("new", 20)]
        for (name, offset) in created {
            _ = try await store.createJob(
                tenant: acme, id: try JobID(name), environment: nil, notifications: [Fixtures.note()],
                createdAt: t0.addingTimeInterval(offset))
        }
        _ = try await store.createJob(
            tenant: other, id: try JobID("theirs"), environment: nil, notifications: [Fixtures.note()],
            createdAt: t0.addingTimeInterval(10))
        #expect(try await store.updateJob(tenant: acme, id: try JobID("m-a"), state: .running, at: t0.addingTimeInterval(30)))
        let order = ["new", "m-a", "m-b", "m-c", "old"]
        #expect(try await store.jobs(tenant: acme, states: nil, limit: 10).map(\.id.rawValue) == order)

        // Paged two at a time, from the last job of each page: every job once, in order.
        var listed: [String] = []
        var after: JobListPosition? = nil
        for _ in 0..<5 {
            let page = try await store.jobs(tenant: acme, states: nil, limit: 2, after: after)
            listed += page.map(\.id.rawValue)
            guard let last = page.last else { break }
            after = JobListPosition(after: last)
        }
        #expect(listed == order)
        // A page from a position within the millisecond, with a state filter.
        let fromA = JobListPosition(createdAtMillis: Int64(t0.timeIntervalSince1970 * 1000) + 10_000, id: try JobID("m-a"))
        #expect(try await store.jobs(tenant: acme, states: nil, limit: 10, after: fromA).map(\.id.rawValue) == ["m-b", "m-c", "old"])
        #expect(try await store.jobs(tenant: acme, states: [.accepted], limit: 10, after: fromA).map(\.id.rawValue) == ["m-b", "m-c", "old"])
        #expect(try await store.jobs(tenant: acme, states: [.running], limit: 10, after: fromA).isEmpty)
        #expect(try await store.jobs(tenant: acme, states: [.running], limit: 10).map(\.id.rawValue) == ["m-a"])
        #expect(try await store.jobs(tenant: acme, states: [], limit: 10).isEmpty)
        // A position that names no job (deleted since) still places the page.
        let gone = JobListPosition(createdAtMillis: Int64(t0.timeIntervalSince1970 * 1000) + 15_000, id: try JobID("zzz"))
        #expect(try await store.jobs(tenant: acme, states: nil, limit: 10, after: gone).map(\.id.rawValue) == ["m-a", "m-b", "m-c", "old"])
    }

    @Test(
        "the unfinished jobs of every tenant in one listing: oldest first, at most so many of each, finished and cancelled ones left out",
        arguments: StoreBackend.allCases)
    func unfinishedJobs(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkUnfinishedJobs)
    }

    private func checkUnfinishedJobs(_ store: any PushStore & JobReports) async throws {
        #expect(try await store.unfinishedJobs(perTenant: 10).isEmpty)
        // acme: four jobs (two in the same millisecond, ordered by id), one finished and one
        // cancelled; other: two, one running.
        let created: [(TenantID, String, TimeInterval)] = [
            (acme, "a-3", 30), (acme, "a-1", 10), (other, "o-2", 20), (acme, "a-2b", 20), (acme, "a-2a", 20),
            (other, "o-1", 5), (acme, "a-done", 1), (acme, "a-cancelled", 2),
        ]
        for (tenant, name, offset) in created {
            _ = try await store.createJob(
                tenant: tenant, id: try JobID(name), environment: nil, notifications: [Fixtures.note()],
                createdAt: t0.addingTimeInterval(offset))
        }
        #expect(try await store.updateJob(tenant: acme, id: try JobID("a-done"), state: .finished, at: t0.addingTimeInterval(40)))
        #expect(try await store.updateJob(tenant: acme, id: try JobID("a-cancelled"), state: .cancelled, at: t0.addingTimeInterval(40)))
        #expect(try await store.updateJob(tenant: other, id: try JobID("o-1"), state: .running, at: t0.addingTimeInterval(40)))

        func listed(_ perTenant: Int) async throws -> [String] {
            try await store.unfinishedJobs(perTenant: perTenant).map { "\($0.tenant)/\($0.id)" }
        }
        #expect(try await listed(10) == ["other/o-1", "acme/a-1", "acme/a-2a", "acme/a-2b", "other/o-2", "acme/a-3"])
        // Each tenant's oldest: two of acme's four, both of other's.
        #expect(try await listed(2) == ["other/o-1", "acme/a-1", "acme/a-2a", "other/o-2"])
        #expect(try await listed(1) == ["other/o-1", "acme/a-1"])
        #expect(try await listed(0).isEmpty)
        let running = try #require(try await store.unfinishedJobs(perTenant: 1).first)
        #expect(running.state == .running && running.itemCount == 1 && running.createdAt == t0.addingTimeInterval(5))
    }

    @Test(
        "a cancelled job keeps its state, none of its items is claimed, and those claimed before are no longer leased",
        arguments: StoreBackend.allCases)
    func cancelledJob(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkCancelledJob)
    }

    private func checkCancelledJob(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("to-cancel")
        let notes = (0..<6).map { index -> HeraldCore.Notification in
            var note = Fixtures.note()
            note.destination = .device(DeviceToken(bytes: [0xca, UInt8(index)] + [UInt8](repeating: 2, count: 30)))
            return note
        }
        _ = try await store.createJob(tenant: acme, id: id, environment: .development, notifications: notes, createdAt: t0)
        #expect(try await store.updateJob(tenant: acme, id: id, state: .running, at: t0))
        let lease = t0.addingTimeInterval(60)
        let claimed = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 2, claimant: "runner-a", now: t0, leaseUntil: lease)
        #expect(claimed.map(\.index) == [0, 1])
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [0, 1], claimant: "runner-a") == [0, 1])

        // Another tenant cannot cancel it; its tenant can, once.
        #expect(try await store.updateJob(tenant: other, id: id, state: .cancelled, at: t0) == false)
        #expect(try await store.updateJob(tenant: acme, id: id, state: .cancelled, at: t0.addingTimeInterval(1)))
        #expect(try await store.updateJob(tenant: acme, id: id, state: .cancelled, at: t0.addingTimeInterval(2)) == false)
        // The runner's finish (or start) after the cancel does not move it.
        #expect(try await store.updateJob(tenant: acme, id: id, state: .finished, at: t0.addingTimeInterval(3)) == false)
        #expect(try await store.updateJob(tenant: acme, id: id, state: .running, at: t0.addingTimeInterval(3)) == false)
        let job = try #require(try await store.job(tenant: acme, id: id))
        #expect(job.state == .cancelled && job.updatedAt == t0.addingTimeInterval(1))

        // Nothing more is claimed, by this claimant or another, now or after the leases end.
        #expect(try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "runner-a", now: t0, leaseUntil: lease).isEmpty)
        #expect(try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "runner-b", now: lease.addingTimeInterval(1),
            leaseUntil: lease.addingTimeInterval(60)).isEmpty)
        // The two claimed before the cancel are not leased at the check before their send.
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [0, 1], claimant: "runner-a").isEmpty)
        #expect(try await store.markOnWire(tenant: acme, job: id, indexes: [0, 1], claimant: "runner-a", at: t0).isEmpty)
        // An outcome of a send already on the wire is still recorded; the rest have none.
        let sent = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0.addingTimeInterval(4), attempts: 1)
        _ = try await store.recordChanges(tenant: acme, job: id, [JobItemChange(index: 0, change: .outcome(sent))])
        #expect(try await store.progress(tenant: acme, job: id) == JobProgress(pending: 5, sent: 1, failed: 0))
        #expect(try await store.job(tenant: acme, id: id)?.state == .cancelled)

        // A finished job cannot be cancelled.
        let done = try JobID("done")
        _ = try await store.createJob(tenant: acme, id: done, environment: .development, notifications: [Fixtures.note()], createdAt: t0)
        #expect(try await store.updateJob(tenant: acme, id: done, state: .finished, at: t0))
        #expect(try await store.updateJob(tenant: acme, id: done, state: .cancelled, at: t0) == false)
        #expect(try await store.job(tenant: acme, id: done)?.state == .finished)
    }

    @Test(
        "a template batch stores its payload once (v8 on PostgreSQL); runs of equal payloads in a list share one",
        arguments: StoreBackend.allCases)
    func payloadOnce(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkPayloadOnce)
    }

    private func checkPayloadOnce(_ store: any PushStore & JobReports) async throws {
        let template = try JobID("template")
        let payload = Array(#"{"aps":{"alert":"\#(String(repeating: "x", count: 2_000))"}}"#.utf8)
        // More items than one insert statement holds on either backend (PostgreSQL: 10,000).
        let notes = (0..<10_050).map { index -> HeraldCore.Notification in
            var note = Fixtures.note()
            note.destination = .device(DeviceToken(bytes: [0xab, UInt8(truncatingIfNeeded: index >> 8), UInt8(truncatingIfNeeded: index)] + [UInt8](repeating: 1, count: 29)))
            note.payload = payload
            return note
        }
        _ = try await store.createJob(tenant: acme, id: template, environment: nil, notifications: notes, createdAt: t0)
        let stored = try await storedPayloads(store, tenant: acme, job: template)
        #expect(stored.rows == 1, "one payload row for the template batch")
        #expect(stored.itemBytes == 0, "items keep no payload copy of their own")
        let tail = try await store.items(tenant: acme, job: template, fromIndex: 9_995, limit: 100)
        #expect(tail.count == 55 && tail.allSatisfy { $0.notification.payload == payload })
        let claimed = try await store.claimPendingItems(
            tenant: acme, job: template, limit: 3, claimant: "r/1", now: t0, leaseUntil: t0.addingTimeInterval(60))
        #expect(claimed.map(\.notification.payload) == Array(repeating: payload, count: 3))
        let result = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)
        #expect(try await store.recordAndReadBack(tenant: acme, job: template, index: 1, result: result).item.notification.payload == payload)

        // A list batch: runs of equal payloads share a row, a different one has its own.
        let list = try JobID("list")
        var listNotes = Array(notes.prefix(5))
        listNotes[2].payload = Array(#"{"aps":{"alert":"other"}}"#.utf8)
        _ = try await store.createJob(tenant: acme, id: list, environment: nil, notifications: listNotes, createdAt: t0)
        #expect(try await storedPayloads(store, tenant: acme, job: list).rows == 3)
        let read = try await store.items(tenant: acme, job: list, fromIndex: 0, limit: 10)
        #expect(read.map(\.notification.payload) == listNotes.map(\.payload))
    }

    @Test("a claim from an index skips pending items below it, never a due retry", arguments: StoreBackend.allCases)
    func claimFromIndex(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkClaimFromIndex)
    }

    /// Stores a job of `count` items and claims its first three as `r/1` (leased for 60 s from t0).
    private func jobWithFirstClaim(_ store: any PushStore, _ name: String, count: Int) async throws -> (JobID, lease: Date) {
        let job = try JobID(name)
        _ = try await store.createJob(
            tenant: acme, id: job, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() }, createdAt: t0)
        let lease = t0.addingTimeInterval(60)
        let first = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 3, claimant: "r/1", now: t0, leaseUntil: lease, fromIndex: 0)
        #expect(first.map(\.index) == [0, 1, 2])
        return (job, lease)
    }

    private func checkClaimFromIndex(_ store: any PushStore & JobReports) async throws {
        let (job, lease) = try await jobWithFirstClaim(store, "cursor", count: 10)
        // Item 1 waits for a retry, due now; items 0 and 2 are done.
        #expect(
            try await store.deferItem(
                tenant: acme, job: job, index: 1,
                retry: JobItemRetry(attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0, lastError: "InternalServerError")))
        for index in [0, 2] {
            #expect(
                try await store.recordOutcome(
                    tenant: acme, job: job, index: index,
                    result: JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)))
        }
        #expect(
            !(try await store.recordOutcome(
                tenant: acme, job: job, index: 0,
                result: JobItemResult(state: .failed, status: 400, reason: "BadDeviceToken", apnsID: nil, finishedAt: t0))),
            "an outcome is recorded once")
        let next = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 3, claimant: "r/1", now: t0, leaseUntil: lease, fromIndex: 6)
        #expect(next.map(\.index) == [1, 6, 7], "the due retry first, then pending items from index 6")
        let rest = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 10, claimant: "r/2", now: t0, leaseUntil: lease, fromIndex: 0)
        #expect(rest.map(\.index) == [3, 4, 5, 8, 9], "without the hint, every unleased pending item")
    }

    @Test(
        "a claim from an index never returns the claimant's own pending items below it (they may be on the wire)",
        arguments: StoreBackend.allCases)
    func claimFromIndexSkipsOwnItems(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkClaimFromIndexSkipsOwnItems)
    }

    private func checkClaimFromIndexSkipsOwnItems(_ store: any PushStore & JobReports) async throws {
        #expect(store.claimsFromIndexStrictly, "the job runner claims ahead on this store")
        let (job, lease) = try await jobWithFirstClaim(store, "ahead", count: 8)
        // 0..2 are still pending and leased to r/1 (on the wire): the next claim from 3 skips them.
        let next = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 10, claimant: "r/1", now: t0, leaseUntil: lease, fromIndex: 3)
        #expect(next.map(\.index) == [3, 4, 5, 6, 7])
        // The outcome of an item claimed by the first claim is still recorded under the lease.
        #expect(
            try await store.recordOutcome(
                tenant: acme, job: job, index: 1,
                result: JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)))
        let none = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 10, claimant: "r/1", now: t0, leaseUntil: lease, fromIndex: 8)
        #expect(none.isEmpty)
        // Without the hint, the claimant's own unsettled items come back (a run resuming its job).
        let again = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 10, claimant: "r/1", now: t0, leaseUntil: lease, fromIndex: 0)
        #expect(again.map(\.index) == [0, 2, 3, 4, 5, 6, 7])
    }

    @Test(
        "outcomes recorded at once, twice for some items: each is recorded once, the first wins and is kept",
        arguments: StoreBackend.allCases)
    func concurrentResults(_ backend: StoreBackend) async throws {
        try await backend.withStore(poolSize: 4, checkConcurrentResults)
    }

    private func checkConcurrentResults(_ store: any PushStore & JobReports) async throws {
        let jobs = [try JobID("one"), try JobID("two")]
        let count = 300
        for job in jobs {
            _ = try await store.createJob(
                tenant: acme, id: job, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() }, createdAt: t0)
        }
        // Every item of both jobs once, and the first 40 of job one a second time (a failure).
        var writes: [(JobID, Int, JobItemResult)] = []
        for job in jobs {
            for index in 0..<count {
                writes.append((job, index, JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)))
            }
        }
        for index in 0..<40 {
            writes.append(
                (jobs[0], index, JobItemResult(state: .failed, status: 400, reason: "BadDeviceToken", apnsID: nil, finishedAt: t0)))
        }
        let outcomes = try await withThrowingTaskGroup(of: (JobID, Int, JobItemResult, Bool).self) { group in
            for (job, index, result) in writes.shuffled() {
                group.addTask {
                    (job, index, result, try await store.recordOutcome(tenant: self.acme, job: job, index: index, result: result))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        var recorded: [String: Int] = [:]
        for (job, index, _, wasRecorded) in outcomes where wasRecorded { recorded["\(job)/\(index)", default: 0] += 1 }
        #expect(recorded.count == 2 * count && recorded.values.allSatisfy { $0 == 1 }, "each item recorded exactly once")
        let first = try #require(try await store.progress(tenant: acme, job: jobs[0]))
        #expect(first.pending == 0 && first.sent + first.failed == count && first.failed <= 40)
        #expect(try await store.progress(tenant: acme, job: jobs[1]) == JobProgress(pending: 0, sent: count, failed: 0))
        // Each item holds the outcome of the one call that was told it recorded it.
        let stored = try await store.items(tenant: acme, job: jobs[0], fromIndex: 0, limit: 40)
        for (job, index, result, wasRecorded) in outcomes where job == jobs[0] && index < 40 && wasRecorded {
            #expect(stored[index].state == result.state && stored[index].result?.status == result.status, "item \(index)")
        }
    }

    @Test("outcome counts and paged failed items agree with a scan, scoped by tenant", arguments: StoreBackend.allCases)
    func reports(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkReports)
    }

    private func checkReports(_ store: any PushStore & JobReports) async throws {
        let job = try JobID("report-1")
        _ = try await store.createJob(
            tenant: acme, id: job, environment: .production,
            notifications: (0..<12).map { _ in Fixtures.note() }, createdAt: t0)
        // The same job id for another tenant, all failed: never counted for acme.
        _ = try await store.createJob(
            tenant: other, id: job, environment: .production, notifications: [Fixtures.note()], createdAt: t0)
        _ = try await store.recordAndReadBack(
            tenant: other, job: job, index: 0,
            result: JobItemResult(state: .failed, status: 400, reason: "BadTopic", apnsID: nil, finishedAt: t0))

        for index in 0..<12 {
            let result: JobItemResult
            switch index % 4 {
            case 0: result = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)
            case 1:
                result = JobItemResult(
                    state: .failed, status: 410, reason: "Unregistered", apnsID: nil, apnsTimestamp: t0, finishedAt: t0)
            case 2:
                result = JobItemResult(
                    state: .failed, status: 400, reason: "BadDeviceToken", apnsID: nil, finishedAt: t0)
            default: continue  // stays pending
            }
            _ = try await store.recordAndReadBack(tenant: acme, job: job, index: index, result: result)
        }

        let outcomes = try await store.outcomes(tenant: acme, job: job)
        let scanned = try await ScanningJobReports(store: store).outcomes(tenant: acme, job: job)
        #expect(Set(outcomes) == Set(scanned))
        #expect(
            Set(outcomes) == [
                JobOutcomeCount(state: .pending, status: nil, reason: nil, count: 3),
                JobOutcomeCount(state: .sent, status: 200, reason: nil, count: 3),
                JobOutcomeCount(state: .failed, status: 410, reason: "Unregistered", count: 3),
                JobOutcomeCount(state: .failed, status: 400, reason: "BadDeviceToken", count: 3),
            ])
        // The progress adds up every kind of outcome of a state (two kinds of failure here).
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 3, sent: 3, failed: 6))

        // Failed items, two at a time, in index order; the payload is not read.
        var pages: [[Int]] = []
        var after = -1
        while true {
            let page = try await store.failedItems(tenant: acme, job: job, afterIndex: after, limit: 2)
            guard let last = page.last else { break }
            #expect(
                page.allSatisfy {
                    $0.state == .failed && $0.result?.state == .failed && $0.notification.payload.isEmpty
                })
            pages.append(page.map(\.index))
            after = last.index
        }
        #expect(pages == [[1, 2], [5, 6], [9, 10]])
        let first = try #require(try await store.failedItems(tenant: acme, job: job, afterIndex: -1, limit: 1).first)
        #expect(first.result?.reason == "Unregistered" && first.result?.apnsTimestamp == t0)
        let scannedFailed = try await ScanningJobReports(store: store).failedItems(
            tenant: acme, job: job, afterIndex: -1, limit: 100)
        #expect(scannedFailed.map(\.index) == [1, 2, 5, 6, 9, 10])

        // Another tenant's job of the same id, and a missing job, report nothing of acme's.
        #expect(
            try await store.outcomes(tenant: other, job: job) == [
                JobOutcomeCount(state: .failed, status: 400, reason: "BadTopic", count: 1)
            ])
        #expect(try await store.outcomes(tenant: acme, job: try JobID("absent")).isEmpty)
        #expect(try await store.failedItems(tenant: acme, job: try JobID("absent"), afterIndex: -1, limit: 10).isEmpty)

    }

    @Test("claimants claiming one job at once never lease the same item", arguments: StoreBackend.allCases)
    func concurrentClaims(_ backend: StoreBackend) async throws {
        try await backend.withStore(poolSize: 4, checkConcurrentClaims)
    }

    private func checkConcurrentClaims(_ store: any PushStore & JobReports) async throws {
        let job = try JobID("claims-at-once")
        let count = 400
        _ = try await store.createJob(
            tenant: acme, id: job, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() },
            createdAt: t0)
        let lease = t0.addingTimeInterval(600)
        // Four claimants take 7 items at a time, recording each (as the job runner does), until nothing
        // is left to claim.
        let claimed = try await withThrowingTaskGroup(of: [Int].self) { group in
            for runner in 0..<4 {
                group.addTask {
                    var mine: [Int] = []
                    while true {
                        let items = try await store.claimPendingItems(
                            tenant: acme, job: job, limit: 7, claimant: "runner-\(runner)", now: t0, leaseUntil: lease)
                        guard !items.isEmpty else { return mine }
                        for item in items {
                            #expect(item.claimant == "runner-\(runner)" && item.leaseUntil == lease)
                            mine.append(item.index)
                            let recorded = try await store.recordOutcome(
                                tenant: acme, job: job, index: item.index,
                                result: JobItemResult(
                                    state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0))
                            #expect(recorded, "item \(item.index) had an outcome before its only claim")
                        }
                    }
                }
            }
            var all: [[Int]] = []
            for try await indexes in group { all.append(indexes) }
            return all
        }
        let flat = claimed.flatMap { $0 }
        #expect(flat.count == count, "every item claimed exactly once")
        #expect(Set(flat) == Set(0..<count))
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 0, sent: count, failed: 0))
    }

    @Test(
        "a large job is stored whole: every field, apns-id and payload byte comes back in index order",
        arguments: StoreBackend.allCases)
    func largeJob(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkLargeJob)
    }

    private func checkLargeJob(_ store: any PushStore & JobReports) async throws {
        let job = try JobID("large")
        let count = 4_501
        let notes = (0..<count).map { index -> HeraldCore.Notification in
            var note = Fixtures.note(topic: index % 3 == 0 ? nil : "com.example.app")
            note.priority = index % 2 == 0 ? .immediate : nil
            note.expiration = index % 5 == 0 ? .immediately : (index % 5 == 1 ? .at(UInt32(1_800_000_000 + index)) : nil)
            note.collapseID = index % 7 == 0 ? "c\(index)" : nil
            note.payload = Array(#"{"aps":{"alert":"\#(index)"},"b":"\#u{00e9}\#u{0000}"}"#.utf8) + [0xff, 0x00]
            return note
        }
        let created = try await store.createJob(
            tenant: acme, id: job, environment: .production, notifications: notes, createdAt: t0)
        #expect(created.job.itemCount == count)
        var read: [JobItem] = []
        while true {
            let page = try await store.items(tenant: acme, job: job, fromIndex: read.count, limit: 1_000)
            guard !page.isEmpty else { break }
            read += page
        }
        #expect(read.map(\.index) == Array(0..<count))
        #expect(Set(read.compactMap(\.notification.id)).count == count, "a distinct apns-id for every item")
        expectStored(read, as: notes)
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: count, sent: 0, failed: 0))
    }

    /// Each item's notification is the one posted at its index, with the apns-id the store gave it.
    private func expectStored(_ items: [JobItem], as posted: [HeraldCore.Notification]) {
        for item in items {
            guard posted.indices.contains(item.index) else {
                Issue.record("item \(item.index) was not posted")
                return
            }
            var expected = posted[item.index]
            expected.id = item.notification.id
            #expect(item.notification == expected, "item \(item.index)")
            if item.notification != expected { return }
        }
    }

    @Test(
        "claims hand out each item's own notification and payload: shared payloads in recurring runs, across chunks, a due retry first",
        arguments: StoreBackend.allCases)
    func claimsCarryTheirPayloads(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkClaimsCarryTheirPayloads)
    }

    private func checkClaimsCarryTheirPayloads(_ store: any PushStore & JobReports) async throws {
        let job = try JobID("shared-payloads")
        let count = 1_300
        // Three payloads in runs of uneven length, each recurring after the others.
        let payloads = ["a", "bb", "ccc"].map { Array(#"{"aps":{"alert":"\#($0)"}}"#.utf8) }
        let notes = (0..<count).map { index -> HeraldCore.Notification in
            var note = Fixtures.note(topic: index % 4 == 0 ? nil : "com.example.app")
            note.payload = payloads[(index / 7 + index / 50) % 3]
            note.collapseID = index % 11 == 0 ? "c\(index)" : nil
            return note
        }
        _ = try await store.createJob(tenant: acme, id: job, environment: .production, notifications: notes, createdAt: t0)
        let lease = t0.addingTimeInterval(600)
        // Claims of a size that does not divide a chunk, from the start to the end.
        var claimed: [JobItem] = []
        while true {
            let claim = try await store.claimPendingItems(
                tenant: acme, job: job, limit: 333, claimant: "runner-a", now: t0, leaseUntil: lease,
                fromIndex: claimed.last.map { $0.index + 1 } ?? 0)
            guard !claim.isEmpty else { break }
            expectStored(claim, as: notes)
            claimed += claim
        }
        #expect(claimed.map(\.index) == Array(0..<count))
        // An item of a late chunk deferred and due: the next claim hands it out first, with its
        // own payload, before the pending items it takes from its hint.
        let retry = JobItemRetry(
            attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0.addingTimeInterval(5), lastError: "TransportFailed")
        #expect(try await store.deferItem(tenant: acme, job: job, index: 1_257, retry: retry))
        let again = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 20, claimant: "runner-a", now: t0.addingTimeInterval(10), leaseUntil: lease,
            fromIndex: 0)
        #expect(again.first?.index == 1_257)
        expectStored(again, as: notes)
        // Read back as a page, every payload is its own.
        let page = try await store.items(tenant: acme, job: job, fromIndex: 240, limit: 40)
        #expect(page.map(\.index) == Array(240..<280))
        expectStored(page, as: notes)
    }

    @Test(
        "job limits count the tenant's unfinished jobs and items; leases of a runner's earlier instances are released",
        arguments: StoreBackend.allCases)
    func limitsAndReleasedLeases(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkLimitsAndReleasedLeases)
    }

    private func checkLimitsAndReleasedLeases(_ store: any PushStore & JobReports) async throws {
        let limits = JobLimits(maxActiveJobs: 2, maxPendingItems: 5)
        let first = try JobID("limit-1")
        _ = try await store.createJob(
            tenant: acme, id: first, environment: nil, notifications: (0..<3).map { _ in Fixtures.note() },
            createdAt: t0, limits: limits)
        // 3 + 3 items would pass 5.
        await #expect(throws: StoreError.self) {
            _ = try await store.createJob(
                tenant: acme, id: try JobID("limit-2"), environment: nil,
                notifications: (0..<3).map { _ in Fixtures.note() }, createdAt: t0, limits: limits)
        }
        _ = try await store.createJob(
            tenant: acme, id: try JobID("limit-3"), environment: nil, notifications: [Fixtures.note()], createdAt: t0,
            limits: limits)
        // Two unfinished jobs: a third is refused, for this tenant only; a retried create gets its job back.
        do {
            _ = try await store.createJob(
                tenant: acme, id: try JobID("limit-4"), environment: nil, notifications: [Fixtures.note()],
                createdAt: t0, limits: limits)
            Issue.record("a third unfinished job was accepted")
        } catch let error as StoreError {
            #expect(error.isQuotaExceeded && error.message.contains("jobs.max_active_jobs_per_tenant"))
        }
        #expect(
            try await store.createJob(
                tenant: acme, id: first, environment: nil, notifications: [], createdAt: t0, limits: limits
            ).job.itemCount == 3)
        _ = try await store.createJob(
            tenant: other, id: first, environment: nil, notifications: [Fixtures.note()], createdAt: t0, limits: limits)
        // A finished job does not count.
        try await store.updateJob(tenant: acme, id: first, state: .finished, at: t0)
        _ = try await store.createJob(
            tenant: acme, id: try JobID("limit-5"), environment: nil, notifications: [Fixtures.note()], createdAt: t0,
            limits: limits)

        // Leases: an earlier instance of runner "herald" and another runner hold items.
        let job = try JobID("limit-3")
        let lease = t0.addingTimeInterval(600)
        _ = try await store.createJob(
            tenant: other, id: job, environment: nil, notifications: [Fixtures.note(), Fixtures.note()], createdAt: t0)
        #expect(
            try await store.claimPendingItems(
                tenant: other, job: job, limit: 1, claimant: "herald/old", now: t0, leaseUntil: lease
            ).map(\.index) == [0])
        #expect(
            try await store.claimPendingItems(
                tenant: other, job: job, limit: 1, claimant: "heraldx/1", now: t0, leaseUntil: lease
            ).map(\.index) == [1])
        #expect(try await store.releaseLeases(tenant: other, job: job, claimantBase: "herald", keeping: "herald/new") == 1)
        #expect(
            try await store.claimPendingItems(
                tenant: other, job: job, limit: 5, claimant: "herald/new", now: t0, leaseUntil: lease
            ).map(\.index) == [0])
    }

    @Test(
        "deferred items wait for their next attempt, are claimed first when due, and keep their attempts",
        arguments: StoreBackend.allCases)
    func retries(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkRetries)
    }

    private func checkRetries(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("retry-1")
        _ = try await store.createJob(
            tenant: acme, id: id, environment: nil, notifications: (0..<4).map { _ in Fixtures.note() }, createdAt: t0)
        let lease = t0.addingTimeInterval(60)
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 4, claimant: "runner-a", now: t0, leaseUntil: lease
            ).map(\.index) == [0, 1, 2, 3])
        #expect(try await store.nextAttempt(tenant: acme, job: id) == nil)

        // Two items put back: unleased, waiting, with their attempts and last error.
        let later = JobItemRetry(
            attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0.addingTimeInterval(30), lastError: "ServiceUnavailable")
        let sooner = JobItemRetry(
            attempts: 2, firstAttemptAt: t0, nextAttemptAt: t0.addingTimeInterval(20), lastError: "TransportFailed")
        #expect(try await store.deferItem(tenant: acme, job: id, index: 2, retry: later))
        #expect(try await store.deferItem(tenant: acme, job: id, index: 1, retry: sooner))
        let waiting = try await store.items(tenant: acme, job: id, fromIndex: 2, limit: 1)[0]
        #expect(waiting.state == .retrying && waiting.result == nil && waiting.claimant == nil && waiting.leaseUntil == nil)
        #expect(waiting.attempts == 1 && waiting.firstAttemptAt == t0 && waiting.lastError == "ServiceUnavailable")
        #expect(waiting.nextAttemptAt == t0.addingTimeInterval(30))
        #expect(try await store.nextAttempt(tenant: acme, job: id) == t0.addingTimeInterval(20))
        #expect(
            try await store.progress(tenant: acme, job: id)
                == JobProgress(pending: 4, sent: 0, failed: 0, retrying: 2, unknown: 0))
        let retryingCount = try await store.outcomes(tenant: acme, job: id).filter { $0.state == .retrying }
        #expect(retryingCount.map(\.count).reduce(0, +) == 2)
        // A deferred item of another tenant's job of the same id does not exist.
        #expect(try await !store.deferItem(tenant: other, job: id, index: 2, retry: later))
        #expect(try await store.nextAttempt(tenant: other, job: id) == nil)

        // Not due yet: not claimed by anyone, though unleased.
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 10, claimant: "runner-b", now: t0.addingTimeInterval(10), leaseUntil: lease
            ).isEmpty)
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 10, claimant: "runner-a", now: t0.addingTimeInterval(10), leaseUntil: lease
            ).map(\.index) == [0, 3])
        // Due: claimed before the lower-index pending items, earliest next attempt first.
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 1, claimant: "runner-a", now: t0.addingTimeInterval(25), leaseUntil: lease
            ).map(\.index) == [1])
        let all = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "runner-a", now: t0.addingTimeInterval(35), leaseUntil: lease)
        #expect(all.map(\.index) == [1, 2, 0, 3])
        #expect(all[0].state == .retrying && all[0].claimant == "runner-a" && all[0].attempts == 2)

        // Deferred again with a lower count: attempts and the first attempt are kept.
        let again = JobItemRetry(
            attempts: 0, firstAttemptAt: t0.addingTimeInterval(35), nextAttemptAt: t0.addingTimeInterval(100),
            lastError: "InternalServerError")
        #expect(try await store.deferItem(tenant: acme, job: id, index: 2, retry: again))
        let kept = try await store.items(tenant: acme, job: id, fromIndex: 2, limit: 1)[0]
        #expect(kept.attempts == 1 && kept.firstAttemptAt == t0 && kept.lastError == "InternalServerError")
        #expect(kept.nextAttemptAt == t0.addingTimeInterval(100))

        // Outcomes after a deferral: recorded once, attempts never lowered, no next attempt left.
        let sent = JobItemResult(
            state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0.addingTimeInterval(40), attempts: 0)
        guard case .recorded(let done) = try await store.recordAndReadBack(tenant: acme, job: id, index: 1, result: sent)
        else { Issue.record("expected recorded"); return }
        #expect(done.state == .sent && done.attempts == 2 && done.result?.attempts == 2 && done.nextAttemptAt == nil)
        #expect(done.lastError == "TransportFailed" && done.claimant == nil)
        #expect(try await !store.deferItem(tenant: acme, job: id, index: 1, retry: later))
        #expect(try await store.items(tenant: acme, job: id, fromIndex: 1, limit: 1)[0] == done)
        let failed = JobItemResult(
            state: .failed, status: 503, reason: "ServiceUnavailable", apnsID: nil,
            finishedAt: t0.addingTimeInterval(41), attempts: 3)
        #expect(try await store.recordAndReadBack(tenant: acme, job: id, index: 2, result: failed).item.attempts == 3)
        await #expect(throws: StoreError.self) {
            _ = try await store.recordAndReadBack(
                tenant: acme, job: id, index: 3,
                result: JobItemResult(
                    state: .retrying, status: nil, reason: nil, apnsID: nil, finishedAt: t0.addingTimeInterval(42)))
        }
        let unknown = JobItemResult(
            state: .unknown, status: nil, reason: "TransportFailed", apnsID: nil,
            finishedAt: t0.addingTimeInterval(42), attempts: 1)
        #expect(try await store.recordAndReadBack(tenant: acme, job: id, index: 3, result: unknown).item.state == .unknown)
        #expect(try await store.nextAttempt(tenant: acme, job: id) == nil)
        #expect(
            try await store.progress(tenant: acme, job: id)
                == JobProgress(pending: 1, sent: 1, failed: 1, retrying: 0, unknown: 1))
        let report = try await store.failedItems(tenant: acme, job: id, afterIndex: -1, limit: 10)
        #expect(report.map(\.index) == [2])
        #expect(report.first?.attempts == 3 && report.first?.result?.attempts == 3)
        #expect(report.first?.lastError == "InternalServerError")

        // A retry leased by an earlier instance of a runner is released with its pending items.
        let last = JobItemRetry(
            attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0.addingTimeInterval(50), lastError: "TransportFailed")
        #expect(try await store.deferItem(tenant: acme, job: id, index: 0, retry: last))
        let farLease = t0.addingTimeInterval(600)
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 5, claimant: "herald/old", now: t0.addingTimeInterval(60),
                leaseUntil: farLease
            ).map(\.index) == [0])
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 5, claimant: "herald/new", now: t0.addingTimeInterval(61),
                leaseUntil: farLease
            ).isEmpty)
        #expect(try await store.releaseLeases(tenant: acme, job: id, claimantBase: "herald", keeping: "herald/new") == 1)
        #expect(
            try await store.claimPendingItems(
                tenant: acme, job: id, limit: 5, claimant: "herald/new", now: t0.addingTimeInterval(62),
                leaseUntil: farLease
            ).map(\.index) == [0])
    }

    @Test(
        "on-the-wire marks and lease checks: only the claimant's items without an outcome, kept across lease take-back, cleared by a deferral; apns-ids stable",
        arguments: StoreBackend.allCases)
    func onTheWire(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkOnTheWire)
    }

    private func checkOnTheWire(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("wire-1")
        _ = try await store.createJob(
            tenant: acme, id: id, environment: nil, notifications: (0..<5).map { _ in Fixtures.note() }, createdAt: t0)
        let ids = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: 10).map(\.notification.id)
        #expect(ids.allSatisfy { $0 != nil } && Set(ids).count == 5)
        let lease = t0.addingTimeInterval(600)
        let claimed = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 4, claimant: "herald/old", now: t0, leaseUntil: lease)
        #expect(claimed.map(\.index) == [0, 1, 2, 3] && claimed.allSatisfy { $0.onWireAt == nil })
        #expect(try await store.items(tenant: acme, job: id, fromIndex: 4, limit: 1)[0].onWireAt == nil)

        // The check without a mark: the claimant's items without an outcome, nothing written.
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [0, 1, 2, 3, 4, 9], claimant: "herald/old") == [0, 1, 2, 3])
        #expect(try await store.leasedItems(tenant: other, job: id, indexes: [3], claimant: "herald/old").isEmpty)
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [3], claimant: "heraldx/1").isEmpty)
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [], claimant: "herald/old").isEmpty)
        #expect(try await store.items(tenant: acme, job: id, fromIndex: 0, limit: 10).allSatisfy { $0.onWireAt == nil })

        // Item 4 is not leased to the claimant, 9 does not exist, another tenant's job has no such items.
        let at = t0.addingTimeInterval(1)
        #expect(
            try await store.markOnWire(tenant: acme, job: id, indexes: [0, 1, 2, 4, 9], claimant: "herald/old", at: at)
                == [0, 1, 2])
        #expect(try await store.markOnWire(tenant: other, job: id, indexes: [3], claimant: "herald/old", at: at).isEmpty)
        #expect(try await store.markOnWire(tenant: acme, job: id, indexes: [3], claimant: "heraldx/1", at: at).isEmpty)
        #expect(try await store.markOnWire(tenant: acme, job: id, indexes: [], claimant: "herald/old", at: at).isEmpty)
        var items = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: 10)
        #expect(items.map { $0.onWireAt != nil } == [true, true, true, false, false])
        #expect(items[0].onWireAt == at)

        // 0 answered (outcome, never marked again); 1 deferred after a transient answer (mark cleared).
        let sent = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: ids[0], finishedAt: at, attempts: 1)
        _ = try await store.recordAndReadBack(tenant: acme, job: id, index: 0, result: sent)
        #expect(
            try await store.deferItem(
                tenant: acme, job: id, index: 1,
                retry: JobItemRetry(attempts: 1, firstAttemptAt: at, nextAttemptAt: at, lastError: "ServiceUnavailable")))
        #expect(try await store.markOnWire(tenant: acme, job: id, indexes: [0], claimant: "herald/old", at: at).isEmpty)
        // An outcome or a deferral (which unleases the item) ends the claimant's hold on it.
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [0, 1, 2, 3], claimant: "herald/old") == [2, 3])

        // The instance stops; a new one takes its leases back: item 2 comes back still marked,
        // the retry and the never-sent ones unmarked, every apns-id as stored.
        #expect(try await store.releaseLeases(tenant: acme, job: id, claimantBase: "herald", keeping: "herald/new") == 2)
        let again = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "herald/new", now: t0.addingTimeInterval(2), leaseUntil: lease)
        #expect(again.map(\.index) == [1, 2, 3, 4])
        #expect(again.map { $0.onWireAt != nil } == [false, true, false, false])
        #expect(again.map(\.notification.id) == Array(ids[1...]))
        #expect(again[1].onWireAt == at && again[1].state == .pending)
        // Held by the new claimant now, the due retry among them; not by the old one any more.
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [0, 1, 2, 3, 4], claimant: "herald/new") == [1, 2, 3, 4])
        #expect(try await store.leasedItems(tenant: acme, job: id, indexes: [1, 2, 3, 4], claimant: "herald/old").isEmpty)

        // The new instance marks them: its own claim now, a later time.
        let later = t0.addingTimeInterval(3)
        #expect(
            try await store.markOnWire(tenant: acme, job: id, indexes: [1, 2, 3, 4], claimant: "herald/new", at: later)
                == [1, 2, 3, 4])
        items = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: 10)
        #expect(items[0].onWireAt == at && items[1...].allSatisfy { $0.onWireAt == later })
        #expect(items.map(\.notification.id) == ids)
    }

    @Test(
        "outcome counts (v9) move with the outcomes: a second outcome is not counted, a retry then its outcome, outcomes at once",
        arguments: StoreBackend.allCases)
    func outcomeCounts(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkOutcomeCounts)
    }

    private func checkOutcomeCounts(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("counts-1")
        let count = 300
        _ = try await store.createJob(
            tenant: acme, id: id, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() }, createdAt: t0)
        func agrees(_ progress: JobProgress) async throws {
            let outcomes = try await store.outcomes(tenant: acme, job: id)
            let scanned = try await ScanningJobReports(store: store).outcomes(tenant: acme, job: id)
            #expect(outcomes == scanned)
            #expect(try await store.progress(tenant: acme, job: id) == progress)
        }
        try await agrees(JobProgress(pending: count, sent: 0, failed: 0))
        let sent = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)
        let gone = JobItemResult(state: .failed, status: 410, reason: "Unregistered", apnsID: nil, finishedAt: t0)
        let lost = JobItemResult(state: .unknown, status: nil, reason: "Unknown", apnsID: nil, finishedAt: t0)
        // Every item recorded twice at once, the two outcomes differing for some: one counts.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                let first = index % 10 == 0 ? gone : index % 25 == 1 ? lost : sent
                group.addTask { _ = try await store.recordOutcome(tenant: self.acme, job: id, index: index, result: first) }
                group.addTask { _ = try await store.recordOutcome(tenant: self.acme, job: id, index: index, result: sent) }
            }
            try await group.waitForAll()
        }
        let stored = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: count)
        let finals = stored.filter(\.state.isFinal)
        #expect(finals.count == 200)
        try await agrees(
            JobProgress(
                pending: count - 200, sent: finals.filter { $0.state == .sent }.count,
                failed: finals.filter { $0.state == .failed }.count, retrying: 0,
                unknown: finals.filter { $0.state == .unknown }.count))
        // A retry counts as retrying (and pending) until its outcome; an item with an outcome is
        // neither deferred nor counted again.
        let retry = JobItemRetry(attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0, lastError: "ServiceUnavailable")
        #expect(try await store.deferItem(tenant: acme, job: id, index: 250, retry: retry))
        #expect(try await !store.deferItem(tenant: acme, job: id, index: 0, retry: retry))
        let before = try await store.progress(tenant: acme, job: id)
        #expect(before?.retrying == 1 && before?.pending == count - 200)
        try await agrees(try #require(before))
        #expect(try await store.recordOutcome(tenant: acme, job: id, index: 250, result: gone))
        #expect(try await !store.recordOutcome(tenant: acme, job: id, index: 250, result: sent))
        var after = try #require(before)
        after.retrying = 0
        after.pending -= 1
        after.failed += 1
        try await agrees(after)
        // Another tenant's job of the same id is counted apart.
        _ = try await store.createJob(tenant: other, id: id, environment: nil, notifications: [Fixtures.note()], createdAt: t0)
        #expect(try await store.recordOutcome(tenant: other, job: id, index: 0, result: gone))
        try await agrees(after)
        #expect(
            try await store.outcomes(tenant: other, job: id) == [
                JobOutcomeCount(state: .failed, status: 410, reason: "Unregistered", count: 1)
            ])
    }

    @Test(
        "a commit group of changes: outcomes and retries of one job in one call, counted once, an item with an outcome kept",
        arguments: StoreBackend.allCases)
    func commitGroups(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkCommitGroups)
    }

    private func checkCommitGroups(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("groups-1")
        let count = 100
        _ = try await store.createJob(
            tenant: acme, id: id, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() }, createdAt: t0)
        _ = try await store.createJob(tenant: other, id: id, environment: nil, notifications: [Fixtures.note()], createdAt: t0)
        let sent = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0, attempts: 1)
        let gone = JobItemResult(
            state: .failed, status: 410, reason: "Unregistered", message: "gone", apnsID: nil, finishedAt: t0, attempts: 1)
        let retry = JobItemRetry(attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0.addingTimeInterval(5), lastError: "ServiceUnavailable")
        // 0..<60 sent, 60..<70 failed, 70..<75 retrying, the rest pending.
        let changes = (0..<75).map { index -> JobItemChange in
            JobItemChange(index: index, change: index < 60 ? .outcome(sent) : index < 70 ? .outcome(gone) : .retry(retry))
        }
        #expect(try await store.recordChanges(tenant: acme, job: id, changes) == 75)
        // Again: items with an outcome keep it (and are not counted twice); retries are put back again.
        #expect(try await store.recordChanges(tenant: acme, job: id, changes) == 5)
        #expect(try await store.recordChanges(tenant: acme, job: id, []) == 0)
        // A non-final outcome is refused before anything is written.
        let pendingResult = JobItemResult(state: .pending, status: nil, reason: nil, apnsID: nil, finishedAt: t0)
        await #expect(throws: StoreError.self) {
            _ = try await store.recordChanges(
                tenant: acme, job: id,
                [JobItemChange(index: 80, change: .outcome(sent)), JobItemChange(index: 81, change: .outcome(pendingResult))])
        }
        let progress = try #require(try await store.progress(tenant: acme, job: id))
        #expect(progress == JobProgress(pending: count - 70, sent: 60, failed: 10, retrying: 5, unknown: 0))
        let items = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: count)
        #expect(items[0].state == .sent && items[0].result?.status == 200 && items[0].result?.attempts == 1)
        #expect(items[65].state == .failed && items[65].result?.reason == "Unregistered" && items[65].result?.message == "gone")
        #expect(items[72].state == .retrying && items[72].nextAttemptAt == retry.nextAttemptAt && items[72].attempts == 1)
        #expect(items[80].state == .pending && items[81].state == .pending)
        #expect(try await ScanningJobReports(store: store).outcomes(tenant: acme, job: id) == store.outcomes(tenant: acme, job: id))
        // The other tenant's job of the same id is untouched.
        #expect(try await store.progress(tenant: other, job: id) == JobProgress(pending: 1, sent: 0, failed: 0))
    }

    @Test(
        "a commit group of plain successes keeps each item's apns-id, attempts and finish time, counts them once and keeps earlier outcomes",
        arguments: StoreBackend.allCases)
    func plainSuccessGroups(_ backend: StoreBackend) async throws {
        try await backend.withStore(checkPlainSuccessGroups)
    }

    private func checkPlainSuccessGroups(_ store: any PushStore & JobReports) async throws {
        let id = try JobID("plain-1")
        let count = 40
        _ = try await store.createJob(
            tenant: acme, id: id, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() }, createdAt: t0)
        let apnsIDs = (0..<count).map { _ in Fixtures.apnsID() }
        func sent(_ index: Int, attempts: Int = 1) -> JobItemResult {
            JobItemResult(
                state: .sent, status: 200, reason: nil, apnsID: apnsIDs[index],
                finishedAt: t0.addingTimeInterval(Double(index)), attempts: attempts)
        }
        // Item 30 failed earlier; items 20..<25 wait for a retry (their second attempt comes next).
        let gone = JobItemResult(state: .failed, status: 410, reason: "Unregistered", apnsID: nil, finishedAt: t0, attempts: 1)
        let retry = JobItemRetry(attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0, lastError: "ServiceUnavailable")
        #expect(
            try await store.recordChanges(
                tenant: acme, job: id,
                [JobItemChange(index: 30, change: .outcome(gone))] + (20..<25).map { JobItemChange(index: $0, change: .retry(retry)) })
                == 6)
        // One group of successes only: 0..<35, item 30 among them (it keeps its failure), 20..<25 on
        // their second attempt; an apns-id left out (item 3) is kept as none.
        let changes = (0..<35).map { index -> JobItemChange in
            var result = sent(index, attempts: (20..<25).contains(index) ? 2 : 1)
            if index == 3 { result.apnsID = nil }
            return JobItemChange(index: index, change: .outcome(result))
        }
        #expect(try await store.recordChanges(tenant: acme, job: id, changes) == 34)
        #expect(try await store.recordChanges(tenant: acme, job: id, changes) == 0)
        // A group of items without an outcome only (35..<38), then one repeating two of them
        // (on a later attempt) beside a new one (38): the repeats keep their first outcome.
        func successes(_ indexes: Range<Int>, attempts: Int) -> [JobItemChange] {
            indexes.map { JobItemChange(index: $0, change: .outcome(sent($0, attempts: attempts))) }
        }
        #expect(try await store.recordChanges(tenant: acme, job: id, successes(35..<38, attempts: 1)) == 3)
        #expect(try await store.recordChanges(tenant: acme, job: id, successes(36..<39, attempts: 2)) == 1)
        let items = try await store.items(tenant: acme, job: id, fromIndex: 0, limit: count)
        for index in 0..<35 where index != 30 {
            let result = try #require(items[index].result, "item \(index)")
            #expect(items[index].state == .sent && result.status == 200 && result.reason == nil, "item \(index)")
            #expect(result.apnsID == (index == 3 ? nil : apnsIDs[index]), "item \(index)")
            #expect(result.finishedAt == t0.addingTimeInterval(Double(index)), "item \(index)")
            #expect(result.attempts == ((20..<25).contains(index) ? 2 : 1), "item \(index)")
        }
        #expect(items[30].state == .failed && items[30].result?.reason == "Unregistered")
        for index in 35..<39 {
            #expect(items[index].state == .sent && items[index].result?.apnsID == apnsIDs[index], "item \(index)")
            #expect(items[index].result?.attempts == (index == 38 ? 2 : 1), "item \(index)")
        }
        #expect(items[39].state == .pending)
        let progress = try #require(try await store.progress(tenant: acme, job: id))
        #expect(progress == JobProgress(pending: 1, sent: 38, failed: 1, retrying: 0, unknown: 0))
        #expect(try await ScanningJobReports(store: store).outcomes(tenant: acme, job: id) == store.outcomes(tenant: acme, job: id))
    }
}
