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
        "v9-lean-job-items", "v10-sqlite-batch-items", "v11-job-end-told", "v12-item-unique-id", "v13-admin-accounts",
        "v14-usage",
        "v15-channels",
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
                            acme.rawValue, job.rawValue, index, Fixtures.token.hex, Fixtures.apnsID().rawValue,
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
        #expect(try store.indexNames(on: "job_item") == ["job_item_due", "job_item_failed"])
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

    /// t0 plus `seconds`, in the store's milliseconds.
    static func ms(_ seconds: Double) -> Int64 { Int64((1_700_000_000 + seconds) * 1000) }

    @Test("a v9 job (rows of every state, leases, a wire mark) migrates to v10 and reports, resumes and finishes")
    func migrateV9() async throws {
        let path = Fixtures.temporaryDirectory("herald-store") + "/herald.sqlite"
        let job = try JobID("job-v9")
        let ids = (0..<6).map { _ in Fixtures.apnsID() }
        do {
            let v9 = try SQLitePushStore(path: path, migratingUpTo: "v9-lean-job-items")
            #expect(try v9.appliedMigrations() == Array(StoreTests.allMigrations.prefix { $0 != "v10-sqlite-batch-items" }))
            // A job as the v9 code stored and ran it: a shared payload, items in every state.
            try await v9.pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO job (tenant, id, state, environment, item_count, created_at_ms, updated_at_ms)
                        VALUES (?, ?, 'running', 'production', 6, ?, ?)
                        """,
                    arguments: [acme.rawValue, job.rawValue, Self.ms(0), Self.ms(0)])
                try db.execute(
                    sql: "INSERT INTO job_payload (tenant, job_id, id, payload) VALUES (?, ?, 1, ?)",
                    arguments: [acme.rawValue, job.rawValue, Data(#"{"aps":{"alert":"v9"}}"#.utf8)])
                for index in 0..<6 {
                    try db.execute(
                        sql: """
                            INSERT INTO job_item (tenant, job_id, idx, device_token, topic, push_type, priority, collapse_id,
                                                  apns_id, payload, payload_ref, state)
                            VALUES (?, ?, ?, ?, 'com.example.app', ?, 10, ?, ?, X'', 1, 'pending')
                            """,
                        arguments: [
                            acme.rawValue, job.rawValue, index, String(format: "%064x", index) + (index == 5 ? "abcd" : ""),
                            index == 4 ? "background" : "alert", index == 1 ? "c-1" : nil, ids[index].rawValue,
                        ])
                }
                let set = "UPDATE job_item SET "
                let at = " WHERE tenant = ? AND job_id = ? AND idx = ?"
                try db.execute(
                    sql: set + "state = 'sent', status = 200, result_apns_id = ?, finished_at_ms = ?, attempts = 1" + at,
                    arguments: [ids[0].rawValue, Self.ms(2), acme.rawValue, job.rawValue, 0])
                try db.execute(
                    sql: set
                        + "state = 'failed', status = 410, reason = 'Unregistered', apns_timestamp_ms = ?, finished_at_ms = ?, attempts = 1"
                        + at,
                    arguments: [Self.ms(1), Self.ms(3), acme.rawValue, job.rawValue, 1])
                try db.execute(
                    sql: set
                        + "state = 'retrying', attempts = 1, first_attempt_ms = ?, next_attempt_ms = ?, last_error = 'InternalServerError'"
                        + at,
                    arguments: [Self.ms(1), Self.ms(10), acme.rawValue, job.rawValue, 2])
                try db.execute(
                    sql: set + "claimant = 'herald/old', lease_until_ms = ?, wire_at_ms = ?" + at,
                    arguments: [Self.ms(60), Self.ms(1), acme.rawValue, job.rawValue, 3])
                try db.execute(
                    sql: set + "claimant = 'herald/old', lease_until_ms = ?" + at,
                    arguments: [Self.ms(60), acme.rawValue, job.rawValue, 4])
                try db.execute(
                    sql: """
                        INSERT INTO job_outcome (tenant, job_id, state, status, reason, n)
                        VALUES (?, ?, 'sent', 200, NULL, 1), (?, ?, 'failed', 410, 'Unregistered', 1)
                        """,
                    arguments: [acme.rawValue, job.rawValue, acme.rawValue, job.rawValue])
            }
        }
        let store = try SQLitePushStore(path: path)
        #expect(try store.appliedMigrations() == StoreTests.allMigrations)
        let date: (Double) -> Date = { Date(timeIntervalSince1970: 1_700_000_000 + $0) }
        let items = try await store.items(tenant: acme, job: job, fromIndex: 0, limit: 10)
        #expect(items.map(\.state) == [.sent, .failed, .retrying, .pending, .pending, .pending])
        #expect(items.map(\.notification.id) == ids)
        #expect(items.map(\.notification.deviceToken?.hex) == (0..<6).map { String(format: "%064x", $0) + ($0 == 5 ? "abcd" : "") })
        #expect(items.allSatisfy { $0.notification.payload == Array(#"{"aps":{"alert":"v9"}}"#.utf8) && $0.notification.priority == .immediate })
        #expect(items[4].notification.pushType == .background && items[1].notification.collapseID == "c-1")
        #expect(items[0].result == JobItemResult(state: .sent, status: 200, reason: nil, apnsID: ids[0], finishedAt: date(2), attempts: 1))
        #expect(
            items[1].result
                == JobItemResult(
                    state: .failed, status: 410, reason: "Unregistered", apnsID: nil, apnsTimestamp: date(1), finishedAt: date(3),
                    attempts: 1))
        #expect(items[2].nextAttemptAt == date(10) && items[2].firstAttemptAt == date(1) && items[2].lastError == "InternalServerError")
        #expect(items[3].claimant == "herald/old" && items[3].leaseUntil == date(60) && items[3].onWireAt == date(1))
        #expect(items[4].claimant == "herald/old" && items[4].onWireAt == nil && items[5].claimant == nil)
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 4, sent: 1, failed: 1, retrying: 1))
        #expect(try await store.failedItems(tenant: acme, job: job, afterIndex: -1, limit: 10).map(\.index) == [1])
        #expect(try await store.leasedItemCounts(now: date(0)) == ["herald/old": 2])

        // The job resumes as the runner resumes it: the old instance's leases taken back, then claims.
        #expect(try await store.releaseLeases(tenant: acme, job: job, claimantBase: "herald", keeping: "herald/new") == 2)
        let claimed = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 10, claimant: "herald/new", now: date(20), leaseUntil: date(80), fromIndex: 0)
        #expect(claimed.map(\.index) == [2, 3, 4, 5])
        #expect(claimed[0].state == .retrying && claimed[0].attempts == 1 && claimed[1].onWireAt == date(1))
        let sent = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: date(21), attempts: 2)
        #expect(
            try await store.recordChanges(
                tenant: acme, job: job, (2...5).map { JobItemChange(index: $0, change: .outcome(sent)) } + [
                    JobItemChange(index: 0, change: .outcome(sent))
                ]) == 4)
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 0, sent: 5, failed: 1))
        #expect(try await store.nextAttempt(tenant: acme, job: job) == nil)
        let done = try await store.items(tenant: acme, job: job, fromIndex: 0, limit: 10)
        #expect(done[0].result?.finishedAt == date(2), "the first outcome is kept")
        #expect(done[2].result == sent && done[2].firstAttemptAt == date(1) && done[3].onWireAt == date(1))
        #expect(try await store.leasedItemCounts(now: date(20)).isEmpty)
    }

    @Test("the runner's write transactions commit, and roll back on an error or a failed commit, leaving the store usable")
    func writeTransactions() async throws {
        let store = try SQLitePushStore(directory: Fixtures.temporaryDirectory("herald-store"))
        try await store.writeTransaction { db in try db.execute(sql: "CREATE TABLE probe (x INTEGER)") }
        // An error in the body: nothing of it is committed.
        await #expect(throws: StoreError.self) {
            try await store.writeTransaction { db in
                try db.execute(sql: "INSERT INTO probe VALUES (1)")
                throw StoreError.invalidArgument("stop")
            }
        }
        // A commit that fails (a deferred foreign key left broken): rolled back as well.
        try await store.writeTransaction { db in
            try db.execute(sql: "CREATE TABLE parent (id INTEGER PRIMARY KEY)")
            try db.execute(
                sql: "CREATE TABLE child (parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")
        }
        await #expect(throws: (any Error).self) {
            try await store.writeTransaction { db in
                try db.execute(sql: "INSERT INTO probe VALUES (2)")
                try db.execute(sql: "INSERT INTO child VALUES (42)")
            }
        }
        let rows = try await store.writeTransaction { db in
            try db.execute(sql: "INSERT INTO probe VALUES (3)")
            return try Int.fetchAll(db, sql: "SELECT x FROM probe ORDER BY x")
        }
        #expect(rows == [3])
        #expect(try await store.writeTransaction { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM child") } == 0)
    }

    @Test("an apns-id's 16 bytes round-trip through the chunk format, one parsed from upper case too")
    func apnsIDBytes() throws {
        let bytes: [UInt8] = [0xea, 0xbe, 0xae, 0x54, 0x14, 0xa8, 0x11, 0xe5, 0xb6, 0x0b, 0x16, 0x97, 0xf9, 0x25, 0xec, 0x7b]
        #expect(NotificationID(bytes: bytes).words.bytes == bytes)
        var generator = NotificationIDGenerator()
        for _ in 0..<100 {
            let id = generator.nextID()
            #expect(ItemChunks.id(id.words.bytes) == id)
        }
        #expect(try NotificationID("EABEAE54-14A8-11E5-B60B-1697F925EC7B").words.bytes == bytes)
    }

    @Test("a plain success record round-trips with or without its apns-id")
    func sentRecords() throws {
        var generator = NotificationIDGenerator()
        let ids = (0..<3).map { _ in generator.nextID() }
        var bytes: [UInt8] = []
        ItemChunks.appendSent(&bytes, index: 7, attempts: 2, finishedMillis: 1_700_000_000_123, apnsID: ids[0])
        ItemChunks.appendSent(&bytes, index: 9, attempts: 1, finishedMillis: 5, apnsID: nil)
        ItemChunks.appendSent(&bytes, index: 300, attempts: 3, finishedMillis: 6, apnsID: ids[2])
        #expect(bytes.count == 3 * ItemChunks.sentRecordBytes)
        var sent: [Int: ItemChunks.Sent] = [:]
        try ItemChunks.decodeSent(Data(bytes), into: &sent, range: 0...299)
        #expect(sent.count == 2)
        #expect(sent[7]?.apnsID == ids[0])
        #expect(sent[7]?.attempts == 2)
        #expect(sent[7]?.finishedMillis == 1_700_000_000_123)
        #expect(sent[9]?.apnsID == nil)
        #expect(sent[9]?.finishedMillis == 5)
        #expect(sent[300] == nil)  // outside the range asked for
    }

    @Test("a chunk row whose count is out of range or longer than its blob is refused as corrupt, not trapped on")
    func corruptChunkCounts() throws {
        var generator = NotificationIDGenerator()
        var encoder = ItemChunks.Encoder(capacity: 256)
        var written: [(DeviceToken, NotificationID)] = []
        for index in 0..<3 {
            // Tokens of three lengths, each byte distinct: the bytes written straight into the
            // chunk read back as they were.
            let token = DeviceToken(bytes: (0..<(16 + 8 * index)).map { UInt8(truncatingIfNeeded: $0 * 7 + index) })
            let id = generator.nextID()
            let notification = HeraldCore.Notification(
                deviceToken: token, topic: "com.example.app", pushType: .alert, payload: [])
            try encoder.append(notification, id: id, payloadRef: 1)
            written.append((token, id))
        }
        let blob = Data(encoder.bytes)
        let read = try ItemChunks.decode(blob, count: 3)
        #expect(read.map(\.position) == [0, 1, 2])
        #expect(read.map(\.item.notification.deviceToken) == written.map(\.0))
        #expect(read.map(\.item.notification.id) == written.map(\.1))
        #expect(try ItemChunks.decode(blob, count: 3, wanted: 1..<2).map(\.position) == [1])
        for count in [-1, Int.min, ItemChunks.size + 1, Int.max] {
            #expect(throws: StoreError.self) { try ItemChunks.decode(blob, count: count) }
        }
        // A count above what the blob holds runs out of bytes: an error, not a read past the end.
        #expect(throws: StoreError.self) { try ItemChunks.decode(blob, count: 4) }
        #expect(throws: StoreError.self) { try ItemChunks.decode(blob.prefix(blob.count - 1), count: 3) }
    }

    @Test("a due retry whose row holds an index no claim can hold is refused as corrupt, not trapped on; others still claim")
    func corruptDueIndex() async throws {
        let store = try SQLitePushStore(path: Fixtures.temporaryDirectory("herald-store") + "/herald.sqlite")
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        let notes = (0..<3).map { _ in
            HeraldCore.Notification(deviceToken: Fixtures.token, topic: "com.example.app", payload: Array(#"{"aps":{}}"#.utf8))
        }
        let job = try await store.createJob(tenant: acme, id: try JobID("corrupt"), environment: nil, notifications: notes, createdAt: t0)
            .job
        let claimed = try await store.claimPendingItems(
            tenant: acme, job: job.id, limit: 3, claimant: "a", now: t0, leaseUntil: t0.addingTimeInterval(60))
        #expect(claimed.map(\.index) == [0, 1, 2])
        #expect(
            try await store.deferItem(
                tenant: acme, job: job.id, index: 1,
                retry: JobItemRetry(attempts: 1, firstAttemptAt: t0, nextAttemptAt: t0, lastError: "InternalServerError")))
        for corrupt in [-1, 0x8000_0000, Int(UInt32.max) + 1] {
            try await store.writeTransaction { db in
                try db.execute(sql: "UPDATE job_item SET idx = ? WHERE state = 'retrying'", arguments: [corrupt])
            }
            await #expect(throws: StoreError.self) {
                try await store.claimPendingItems(
                    tenant: acme, job: job.id, limit: 3, claimant: "b", now: t0.addingTimeInterval(120),
                    leaseUntil: t0.addingTimeInterval(180))
            }
        }
        // The row put back, the same claim takes the due retry: nothing else was disturbed.
        try await store.writeTransaction { db in try db.execute(sql: "UPDATE job_item SET idx = 1 WHERE state = 'retrying'") }
        let again = try await store.claimPendingItems(
            tenant: acme, job: job.id, limit: 3, claimant: "b", now: t0.addingTimeInterval(120), leaseUntil: t0.addingTimeInterval(180))
        #expect(again.first?.index == 1 && again.first?.state == .retrying)
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
        let id = Fixtures.apnsID()
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
