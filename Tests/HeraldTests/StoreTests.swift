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
        "v4-job-item-attempts", "v5: provider tokens", "v6: job item on the wire", "v7-instances", "v8-shared-payloads",
        "v9-lean-job-items",
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
        #expect(try store.indexNames(on: "job_item") == ["job_item_due", "job_item_failed", "job_item_leased", "job_item_pending"])
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
        // v9 counted the outcomes recorded before it into `job_outcome`; later ones add to them.
        #expect(try store.indexNames(on: "job_outcome") == ["job_outcome_by_job"])
        #expect(
            try await store.recordOutcome(
                tenant: acme, job: job, index: 0,
                result: JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0)))
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 2, sent: 2, failed: 1))
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
