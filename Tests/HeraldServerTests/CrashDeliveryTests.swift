import APNsSandbox
import Foundation
import Herald
import HeraldCore
import HeraldStore
import Testing

/// `herald serve` (the built binary) killed with SIGKILL in the middle of a batch while the
/// sandbox answers 20% of requests 503, then started again on the same store. What was on
/// the wire at the kill is read from the store (items marked on the wire with no outcome):
/// under at-least-once every device gets the notification and only those can get it twice;
/// under at-most-once no device gets it twice and exactly those are reported `unknown`.
@Suite("Durability: kill -9 under 20% 503s", .serialized)
struct CrashDeliveryTests {
    static let concurrency = 16
    /// Debug build on a loaded 2-core machine: enough items that the kill lands mid-batch.
    static let total = 1200

    struct Crash {
        var world: TestWorld
        var apiKey: String
        /// Items on the wire at the kill: marked, no outcome recorded (at-most-once marks each
        /// item before its send; at-least-once, with the store to itself, does not).
        var onWireAtKill: Set<String>
        /// Items claimed at the kill with no outcome recorded: those in flight are among them.
        var claimedAtKill: Set<String>
        /// When the second `herald serve` was started.
        var restartedAt: Date
        /// The sandbox connections that had carried a request when the server was restarted:
        /// those of the killed process (it may still read bytes that process wrote before the kill).
        var connectionsOfKilled: Set<Int>
        /// Every item had its outcome when the kill came (the test's polling was held up longer
        /// than the whole batch took): such a crash tests nothing.
        var finishedBeforeKill: Bool
        var job: [String: Any]
        var items: [JobItem]
    }

    /// Starts serve, posts the batch, kills it once part of the batch has an outcome, reads the
    /// store, restarts serve on it and waits for the job to finish.
    func crashAndResume(guarantee: String, seed: UInt64) async throws -> Crash {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let tenant = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"],
            extraYAML: """
                delivery:
                  guarantee: \(guarantee)
                  initial_backoff: 20ms
                  max_backoff: 200ms
                """)
        // Until the kill each answer is held 160 ms (16 in flight: at most 100 answers a second,
        // so the batch lasts over 12 s and the kill after a fifth of it lands mid-batch even
        // when the 202 or a poll takes seconds on a loaded machine); after it, 20 ms.
        let world = try await TestWorld.make(
            tenants: [tenant], devices: [],
            faults: SandboxFaults(seed: seed, fraction503: 0.2, addedLatency: 0.16),
            recordPayloads: false)
        try ChildServer.writeJobsConfig(in: world.directory, concurrency: Self.concurrency)

        var child = try await ChildServer.start(binary: binary, directory: world.directory, run: 1)
        defer { child.killIfRunning() }
        let client = APIClient(port: child.port)
        let tokens = (0..<Self.total).map { "\"\(Tokens.make(0x92, $0))\"" }.joined(separator: ",")
        let accepted = try await client.request(
            .post, "/v1/notifications/batch", key: tenant.apiKey,
            json: #"{"job_id": "crash", "notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}, "device_tokens": [\#(tokens)]}"#)
        #expect(accepted.status == 202, "\(accepted.text)")
        var done = 0
        let deadline = PushInstant.now.advanced(by: .seconds(120))
        while done < Self.total / 5, PushInstant.now < deadline {
            let job = try await client.request(.get, "/v1/jobs/crash", key: tenant.apiKey)
            let counts = job.json["counts"] as? [String: Int] ?? [:]
            done = (counts["sent"] ?? 0) + (counts["failed"] ?? 0) + (counts["unknown"] ?? 0)
            try await Task.sleep(for: .milliseconds(25))
        }
        child.kill9()
        world.sandbox.setFaults(SandboxFaults(seed: seed, fraction503: 0.2, addedLatency: 0.02))

        let store = try SQLitePushStore(path: world.storagePath)
        let tenantID = try TenantID("acme")
        let jobID = try JobID("crash")
        let atKill = try await store.items(tenant: tenantID, job: jobID, fromIndex: 0, limit: Self.total)
        #expect(atKill.count == Self.total)
        let finishedBeforeKill = !atKill.contains { !$0.state.isFinal }
        let onWire = Set(
            atKill.filter { !$0.state.isFinal && $0.onWireAt != nil }.compactMap { $0.notification.id?.rawValue })
        let claimed = Set(
            atKill.filter { !$0.state.isFinal && $0.claimant != nil }.compactMap { $0.notification.id?.rawValue })
        let restartedAt = Date()
        let connectionsOfKilled = Set(world.sandbox.requests.map(\.connectionID))
        child = try await ChildServer.start(binary: binary, directory: world.directory, run: 2)
        let job = try await APIClient(port: child.port).waitForJob("crash", key: tenant.apiKey, timeout: .seconds(180))
        #expect(child.terminate() == 0, "a graceful shutdown exits 0")
        let items = try await store.items(tenant: tenantID, job: jobID, fromIndex: 0, limit: Self.total)
        return Crash(
            world: world, apiKey: tenant.apiKey, onWireAtKill: onWire, claimedAtKill: claimed, restartedAt: restartedAt,
            connectionsOfKilled: connectionsOfKilled, finishedBeforeKill: finishedBeforeKill, job: job,
            items: items)
    }

