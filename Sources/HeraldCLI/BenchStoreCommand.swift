import ArgumentParser
import Foundation
import HeraldCore
import HeraldStore

/// `herald bench-store --items 100000` (hidden): the cost of a job report (`GET /v1/jobs/{id}`)
/// read from the SQLite store for one large job. A benchmark printout, not a test.
struct BenchStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-store",
        abstract:
            "Write one job of N items to a new SQLite store, record outcomes for most of them, and print the time of the job report queries.",
        shouldDisplay: false
    )

    @Option(name: .long, help: "How many items the job has.")
    var items: Int = 100_000

    @Option(name: .long, help: "How many times each report query runs.")
    var rounds: Int = 30

    @Option(name: .long, help: "Where to write the store (default: a new temporary directory, removed afterwards).")
    var directory: String?

    func validate() throws {
        guard items > 0, items <= 1_000_000 else { throw ValidationError("--items must be between 1 and 1000000") }
        guard rounds > 0, rounds <= 10_000 else { throw ValidationError("--rounds must be between 1 and 10000") }
    }

    func run() async throws {
        let root =
            directory ?? (NSTemporaryDirectory() + "herald-bench-store-\(ProcessInfo.processInfo.processIdentifier)")
        defer {
            if directory == nil { try? FileManager.default.removeItem(atPath: root) }
        }
        let store = try SQLitePushStore(directory: root)
        let tenant = try TenantID("bench")
        let job = try JobID("bench-\(items)")
        let payload = Array(#"{"aps":{"alert":"Your order has shipped"}}"#.utf8)
        let notifications = (0..<items).map { index in
            HeraldCore.Notification(
                deviceToken: try! DeviceToken(hex: String(format: "%064x", index)), topic: "com.example.app",
                pushType: .alert, payload: payload)
        }
        let now = Date()
        var clock = ContinuousClock.now
        _ = try await store.createJob(
            tenant: tenant, id: job, environment: .production, notifications: notifications, createdAt: now)
        let createSeconds = Self.seconds(since: clock)

        // Outcomes like a real batch: 90% sent, 5% failed (three reasons), 5% still pending.
        clock = .now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<32 {
                group.addTask {
                    for index in stride(from: lane, to: items, by: 32) {
                        let result: JobItemResult
                        switch index % 100 {
                        case 0..<90:
                            result = JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: now)
                        case 90, 91:
                            result = JobItemResult(
                                state: .failed, status: 410, reason: "Unregistered", apnsID: nil, apnsTimestamp: now,
                                finishedAt: now)
                        case 92, 93:
                            result = JobItemResult(
                                state: .failed, status: 400, reason: "BadDeviceToken", apnsID: nil, finishedAt: now)
                        case 94:
                            result = JobItemResult(
                                state: .failed, status: 413, reason: "PayloadTooLarge", apnsID: nil, finishedAt: now)
                        default: continue
                        }
                        _ = try await store.recordResult(tenant: tenant, job: job, index: index, result: result)
                    }
                }
            }
            try await group.waitForAll()
        }
        let recordSeconds = Self.seconds(since: clock)

        var outcomes: [Double] = []
        var firstPage: [Double] = []
        var lastPage: [Double] = []
        var groups = 0
        var failedCount = 0
        for _ in 0..<rounds {
            clock = .now
            let counts = try await store.outcomes(tenant: tenant, job: job)
            outcomes.append(Self.seconds(since: clock))
            groups = counts.count
            failedCount = counts.filter { $0.state == .failed }.reduce(0) { $0 + $1.count }
            clock = .now
            _ = try await store.failedItems(tenant: tenant, job: job, afterIndex: -1, limit: 100)
            firstPage.append(Self.seconds(since: clock))
            clock = .now
            _ = try await store.failedItems(tenant: tenant, job: job, afterIndex: items - 200, limit: 100)
            lastPage.append(Self.seconds(since: clock))
        }
        print("store:              \(store.path) (migrations: \(try store.appliedMigrations().count))")
        print(String(format: "create job:         %.3f s  (%d items)", createSeconds, items))
        print(String(format: "record outcomes:    %.3f s  (%d sent or failed)", recordSeconds, items / 100 * 95))
        print("outcome counts:     \(Self.summary(outcomes))  (\(groups) groups, \(failedCount) failed)")
        print("failed, first page: \(Self.summary(firstPage))  (100 items)")
        print("failed, last page:  \(Self.summary(lastPage))  (after index \(items - 200))")
    }

    private static func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// Median and minimum of the rounds, in milliseconds.
    private static func summary(_ samples: [Double]) -> String {
        let sorted = samples.sorted()
        return String(format: "median %.3f ms, min %.3f ms", sorted[sorted.count / 2] * 1000, sorted[0] * 1000)
    }
}
