import ArgumentParser
import Foundation
import Herald
import HeraldCore
import HeraldStore
import Logging

/// `herald bench-jobs --jobs 2000` (hidden): the job runner's peak memory when it resumes many
/// unfinished batches at once (a restart after a flood). A benchmark printout, not a test.
/// Compare `--jobs 1` with `--jobs 2000`: the runner holds one claim chunk per job slot, so the
/// peak should barely move.
struct BenchJobsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-jobs",
        abstract:
            "Store N unfinished batches, run the job runner over them with an in-process APNs stand-in, and print peak RSS and the runner's peaks.",
        shouldDisplay: false
    )

    @Option(name: .long, help: "How many unfinished batches the store holds.")
    var jobs: Int = 2_000

    @Option(name: .long, help: "Items per batch.")
    var items: Int = 500

    @Option(name: .long, help: "Payload bytes of each batch (a template batch: stored once).")
    var payloadBytes: Int = 4_000

    @Option(name: .long, help: "How many batches to let finish before printing (the rest stay unfinished).")
    var finish: Int = 20

    func validate() throws {
        guard (1...100_000).contains(jobs) else { throw ValidationError("--jobs must be between 1 and 100000") }
        guard (1...100_000).contains(items) else { throw ValidationError("--items must be between 1 and 100000") }
        guard (21...4_096).contains(payloadBytes) else { throw ValidationError("--payload-bytes must be between 21 and 4096") }
        guard finish >= 1 else { throw ValidationError("--finish must be at least 1") }
    }

    /// Answers 200 to everything, at once: the runner, not the network, is measured. It has the
    /// callback form, as the real transport does, so the batches take the path `herald serve`'s
    /// do on SQLite (sent by callback).
    struct InstantTransport: PushTransport, TransportProvider {
        func send(_ notification: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse {
            APNsResponse(status: 200, apnsID: notification.id)
        }
        var sendsByCallback: Bool { true }
        func startSend(
            _ notification: AdmittedNotification, deadline: PushInstant,
            completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void
        ) {
            completion(.success(APNsResponse(status: 200, apnsID: notification.id)))
        }
        func shutdown() async {}
        func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport { self }
    }

    func run() async throws {
        let root = NSTemporaryDirectory() + "herald-bench-jobs-\(ProcessInfo.processInfo.processIdentifier)"
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try SQLitePushStore(directory: root)
        let tenant = try TenantID("bench")
        let payload = Array(#"{"aps":{"alert":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: payloadBytes - 20) + Array(#""}}"#.utf8)
        var clock = ContinuousClock.now
        for job in 0..<jobs {
            let notifications = (0..<items).map { index in
                HeraldCore.Notification(
                    deviceToken: DeviceToken(bytes: (0..<32).map { UInt8(truncatingIfNeeded: ($0 == 0 ? job : index) >> ($0 % 3 * 8)) }),
                    topic: "com.example.app", payload: payload)
            }
            _ = try await store.createJob(
                tenant: tenant, id: try JobID("bench-\(job)"), environment: nil, notifications: notifications, createdAt: Date())
        }
        let storeSeconds = Self.seconds(since: clock)
        let rssBefore = Self.residentKiB()

        var logger = Logger(label: "herald.bench")
        logger.logLevel = .error
        let router = Router(
            configuration: RouterConfiguration(
                store: store, transports: InstantTransport(), logger: logger, environment: [:]))
        await router.install([
            TenantConfiguration(
                id: tenant, teamID: "BENCHTEAM1",
                auth: .token(TokenAuthConfiguration(keyID: "BENCHKEY01", privateKey: Secret(bytes: [1], origin: "bench"))),
                topics: ["com.example.app"], endpoints: EndpointsConfiguration(), plugins: [], sourceFile: "bench.yaml")
        ])
        let runner = JobRunner(router: router, store: store, configuration: JobRunnerConfiguration(), logger: logger)
        clock = .now
        let target = min(finish, jobs)
        async let running: Void = runner.run()
        while try await store.jobs(tenant: tenant, states: [.finished], limit: target).count < target {
            try await Task.sleep(for: .milliseconds(20))
        }
        let runSeconds = Self.seconds(since: clock)
        runner.stop()
        await running
        await router.shutdown()
        let statistics = runner.statistics
        print("bench-jobs: \(jobs) unfinished batches of \(items) items, \(payloadBytes)-byte payload; ran until \(target) finished")
        print(String(format: "  stored in %.1f s; ran %.1f s (%.0f items/s)", storeSeconds, runSeconds, Double(target * items) / max(runSeconds, 0.001)))
        print("  RSS before the runner: \(rssBefore / 1024) MiB; peak RSS (VmHWM): \(Self.peakResidentKiB() / 1024) MiB")
        print(
            "  runner peaks: \(statistics.peakActiveJobs) jobs, \(statistics.peakClaimedItemsHeld) claimed items held, "
                + "\(statistics.peakSendTasks) send tasks, \(statistics.peakItemsInFlight) sends in flight")
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    static func residentKiB() -> Int { statusField("VmRSS:") }
    static func peakResidentKiB() -> Int { statusField("VmHWM:") }

    /// A `kB` field of /proc/self/status (0 where there is none).
    static func statusField(_ name: String) -> Int {
        // /proc files report size 0: read to the end rather than by the size.
        guard let handle = FileHandle(forReadingAtPath: "/proc/self/status") else { return 0 }
        defer { try? handle.close() }
        let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix(name) {
            return Int(line.dropFirst(name.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "") ?? 0
        }
        return 0
    }
}
