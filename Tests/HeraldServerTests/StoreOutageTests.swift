import APNsSandbox
import Foundation
import HeraldConfig
import HeraldCore
import HeraldServer
import HeraldTestSupport
import InMemoryLogging
import Logging
import Synchronization
import Testing

/// The API while its PostgreSQL store does not answer: the server runs on a store reached through
/// a link that goes silent (``SilentLinkProxy``). Needs `HERALD_TEST_POSTGRES_URL`, like
/// ``ClusterTests``.
@Suite("The API while the store does not answer")
struct StoreOutageTests {
    @Test(
        "a batch answers 503 store_unavailable with Retry-After and the job_id it may be stored under; a job read answers 503; once the store answers, a repeat with that job_id stores the job once and every device gets it once"
    )
    func batchWhileTheStoreIsSilent() async throws {
        let tokens = (0..<30).map { Tokens.make(0x5e, $0) }
        // No job_id: the server makes one, and has to say which.
        let body = """
            {"notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
             "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
            """
        // The store's call timeout runs on a stepped clock that keeps real time, but is moved past
        // every waiting call's bound while the link is silent (``passTheCallTimeouts(_:proxy:)``):
        // the calls made then fail at once, not after 10 s.
        let clock = SteppedPushClock()
        try await Self.withServerBehindProxy(callTimeout: 10, rescan: .milliseconds(200), storeClock: clock) { world, live, proxy in
            let acme = world.tenant("acme")
            let client = live.client()
            proxy.silent = true
            let timer = Task { await Self.passTheCallTimeouts(clock, proxy: proxy) }
            defer { timer.cancel() }
            let refused = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(refused.status == 503, "\(refused.text)")
            #expect(refused.errorCode == "store_unavailable", "\(refused.text)")
            #expect(refused.headers[.retryAfter] == "5")
            let jobID = try #require(refused.error["job_id"] as? String, "\(refused.text)")
            #expect((refused.error["message"] as? String)?.contains(jobID) == true, "\(refused.text)")

            let read = try await client.request(.get, "/v1/jobs/\(jobID)", key: acme.apiKey)
            #expect(read.status == 503, "\(read.text)")
            #expect(read.errorCode == "store_unavailable", "\(read.text)")
            // Nothing of the store's detail (the setting, PostgreSQL's words) in the answer.
            #expect(!read.text.contains("call_timeout") && !read.text.contains("PostgreSQL"), "\(read.text)")
            // The operator sees it: the calls that waited out call_timeout are counted.
            let metrics = try await client.request(.get, "/metrics", key: "test-admin-token").text
            #expect(
                PrometheusText.value(metrics, #"herald_store_calls_unanswered_total{reason="timed_out"}"#) ?? 0 >= 2,
                "\(metrics.split(separator: "\n").filter { $0.contains("herald_store") })")

            // The store answers again, on new connections.
            proxy.silent = false
            proxy.cutConnections()
            var repeated: APIClient.Reply? = nil
            try await ClusterTests.eventually("the store answers a repeat of the batch", timeout: .seconds(90)) {
                let json = body.replacingOccurrences(of: "{\"notification\"", with: "{\"job_id\": \"\(jobID)\", \"notification\"")
                let reply = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: json)
                guard reply.status != 503 else { return false }
                repeated = reply
                return true
            }
            let answer = try #require(repeated)
            // Made by this repeat (202), or by an earlier one that committed after its own 503
            // (200, existing: what the id is for); either way once, under the id.
            #expect(answer.status == 202 || answer.status == 200, "\(answer.text)")
            #expect(answer.json["job_id"] as? String == jobID)
            #expect(answer.json["items"] as? Int == tokens.count, "\(answer.text)")
            let job = try await client.waitForJob(jobID, key: acme.apiKey)
            #expect((job["counts"] as? [String: Any])?["sent"] as? Int == tokens.count, "\(job)")
            let delivered = world.sandbox.requests.filter(\.processed)
            #expect(delivered.count == tokens.count)
            #expect(Set(delivered.compactMap(\.deviceToken)) == Set(tokens))
        }
    }

    /// Nothing of a single send needs the store: its lookups (the key's shared provider token, the
    /// `feedback` plugin's invalid-token check) give up after 2 s and are then skipped, so a send
    /// does not wait for `storage.postgres.call_timeout` (here 45 s: a send waiting for it twice
    /// would outlast the test client's 60 s).
    @Test("single sends go out while the store does not answer, without waiting for the store's call timeout")
    func singleSendsWhileTheStoreIsSilent() async throws {
        let tokens = (0..<3).map { Tokens.make(0x5f, $0) }
        try await Self.withServerBehindProxy(callTimeout: 45, rescan: .seconds(1)) { world, live, proxy in
            let acme = world.tenant("acme")
            proxy.silent = true
            for token in tokens {
                let reply = try await live.client().request(
                    .post, "/v1/notifications", key: acme.apiKey,
                    json: #"{"device_token": "\#(token)", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#)
                #expect(reply.status == 200, "\(reply.text)")
                #expect(reply.json["success"] as? Bool == true, "\(reply.text)")
            }
            // On PostgreSQL the send path's reads are bounded (SendPathLookupsTests: how).
            #expect(live.server.router.configuration.sendPathLookups != nil)
            // The operator sees the lookups that gave up and those skipped since.
            let metrics = try await live.client().request(.get, "/metrics", key: "test-admin-token").text
            let lines = "\(metrics.split(separator: "\n").filter { $0.contains("herald_store") })"
            #expect(PrometheusText.value(metrics, "herald_store_lookups_skipped_total") ?? 0 >= 1, "\(lines)")
            #expect(PrometheusText.value(metrics, "herald_store_lookups_skipping") != nil, "\(lines)")
            let delivered = world.sandbox.requests.filter(\.processed)
            #expect(Set(delivered.compactMap(\.deviceToken)) == Set(tokens))
            proxy.silent = false
            proxy.cutConnections()
        }
    }

    /// A shutdown must end in time for the orchestrator even while a store call hangs: after
    /// `shutdown_timeout` what still runs is cancelled. The sends on the wire whose outcomes the
    /// store never took stay leased to the instance, and its next start sends them: none lost.
    @Test(
        "a graceful shutdown while the store does not answer ends after shutdown_timeout, not the store's call timeout; the next start finishes the job, every device served"
    )
    func shutdownWhileTheStoreIsSilent() async throws {
        let tokens = (0..<1_000).map { Tokens.make(0x60, $0) }
        let body = """
            {"job_id": "shutdown-1", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
             "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
            """
        let direct = try ClusterTests.postgresSettings(schema: ClusterTests.freshSchema())
        let proxy = try await SilentLinkProxy.start(targetHost: direct.host, targetPort: direct.port)
        var proxied = direct
        proxied.host = "127.0.0.1"
        proxied.port = proxy.port
        proxied.callTimeout = 240
        var faults = SandboxFaults()
        // 16 on the wire at once, 50 ms each: at most ~320 a second, so the job (~3 s) is still
        // under way when the store goes silent, even if the test's polling is slow under load.
        faults.addedLatency = 0.05
        do {
            let world = try await TestWorld.make(faults: faults)
            let acme = world.tenant("acme")
            try await ClusterTests.closing(world) {
                try await ClusterTests.withSchemaStore(direct) { _ in
                    var options = ClusterTests.options(world, settings: proxied, rescan: .milliseconds(200))
                    options.configuration.shutdownTimeout = 2
                    let logs = InMemoryLogHandler()
                    var logger = Logger(label: "test.herald", factory: { _ in logs })
                    logger.logLevel = .warning
                    options.logger = logger
                    let silentSince = Mutex<PushInstant?>(nil)
                    try await LiveServer.with(options) { live in
                        let accepted = try await live.client().request(
                            .post, "/v1/notifications/batch", key: acme.apiKey, json: body)
                        #expect(accepted.status == 202, "\(accepted.text)")
                        try await ClusterTests.eventually("the job is under way") {
                            world.sandbox.requests.filter(\.processed).count >= 40
                        }
                        proxy.silent = true
                        silentSince.withLock { $0 = PushInstant.now }
                    }
                    // The store's calls wait up to 240 s; the shutdown waits 2 s, then cancels them (the
                    // bound leaves room for a loaded CI machine, where the whole test can take close to a
                    // minute).
                    let since = try #require(silentSince.withLock { $0 })
                    let took = PushInstant.now - since
                    #expect(took < .seconds(120), "the shutdown took \(took)")
                    #expect(
                        logs.entries.contains { $0.level == .warning && "\($0.message)".contains("outlasted shutdown_timeout") },
                        "the forced end of the shutdown is logged")
                    // Once: the calls it cancelled are not each logged as errors.
                    let cancelled = logs.entries.filter { $0.level >= .error && "\($0.metadata)".contains("CancellationError") }
                    #expect(cancelled.isEmpty, "\(cancelled.map { "\($0.level) \($0.message)" })")
                    let sentBefore = world.sandbox.requests.filter(\.processed).count
                    #expect(sentBefore < tokens.count, "the job ended before the store went silent: nothing to check")

                    // The next start (the same claimant, the store answering) sends the rest, once
                    // it takes the stopped instance for dead: that one could not say it stopped
                    // (its store was silent), and no other instance runs beside this one, so a
                    // short heartbeat timeout risks nothing here.
                    proxy.silent = false
                    proxy.cutConnections()
                    var next = ClusterTests.options(world, settings: direct, rescan: .milliseconds(200))
                    next.heartbeat = .init(interval: .milliseconds(200), timeout: .seconds(2))
                    try await LiveServer.with(next) {
                        live in
                        let job = try await live.client().waitForJob("shutdown-1", key: acme.apiKey)
                        #expect(job["state"] as? String == "finished", "\(job)")
                        #expect((job["counts"] as? [String: Any])?["sent"] as? Int == tokens.count, "\(job)")
                    }
                    let delivered = world.sandbox.requests.filter(\.processed).compactMap(\.deviceToken)
                    #expect(Set(delivered) == Set(tokens), "every device got the notification")
                    // Sent twice at most: the items sent whose outcome the store never took (a
                    // job's bound: its 16 permits and one commit group of 64, `OutcomeGroups`).
                    #expect(delivered.count - tokens.count <= 16 + 64, "\(delivered.count - tokens.count) sent twice")
                }
            }
        } catch {
            await proxy.stop()
            throw error
        }
        await proxy.stop()
    }

    /// One server (in this process) on a fresh PostgreSQL schema reached through a
    /// ``SilentLinkProxy``, with `call_timeout` in seconds; everything is stopped afterwards.
    private static func withServerBehindProxy(
        callTimeout: Double, rescan: Duration, storeClock: (any PushClock)? = nil,
        _ body: @Sendable (TestWorld, LiveServer, SilentLinkProxy) async throws -> Void
    ) async throws {
        let direct = try ClusterTests.postgresSettings(schema: ClusterTests.freshSchema())
        let proxy = try await SilentLinkProxy.start(targetHost: direct.host, targetPort: direct.port)
        var settings = direct
        settings.host = "127.0.0.1"
        settings.port = proxy.port
        settings.callTimeout = callTimeout
        do {
            let world = try await TestWorld.make()
            var options = ClusterTests.options(world, settings: settings, rescan: rescan)
            options.storeClock = storeClock
            try await ClusterTests.closing(world) {
                try await ClusterTests.withSchemaStore(direct) { _ in
                    try await LiveServer.with(options) { live in try await body(world, live, proxy) }
                }
            }
        } catch {
            await proxy.stop()
            throw error
        }
        await proxy.stop()
    }

    /// Until cancelled: `clock` moves with real time, and while `proxy` is silent it also moves
    /// past the bound of every store call waiting on it (no answer can come), so those fail at
    /// once rather than after the call timeout.
    private static func passTheCallTimeouts(_ clock: SteppedPushClock, proxy: SilentLinkProxy) async {
        var last = PushInstant.now
        while !Task.isCancelled {
            let now = PushInstant.now
            clock.advance(by: last.duration(to: now))
            last = now
            if proxy.silent, let latest = clock.deadlines.max() { clock.advance(to: latest) }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}
