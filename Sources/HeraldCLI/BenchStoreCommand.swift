import ArgumentParser
import Foundation
import HeraldCore
import HeraldPostgres
import HeraldStore
import Logging

/// `herald bench-store --items 100000` (hidden): the cost of a job report (`GET /v1/jobs/{id}`)
/// read from the SQLite store for one large job, and the time to store it (the batch POST's share
/// before its 202). `--postgres` runs the same on the PostgreSQL store at
/// `$HERALD_TEST_POSTGRES_URL` (`scripts/postgres.sh start`), in a schema of its own that it drops
/// at the end. A benchmark printout, not a test.
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

    @Flag(name: .long, help: "Use the PostgreSQL store at $HERALD_TEST_POSTGRES_URL instead of SQLite.")
    var postgres = false

    @Option(name: .long, help: "How many jobs of --items to store (each timed; the first is the one reported on).")
    var creates: Int = 1

    func validate() throws {
        guard items > 0, items <= 1_000_000 else { throw ValidationError("--items must be between 1 and 1000000") }
        guard rounds > 0, rounds <= 10_000 else { throw ValidationError("--rounds must be between 1 and 10000") }
        guard (1...20).contains(creates) else { throw ValidationError("--creates must be between 1 and 20") }
    }

    static let postgresURLVariable = "HERALD_TEST_POSTGRES_URL"

    func run() async throws {
        let pid = ProcessInfo.processInfo.processIdentifier
        if postgres {
            guard let url = ProcessInfo.processInfo.environment[Self.postgresURLVariable], !url.isEmpty else {
                throw ValidationError("--postgres needs $\(Self.postgresURLVariable) (eval \"$(scripts/postgres.sh start)\")")
            }
            var logger = Logger(label: "herald.bench-store")
            logger.logLevel = .error
            let configuration = try PostgresPushStore.Configuration(url: url, schema: "bench_store_\(pid)")
            let store = try await PostgresPushStore.open(configuration, logger: logger)
            do {
                try await measure(store, name: "PostgreSQL \(configuration.displayName)", migrations: store.appliedMigrations().count)
            } catch {
                try? await store.dropSchema()
                await store.close()
                throw error
            }
            try await store.dropSchema()
            await store.close()
            return
        }
        let root = directory ?? (NSTemporaryDirectory() + "herald-bench-store-\(pid)")
        defer {
            if directory == nil { try? FileManager.default.removeItem(atPath: root) }
        }
        let store = try SQLitePushStore(directory: root)
        try await measure(store, name: store.path, migrations: try store.appliedMigrations().count)
    }

    private func measure(_ store: some PushStore & JobReports, name: String, migrations: Int) async throws {
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
        let cpuStart = Self.processCPUSeconds()
        _ = try await store.createJob(
            tenant: tenant, id: job, environment: .production, notifications: notifications, createdAt: now)
        let createSeconds = Self.seconds(since: clock)
        let createCPU = Self.processCPUSeconds() - cpuStart
        var moreCreates: [Double] = []
        for round in 1..<creates {
            clock = .now
            _ = try await store.createJob(
                tenant: tenant, id: try JobID("bench-\(items)-\(round)"), environment: .production,
                notifications: notifications, createdAt: now)
            moreCreates.append(Self.seconds(since: clock))
        }

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
                        // The job runner's path (no item read back).
                        _ = try await store.recordOutcome(tenant: tenant, job: job, index: index, result: result)
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
        // The job runner's path on a job of its own: claims of 500 (with the run's index hint),
        // each claimed chunk's plain successes written in commit groups of 64 (`recordChanges`).
        let runJob = try JobID("bench-\(items)-run")
        _ = try await store.createJob(
            tenant: tenant, id: runJob, environment: .production, notifications: notifications, createdAt: now)
        clock = .now
        let runCPUStart = Self.processCPUSeconds()
        var fromIndex = 0
        var claims = 0
        while true {
            let claimed = try await store.claimPendingItems(
                tenant: tenant, job: runJob, limit: 500, claimant: "bench/1", now: now,
                leaseUntil: now.addingTimeInterval(300), fromIndex: fromIndex)
            guard !claimed.isEmpty else { break }
            claims += 1
            fromIndex = (claimed.last?.index ?? fromIndex) + 1
            var start = 0
            while start < claimed.count {
                let group = claimed[start..<min(start + 64, claimed.count)].map { item in
                    JobItemChange(
                        index: item.index,
                        change: .outcome(
                            JobItemResult(
                                state: .sent, status: 200, reason: nil, apnsID: item.notification.id, finishedAt: now,
                                attempts: 1)))
                }
                _ = try await store.recordChanges(tenant: tenant, job: runJob, group)
                start += 64
            }
        }
        let runSeconds = Self.seconds(since: clock)
        let runCPU = Self.processCPUSeconds() - runCPUStart

        print("store:              \(name) (migrations: \(migrations))")
        print(String(format: "create job:         %.3f s  (%d items; %.3f s of this process's CPU)", createSeconds, items, createCPU))
        if !moreCreates.isEmpty {
            print("more jobs created:  \(moreCreates.map { String(format: "%.3f s", $0) }.joined(separator: ", "))")
        }
        print(String(format: "record outcomes:    %.3f s  (%d sent or failed)", recordSeconds, items / 100 * 95))
        print(
            String(
                format: "runner path:        %.3f s  (%d claims of 500, commit groups of 64; %.1f µs of this process's CPU an item)",
                runSeconds, claims, runCPU / Double(items) * 1e6))
        print("outcome counts:     \(Self.summary(outcomes))  (\(groups) groups, \(failedCount) failed)")
        print("failed, first page: \(Self.summary(firstPage))  (100 items)")
        print("failed, last page:  \(Self.summary(lastPage))  (after index \(items - 200))")
    }

    /// This process's CPU time (user and system, every thread).
    private static func processCPUSeconds() -> Double {
        var usage = timespec()
        guard clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &usage) == 0 else { return 0 }
        return Double(usage.tv_sec) + Double(usage.tv_nsec) / 1e9
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
