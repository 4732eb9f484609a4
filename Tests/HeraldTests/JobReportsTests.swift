import Foundation
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

@Suite("Job report query plans")
struct JobReportPlanTests {
    @Test(
        "outcome counts read the counts table and the retry index; failed items and claims go through partial indexes in idx order"
    )
    func plans() async throws {
        let store = try Fixtures.store()
        let acme = Fixtures.tenantID("acme")
        let job = try JobID("plan-1")
        _ = try await store.createJob(
            tenant: acme, id: job, environment: .production, notifications: (0..<50).map { _ in Fixtures.note() },
            createdAt: Date(timeIntervalSince1970: 1_700_000_000))

        let outcomes = try store.queryPlan(SQLitePushStore.outcomeCountsSQL, arguments: [acme.rawValue, job.rawValue])
        #expect(outcomes.count == 1, "\(outcomes)")
        #expect(outcomes.first?.contains("USING INDEX job_outcome_by_job (tenant=? AND job_id=?)") == true, "\(outcomes)")
        // Items are keyed by the job's integer key (v10).
        let retrying = try store.queryPlan(SQLitePushStore.retryingCountSQL, arguments: [1])
        #expect(retrying.count == 1, "\(retrying)")
        #expect(retrying.first?.contains("INDEX job_item_due (job_key=?)") == true, "\(retrying)")

        let failed = try store.queryPlan(SQLitePushStore.failedItemsSQL, arguments: [1, -1, 100])
        #expect(failed.count == 1, "\(failed)")
        #expect(failed.first?.contains("USING INDEX job_item_failed (job_key=? AND idx>?)") == true, "\(failed)")
        #expect(!failed.contains { $0.contains("TEMP B-TREE") }, "\(failed)")

        // The claim's due retries come from the retry index, earliest first, without a sort.
        let due = try store.queryPlan(SQLitePushStore.claimDueSQL, arguments: [1, 0, 500])
        #expect(due.count == 1, "\(due)")
        #expect(due.first?.contains("INDEX job_item_due (job_key=? AND next_attempt_ms<?)") == true, "\(due)")
        #expect(!due.contains { $0.contains("TEMP B-TREE") }, "\(due)")

        // The rows of an item range, and the success records of a chunk range: key ranges.
        let rows = try store.queryPlan(
            "SELECT \(SQLitePushStore.itemRowColumns) FROM job_item WHERE job_key = ? AND idx BETWEEN ? AND ?",
            arguments: [1, 0, 10])
        #expect(rows.contains { $0.contains("SEARCH job_item USING PRIMARY KEY (job_key=? AND idx>? AND idx<?)") }, "\(rows)")
        let sent = try store.queryPlan("SELECT items FROM job_sent WHERE id BETWEEN ? AND ?", arguments: [0, 10])
        #expect(sent.contains { $0.contains("SEARCH job_sent USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)") }, "\(sent)")
    }
}

@Suite("SQLite store durability settings")
struct StoreSettingsTests {
    @Test("the store runs in WAL mode with synchronous=NORMAL (safe against kill -9, one sync per checkpoint)")
    func walNormal() async throws {
        let store = try Fixtures.store()
        #expect(try store.journalMode() == "wal")
        #expect(try await store.synchronousMode() == 1)
    }
}

@Suite("SQLite store: job item outcomes recorded concurrently")
struct ConcurrentResultsTests {
    let acme = Fixtures.tenantID("acme")
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    @Test("many outcomes at once are all committed; for one item the first wins and the others see it")
    func concurrentOutcomes() async throws {
        let directory = Fixtures.temporaryDirectory("herald-store")
        let job = try JobID("concurrent")
        let count = 300
        do {
            let store = try SQLitePushStore(directory: directory)
            _ = try await store.createJob(
                tenant: acme, id: job, environment: nil, notifications: (0..<count).map { _ in Fixtures.note() },
                createdAt: t0)
            // Every item once, and item 0 three more times with other outcomes, all at once.
            let outcomes = try await withThrowingTaskGroup(of: (Int, RecordOutcome).self) { group in
                for index in 0..<count {
                    group.addTask {
                        let result = JobItemResult(
                            state: index % 2 == 0 ? .sent : .failed, status: index % 2 == 0 ? 200 : 410,
                            reason: index % 2 == 0 ? nil : "Unregistered", apnsID: nil, finishedAt: t0)
                        return (
                            index, try await store.recordAndReadBack(tenant: acme, job: job, index: index, result: result)
                        )
                    }
                }
                for attempt in 1...3 {
                    group.addTask {
                        let result = JobItemResult(
                            state: .failed, status: 500 + attempt, reason: "Attempt\(attempt)", apnsID: nil,
                            finishedAt: t0)
                        return (0, try await store.recordAndReadBack(tenant: acme, job: job, index: 0, result: result))
                    }
                }
                var all: [(Int, RecordOutcome)] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            #expect(outcomes.count == count + 3)
            let forZero = outcomes.filter { $0.0 == 0 }.map(\.1)
            #expect(forZero.filter { if case .recorded = $0 { true } else { false } }.count == 1)
            #expect(Set(forZero.map(\.item)).count == 1, "every caller for item 0 sees the one recorded outcome")
            #expect(outcomes.filter { $0.0 != 0 }.allSatisfy { if case .recorded = $0.1 { true } else { false } })
            // A missing item is an error for its caller only.
            await #expect(throws: StoreError.self) {
                try await store.recordAndReadBack(
                    tenant: acme, job: job, index: count,
                    result: JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0))
            }
        }
        // Committed: a fresh store on the same file sees every outcome.
        let reopened = try SQLitePushStore(directory: directory)
        let progress = try #require(try await reopened.progress(tenant: acme, job: job))
        #expect(progress.pending == 0 && progress.sent + progress.failed == count)
        #expect(progress.sent == count / 2 || progress.sent == count / 2 - 1)
    }
}