    /// ``crashAndResume(guarantee:seed:)`` until `exercised` holds of the crash, three times at
    /// most. The kill can land in the short moment between two claims when no item is leased
    /// (the runner waits for every outcome after a claim that held due retries, and 503s make
    /// most claims hold some), or, on a machine loaded by the whole suite, after the last outcome
    /// (this task's polling held up for longer than the batch took): such a crash tests nothing,
    /// and the next seed is tried.
    func crashWhileSending(guarantee: String, seed: UInt64, _ exercised: (Crash) -> Bool) async throws -> Crash {
        var crash = try await crashAndResume(guarantee: guarantee, seed: seed)
        for attempt in 1...2 where crash.finishedBeforeKill || !exercised(crash) {
            await crash.world.close()
            crash = try await crashAndResume(guarantee: guarantee, seed: seed + 100 * UInt64(attempt))
        }
        #expect(!crash.finishedBeforeKill, "the kill came before the job finished")
        return crash
    }

    @Test(
        "at-least-once: every device gets it after the restart; only items in flight at the kill twice, with their apns-id",
        .enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built"))
    func atLeastOnce() async throws {
        let crash = try await crashWhileSending(guarantee: "at-least-once", seed: 12) { !$0.claimedAtKill.isEmpty }
        let counts = crash.job["counts"] as? [String: Int] ?? [:]
        #expect(counts["sent"] == Self.total && counts["failed"] == 0 && counts["unknown"] == 0, "\(crash.job)")
        // The kill found a claimed chunk with sends in flight (16 send tasks at full speed): the
        // test is not empty. At-least-once sends without wire marks (the store is this process's
        // alone): an item without an outcome is sent again whether or not it was on the wire.
        #expect(!crash.claimedAtKill.isEmpty)
        #expect(crash.onWireAtKill.isEmpty, "at-least-once writes no wire mark")

        let requests = crash.world.sandbox.requests
        let idOfToken = Dictionary(
            uniqueKeysWithValues: crash.items.map { ($0.notification.deviceToken?.hex, $0.notification.id?.rawValue ?? "") })
        // Every request carried the apns-id stored with its item, before and after the restart.
        #expect(requests.allSatisfy { idOfToken[$0.deviceToken ?? ""] == $0.apnsID })
        let delivered = Dictionary(grouping: requests.filter(\.delivered), by: \.apnsID)
        #expect(Set(delivered.keys) == Set(idOfToken.values), "every device has at least one 200")
        let twice = Set(delivered.filter { $0.value.count > 1 }.keys)
        #expect(twice.isSubset(of: crash.claimedAtKill), "only items claimed without an outcome at the kill are delivered twice")
        // The sends do not wait for their outcomes' writes: the items sent without a durable
        // outcome are those on the wire plus at most one commit group.
        let bound = Self.concurrency + JobRunnerConfiguration().commitGroup
        #expect(twice.count <= bound, "no more twice than the sends in flight at the kill and one commit group (\(bound))")
        // The faults were there: some requests were answered 503 and resent.
        #expect(requests.contains { $0.status == 503 })
        await crash.world.close()
    }

    @Test(
        "at-most-once: no device gets it twice; items on the wire at the kill are reported unknown and never sent again",
        .enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built"))
    func atMostOnce() async throws {
        let crash = try await crashWhileSending(guarantee: "at-most-once", seed: 13) { !$0.onWireAtKill.isEmpty }
        let counts = crash.job["counts"] as? [String: Int] ?? [:]
        #expect(!crash.onWireAtKill.isEmpty)
        #expect(counts["unknown"] == crash.onWireAtKill.count, "\(crash.job)")
        #expect(counts["sent"] == Self.total - crash.onWireAtKill.count && counts["failed"] == 0, "\(crash.job)")

        let unknown = Set(crash.items.filter { $0.state == .unknown }.compactMap { $0.notification.id?.rawValue })
        #expect(unknown == crash.onWireAtKill)
        for item in crash.items where item.state == .unknown {
            #expect(item.result?.reason == DeliveryReason.unknown)
            #expect(item.result?.message?.contains("at-most-once") == true)
        }
        let requests = crash.world.sandbox.requests
        let delivered = Dictionary(grouping: requests.filter(\.delivered), by: \.apnsID)
        #expect(delivered.values.allSatisfy { $0.count == 1 }, "no device twice")
        // Nothing on the wire at the kill was written again by the restarted server. (The
        // sandbox may read the killed process's last requests after the restart: a loaded
        // machine reads that connection late. Those come on the killed process's connections.)
        let afterRestart = requests.filter {
            $0.receivedAt > crash.restartedAt && !crash.connectionsOfKilled.contains($0.connectionID)
        }
        #expect(!afterRestart.isEmpty)
        #expect(!afterRestart.contains { crash.onWireAtKill.contains($0.apnsID) })
        // Every item sent has its one 200.
        let sent = Set(crash.items.filter { $0.state == .sent }.compactMap { $0.notification.id?.rawValue })
        #expect(sent.isSubset(of: Set(delivered.keys)))
        await crash.world.close()
    }
}
