import APNsSandbox
import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The real `herald serve` binary, killed with SIGKILL in the middle of a batch and started
/// again: the job completes, items with a recorded answer are never sent again, and the only
/// notifications that reach APNs twice are ones whose answer was not yet recorded at the kill
/// (at most the job concurrency plus one commit group), resent with their same apns-id.
///
/// CI sends 1,500 tokens; `HERALD_CRASH_RESUME_TOKENS=100000` runs the full-size check, and
/// `HERALD_CRASH_RESUME_BINARY=.build/release/herald` runs the child from the release build.
@Suite("Durability: kill -9 and resume")
struct CrashResumeTests {
    /// `herald` next to the test bundle (`swift build --build-tests` builds it), or in `.build/debug`.
    static let heraldBinary: String? = {
        var candidates: [String] = []
        if let executable = Bundle.main.executablePath {
            candidates.append(URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("herald").path)
        }
        candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("herald").path)
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(root.appendingPathComponent(".build/debug/herald").path)
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    static let concurrency = 16

    /// Device tokens in the batch: `HERALD_CRASH_RESUME_TOKENS` (100 to 1,000,000), else 1,500.
    static let total = FullSizeRun.count("HERALD_CRASH_RESUME_TOKENS", standard: 1_500, range: 100...1_000_000)
    /// The `herald` binary the child runs: `HERALD_CRASH_RESUME_BINARY`, else the debug build
    /// next to the tests.
    static let binary = FullSizeRun.binary("HERALD_CRASH_RESUME_BINARY")

    @Test(.enabled(if: binary != nil, "the herald executable is not built (swift build --product herald)"))
    func aBatchSurvivesKill9() async throws {
        let binary = try #require(Self.binary)
        let total = Self.total
        // Until the kill, each answer is held long enough that the batch takes at least 9.4 s
        // with 16 in flight (1,500 tokens: 100 ms), so the kill (after 4/15 of the outcomes)
        // lands mid-batch even when the 202 or a poll takes seconds on a loaded machine (at 4 ms
        // a small batch can finish between two polls, and a 202 can take seconds on a loaded CI
        // machine). After it, 40 ms for 1,500 tokens, never under 4 ms.
        let heldUntilKill = max(0.004, 150 / Double(total))
        let killAfter = total * 4 / 15
        let world = try await TestWorld.make(faults: SandboxFaults(addedLatency: heldUntilKill))
        let acme = world.tenant("acme")
        try ChildServer.writeJobsConfig(in: world.directory, concurrency: Self.concurrency)

        // First run: accept the batch, let part of it go out, then SIGKILL.
        var child = try await ChildServer.start(binary: binary, directory: world.directory, run: 1)
        defer { child.killIfRunning() }
        let client = APIClient(port: child.port)
        let tokens = (0..<total).map { "\"\(Tokens.make(0x91, $0))\"" }.joined(separator: ",")
        let accepted = try await client.request(
            .post, "/v1/notifications/batch", key: acme.apiKey,
            json: #"{"job_id": "crash", "notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}, "device_tokens": [\#(tokens)]}"#)
        #expect(accepted.status == 202, "\(accepted.text)")
        var doneBeforeKill = 0
        while doneBeforeKill < killAfter {
            let job = try await client.request(.get, "/v1/jobs/crash", key: acme.apiKey)
            let counts = job.json["counts"] as? [String: Int] ?? [:]
            doneBeforeKill = (counts["sent"] ?? 0) + (counts["failed"] ?? 0)
            try await Task.sleep(for: .milliseconds(25))
        }
        child.kill9()
        world.sandbox.setFaults(SandboxFaults(addedLatency: max(0.004, 60 / Double(total))))

        // What the store holds at the moment of the crash.
        let tenant = try TenantID("acme")
        let jobID = try JobID("crash")
        let store = try SQLitePushStore(path: world.storagePath)
        let atCrash = try await store.items(tenant: tenant, job: jobID, fromIndex: 0, limit: total)
        #expect(atCrash.count == total, "every item was stored before the 202")
        let recordedAtCrash = Set(atCrash.filter { $0.state != .pending }.compactMap { $0.notification.id?.rawValue })
        #expect(recordedAtCrash.count >= doneBeforeKill)
        #expect(recordedAtCrash.count < total, "the kill came before the job finished")
        let requestsAtCrash = world.sandbox.requests.count

        // Second run: the runner resumes the job.
        child = try await ChildServer.start(binary: binary, directory: world.directory, run: 2)
        let job = try await APIClient(port: child.port).waitForJob("crash", key: acme.apiKey)
        #expect(child.terminate() == 0, "a graceful shutdown exits 0")
        #expect((job["counts"] as? [String: Int])?["sent"] == total)
        #expect(world.sandbox.requests.count > requestsAtCrash)

        let items = try await store.items(tenant: tenant, job: jobID, fromIndex: 0, limit: total)
        let idOfToken = Dictionary(uniqueKeysWithValues: items.map { ($0.notification.deviceToken?.hex, $0.notification.id?.rawValue ?? "") })
        let requests = world.sandbox.requests
        let answered = Dictionary(grouping: requests.filter(\.processed), by: \.apnsID)
        // Every item was answered, under the apns-id stored with it.
        #expect(Set(answered.keys) == Set(idOfToken.values))
        #expect(requests.allSatisfy { idOfToken[$0.deviceToken ?? ""] == $0.apnsID })
        // Items recorded before the kill were never sent again.
        let sends = Dictionary(grouping: requests, by: \.apnsID).mapValues(\.count)
        for id in recordedAtCrash {
            #expect(sends[id] == 1, "\(id) was sent \(sends[id] ?? 0) times")
        }
        // The ones sent twice were sent without a durable outcome at the kill: on the wire (at
        // most the concurrency) or in the commit group not yet written.
        let twice = answered.filter { $0.value.count > 1 }
        let bound = Self.concurrency + JobRunnerConfiguration().commitGroup
        #expect(twice.keys.allSatisfy { !recordedAtCrash.contains($0) })
        #expect(twice.count <= bound)
        print(
            "kill and resume: \(total) tokens, killed with \(recordedAtCrash.count) outcomes recorded, "
                + "\(answered.count) devices answered, \(twice.count) twice (bound \(bound)), \(requests.count) requests at the sandbox, "
                + "binary \(binary)")
        await world.close()
    }
}

/// Child processes started by this test process and not yet stopped.
private let leftovers = Mutex<Set<Int32>>([])

/// `herald serve --config DIR/config/herald.yaml` as a child process; its output goes to a file.
struct ChildServer {
    let process: ChildProcess
    let port: Int

