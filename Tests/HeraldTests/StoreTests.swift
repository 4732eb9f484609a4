import Foundation
import GRDB
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

@Suite("SQLite push store")
struct StoreTests {
    let acme = Fixtures.tenantID("acme")
    let other = Fixtures.tenantID("other")
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    @Test("a new file gets the versioned schema in WAL mode, and reopening keeps the data")
    func reopen() async throws {
        let directory = Fixtures.temporaryDirectory("herald-store")
        do {
            let store = try SQLitePushStore(directory: directory)
            #expect(try store.appliedMigrations() == StoreTests.allMigrations)
            #expect(try store.journalMode() == "wal")
            try await store.recordInvalidToken(
                InvalidTokenRecord(
                    token: Fixtures.token, topic: "com.example.app", environment: .production, reason: .unregistered,
                    apnsTimestamp: t0, recordedAt: t0),
                tenant: acme)
            _ = try await store.createJob(
                tenant: acme, id: try JobID("job-1"), environment: .production,
                notifications: [Fixtures.note(), Fixtures.note()], createdAt: t0)
        }
        #expect(FileManager.default.fileExists(atPath: directory + "/herald.sqlite"))
        let reopened = try SQLitePushStore(directory: directory)
        #expect(try reopened.appliedMigrations() == StoreTests.allMigrations)
        let record = try await reopened.invalidToken(
            tenant: acme, token: Fixtures.token, topic: "com.example.app", environment: .production)
        #expect(record?.reason == .unregistered && record?.apnsTimestamp == t0)
        let job = try await reopened.job(tenant: acme, id: try JobID("job-1"))
        #expect(job?.itemCount == 2 && job?.state == .accepted && job?.createdAt == t0)
        #expect(
            try await reopened.progress(tenant: acme, job: try JobID("job-1"))
                == JobProgress(pending: 2, sent: 0, failed: 0))
    }

    static let allMigrations = [
        "v1: invalid tokens, jobs, job items", "v2: job item outcome index", "v3-shared-payloads-and-retention",
        "v4-job-item-attempts",
    ]

    @Test("a file of schema v1 opens, migrates to v2 and keeps its jobs, items and invalid tokens")
    func migrateV1() async throws {
        let path = Fixtures.temporaryDirectory("herald-store") + "/herald.sqlite"
        let job = try JobID("job-v1")
        do {
            let v1 = try SQLitePushStore(path: path, migratingUpTo: "v1: invalid tokens, jobs, job items")
            #expect(try v1.appliedMigrations() == ["v1: invalid tokens, jobs, job items"])
            #expect(try v1.indexNames(on: "job_item") == ["job_item_by_state"])
            try await v1.recordInvalidToken(
                InvalidTokenRecord(
                    token: Fixtures.token, topic: "com.example.app", environment: .production, reason: .unregistered,
                    apnsTimestamp: t0, recordedAt: t0),
                tenant: acme)
            // A job as the v1 code stored it: each item with its own payload.
            try await v1.pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO job (tenant, id, state, environment, item_count, created_at_ms, updated_at_ms)
                        VALUES (?, ?, 'accepted', 'production', 5, ?, ?)
                        """,
                    arguments: [acme.rawValue, job.rawValue, 1_700_000_000_000, 1_700_000_000_000])
                for index in 0..<5 {
                    try db.execute(
                        sql: """
                            INSERT INTO job_item (tenant, job_id, idx, device_token, topic, push_type, apns_id, payload, state)
                            VALUES (?, ?, ?, ?, 'com.example.app', 'alert', ?, ?, 'pending')
                            """,
                        arguments: [
                            acme.rawValue, job.rawValue, index, Fixtures.token.hex, NotificationID.random().rawValue,
                            Data(#"{"aps":{"alert":"v1"}}"#.utf8),
                        ])
                }
            }
            // Two outcomes as the v1 code recorded them.
            try await v1.pool.write { db in
                try db.execute(
                    sql: "UPDATE job_item SET state = 'sent', status = 200, finished_at_ms = ? WHERE job_id = ? AND idx = 1",
                    arguments: [1_700_000_000_000, job.rawValue])
                try db.execute(
                    sql: """
                        UPDATE job_item SET state = 'failed', status = 410, reason = 'Unregistered', finished_at_ms = ?
                        WHERE job_id = ? AND idx = 3
                        """,
                    arguments: [1_700_000_000_000, job.rawValue])
            }
        }
        let store = try SQLitePushStore(path: path)
        #expect(try store.appliedMigrations() == StoreTests.allMigrations)
        #expect(try store.indexNames(on: "job_item") == ["job_item_by_state", "job_item_due", "job_item_outcomes"])
        let stored = try await store.job(tenant: acme, id: job)
        #expect(stored?.itemCount == 5 && stored?.createdAt == t0)
        // Items of a job stored before v3 keep reading their own payload.
        let items = try await store.items(tenant: acme, job: job, fromIndex: 0, limit: 10)
        #expect(items.count == 5 && items.allSatisfy { $0.notification.payload == Array(#"{"aps":{"alert":"v1"}}"#.utf8) })
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 3, sent: 1, failed: 1))
        #expect(
            Set(try await store.outcomes(tenant: acme, job: job)) == [
                JobOutcomeCount(state: .pending, status: nil, reason: nil, count: 3),
                JobOutcomeCount(state: .sent, status: 200, reason: nil, count: 1),
                JobOutcomeCount(state: .failed, status: 410, reason: "Unregistered", count: 1),
            ])
        let failed = try await store.failedItems(tenant: acme, job: job, afterIndex: -1, limit: 10)
        #expect(failed.map(\.index) == [3] && failed.first?.result?.reason == "Unregistered")
        let record = try await store.invalidToken(
            tenant: acme, token: Fixtures.token, topic: "com.example.app", environment: .production)
        #expect(record?.reason == .unregistered)
        // The migrated file's report uses the new index, like a new file's.
        let plan = try store.queryPlan(SQLitePushStore.outcomesSQL, arguments: [acme.rawValue, job.rawValue])
        #expect(plan.contains { $0.contains("COVERING INDEX job_item_outcomes") })
    }

    @Test("invalid tokens: newer timestamps win, re-registration later than APNs' timestamp lifts the refusal")
    func invalidTokens() async throws {
        let store = try Fixtures.store()
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

    @Test("every query is scoped by tenant")
    func scoping() async throws {
        let store = try Fixtures.store()
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
            _ = try await store.recordResult(
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

    @Test("jobs: creation, claims and results are idempotent")
    func jobs() async throws {
        let store = try Fixtures.store()
        let id = try JobID("batch-7")
        var withID = Fixtures.note()
        let fixedID = NotificationID.random()
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
        let outcome = try await store.recordResult(tenant: acme, job: id, index: 0, result: sent)
        guard case .recorded(let item) = outcome else { Issue.record("expected recorded"); return }
        #expect(item.state == .sent && item.result == sent && item.claimant == nil)
        let late = JobItemResult(
            state: .failed, status: 410, reason: "Unregistered", apnsID: fixedID, apnsTimestamp: t0,
            finishedAt: t0.addingTimeInterval(3))
        #expect(try await store.recordResult(tenant: acme, job: id, index: 0, result: late) == .alreadyRecorded(item))
        let failed = try await store.recordResult(tenant: acme, job: id, index: 1, result: late)
        #expect(failed.item.result?.reason == "Unregistered" && failed.item.result?.apnsTimestamp == t0)
        #expect(try await store.progress(tenant: acme, job: id) == JobProgress(pending: 2, sent: 1, failed: 1))
        // Finished items are never claimed again.
        let rest = try await store.claimPendingItems(
            tenant: acme, job: id, limit: 10, claimant: "runner-d", now: lease.addingTimeInterval(120),
            leaseUntil: lease.addingTimeInterval(180))
        #expect(rest.map(\.index) == [2, 3])

        #expect(try await store.updateJob(tenant: acme, id: id, state: .running, at: t0.addingTimeInterval(1)))
        #expect(try await store.jobs(tenant: acme, states: [.running], limit: 10).map(\.id) == [id])
        #expect(try await store.jobs(tenant: acme, states: [.finished], limit: 10).isEmpty)
    }

    @Test("job ids are checked")
    func jobIDs() {
        #expect(throws: StoreError.self) { try JobID("") }
        #expect(throws: StoreError.self) { try JobID("has space") }
        #expect(throws: StoreError.self) { try JobID(String(repeating: "a", count: 65)) }
        #expect(throws: Never.self) { try JobID("Batch_2024-01") }
    }
}

@Suite("Job results from sends")
struct JobItemResultTests {
    @Test("APNs answers and local failures map to stored outcomes")
    func mapping() {
        let at = Date(timeIntervalSince1970: 1_700_000_000)
        let id = NotificationID.random()
        let ok = JobItemResult(
            PushResult(notificationID: id, environment: .production, response: APNsResponse(status: 200, apnsID: id)),
            finishedAt: at)
        #expect(ok == JobItemResult(state: .sent, status: 200, reason: nil, apnsID: id, finishedAt: at))
        let gone = JobItemResult(
            PushResult(
                notificationID: id, environment: .production,
                response: APNsResponse(status: 410, apnsID: id, reason: .unregistered, timestamp: at)),
            finishedAt: at)
        #expect(
            gone
                == JobItemResult(
                    state: .failed, status: 410, reason: "Unregistered", apnsID: id, apnsTimestamp: at, finishedAt: at))
        let refused = JobItemResult(
            failure: PushError.topicDisallowed("x.y", tenant: Fixtures.tenantID("acme")), apnsID: id, finishedAt: at)
        #expect(refused.state == .failed && refused.status == nil && refused.reason == "TopicDisallowed")
    }
}
