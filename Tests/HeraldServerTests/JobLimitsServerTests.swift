import APNsSandbox
import Foundation
import HeraldCore
import HeraldServer
import HeraldStore
import Testing

/// Per-tenant job quotas at the API, and one `herald serve` per store.
@Suite("Server: job quotas, one process per store")
struct JobLimitsServerTests {
    static func tokens(_ seed: UInt8, _ count: Int) -> String {
        (0..<count).map { "\"\(Tokens.make(seed, $0))\"" }.joined(separator: ",")
    }

    static func batch(_ id: String, topic: String, tokens: String) -> String {
        #"{"job_id": "\#(id)", "notification": {"topic": "\#(topic)", "aps": {"alert": "x"}}, "device_tokens": [\#(tokens)]}"#
    }

    @Test("a server that stopped has given up its store's lock, even while its value lives on")
    func stoppedServerReleasesItsLock() async throws {
        let world = try await TestWorld.make()
        let server = try await LiveServer.with(world.options()) { live async throws in
            #expect(throws: StoreError.self, "the running server holds the lock") {
                try StoreLock(databasePath: world.storagePath)
            }
            return live.server
        }
        // Still referenced here (as a lingering task or channel may hold it): the lock is free
        // all the same, so a server started again in this process finds the store its own.
        let lock = try StoreLock(databasePath: world.storagePath)
        lock.release()
        _ = server
        await world.close()
    }

    @Test("a batch over the tenant's pending-items limit gets 429 quota_exceeded naming the limit; other tenants are unaffected")
    func quotaExceeded() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        let globex = world.tenant("globex")
        let options = world.options { $0.configuration.jobs.maxPendingItemsPerTenant = 5 }
        try await LiveServer.with(options) { live in
            let client = live.client()
            let refused = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey, json: Self.batch("big", topic: "com.acme.app", tokens: Self.tokens(0x21, 6)))
            #expect(refused.status == 429, "\(refused.text)")
            #expect(refused.errorCode == "quota_exceeded")
            #expect(refused.headers[.retryAfter] == "30")
            #expect((refused.error["message"] as? String)?.contains("jobs.max_pending_items_per_tenant allows 5") == true)
            let missing = try await client.request(.get, "/v1/jobs/big", key: acme.apiKey)
            #expect(missing.status == 404, "nothing was stored")

            let accepted = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey, json: Self.batch("small", topic: "com.acme.app", tokens: Self.tokens(0x22, 5)))
            #expect(accepted.status == 202, "\(accepted.text)")
            let other = try await client.request(
                .post, "/v1/notifications/batch", key: globex.apiKey,
                json: Self.batch("theirs", topic: "com.globex.app", tokens: Self.tokens(0x23, 5)))
            #expect(other.status == 202, "\(other.text)")
            _ = try await client.waitForJob("small", key: acme.apiKey)
            // Once the job finished, its items do not count.
            let next = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey, json: Self.batch("next", topic: "com.acme.app", tokens: Self.tokens(0x24, 5)))
            #expect(next.status == 202, "\(next.text)")
            _ = try await client.waitForJob("next", key: acme.apiKey)
        }
        await world.close()
    }

    @Test(
        "a second herald serve on the same store refuses to start, before sending anything; after the first exits one starts",
        .enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built (swift build --product herald)"))
    func secondProcessRefused() async throws {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try """
            tenants_dir: tenants
            storage_path: data/herald.sqlite
            listen: {host: 127.0.0.1, port: 0}
            log_level: error

            """.write(toFile: world.directory + "/config/herald.yaml", atomically: true, encoding: .utf8)
        let first = try await ChildServer.start(binary: binary, directory: world.directory, run: 1)
        defer { first.killIfRunning() }
        let accepted = try await APIClient(port: first.port).request(
            .post, "/v1/notifications/batch", key: acme.apiKey, json: Self.batch("one", topic: "com.acme.app", tokens: Self.tokens(0x31, 20)))
        #expect(accepted.status == 202, "\(accepted.text)")
        _ = try await APIClient(port: first.port).waitForJob("one", key: acme.apiKey)
        let requestsBefore = world.sandbox.requests.count

        do {
            let second = try await ChildServer.start(binary: binary, directory: world.directory, run: 2)
            _ = second.terminate()
            Issue.record("a second herald serve started on the same store")
        } catch let error as HarnessError {
            #expect(error.description.contains("in use by another herald process"), "\(error)")
            #expect(error.description.contains("herald.sqlite.lock"))
        }
        #expect(world.sandbox.requests.count == requestsBefore, "the refused process sent nothing")
        let health = try await APIClient(port: first.port).request(.get, "/healthz")
        #expect(health.status == 200, "the first server still serves")
        #expect(first.terminate() == 0)

        let third = try await ChildServer.start(binary: binary, directory: world.directory, run: 3)
        defer { third.killIfRunning() }
        #expect(third.terminate() == 0)
        await world.close()
    }
}