    static func start(
        binary: String, directory: String, run: Int, environment extra: [String: String] = [:]
    ) async throws -> ChildServer {
        let output = directory + "/serve-\(run).log"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        defer { try? handle.close() }
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "HERALD_ADMIN_TOKEN")
        environment.merge(extra) { _, new in new }
        let process = try ChildProcess.spawn(
            binary, arguments: ["serve", "--config", directory + "/config/herald.yaml"], environment: environment,
            directory: directory, standardOutput: .descriptor(handle.fileDescriptor),
            standardError: .descriptor(handle.fileDescriptor))
        leftovers.withLock { _ = $0.insert(process.pid) }
        _ = Self.killLeftoversAtExit
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Herald API listening on http://127.0.0.1:") }),
                let port = Int(line.split(separator: ":").last ?? "")
            {
                return ChildServer(process: process, port: port)
            }
            guard process.isRunning else { throw HarnessError("herald serve exited: \(text)") }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.signal(SIGTERM)
        throw HarnessError("herald serve did not start listening")
    }

    /// `DIR/config/herald.yaml` for a child on the SQLite store in DIR, sending a job's items
    /// `concurrency` at a time in claims of 200.
    static func writeJobsConfig(in directory: String, concurrency: Int) throws {
        try """
            tenants_dir: tenants
            storage_path: data/herald.sqlite
            listen: {host: 127.0.0.1, port: 0}
            log_level: error
            jobs: {concurrency_per_tenant: \(concurrency), claim_size: 200}

            """.write(toFile: directory + "/config/herald.yaml", atomically: true, encoding: .utf8)
    }

    func kill9() {
        process.signal(SIGKILL)
        process.waitUntilExit()
        leftovers.withLock { _ = $0.remove(process.pid) }
    }

    /// For `defer`: a test that failed half-way leaves no server running (SIGKILL if it still is).
    func killIfRunning() {
        if process.isRunning { kill9() }
    }

    /// Installed once: children of this test process still running when it exits are killed.
    private static let killLeftoversAtExit: Void = {
        atexit {
            for pid in leftovers.withLock({ $0 }) { kill(pid, SIGKILL) }
        }
    }()

    /// SIGTERM, then waits: returns the exit status.
    func terminate() -> Int32 {
        process.signal(SIGTERM)
        let status = process.waitUntilExit()
        leftovers.withLock { _ = $0.remove(process.pid) }
        return status
    }
}
