import APNsSandbox
import Foundation
import HeraldConfig
import HeraldCore
import HeraldProcess
import HeraldServer
import HeraldStore
import HeraldTestSupport
import Hummingbird
import Logging
import Testing

@testable import HeraldPostgres

/// Several `herald serve` instances (in this process) on one PostgreSQL database: jobs reach an
/// idle instance through LISTEN/NOTIFY, a dead instance's leases are taken over, and
/// `/admin/instances` lists the live ones. Needs `HERALD_TEST_POSTGRES_URL` (skipped without it,
/// failed under CI), like the store contract's PostgreSQL cases.
@Suite("Cluster: several instances on PostgreSQL")
struct ClusterTests {
    static let urlVariable = "HERALD_TEST_POSTGRES_URL"

    /// `storage.postgres` for the test server, in a schema of its own.
    static func postgresSettings(schema: String) throws -> ServerConfiguration.PostgresSettings {
        guard let url = ProcessInfo.processInfo.environment[urlVariable], !url.isEmpty else {
            if ProcessInfo.processInfo.environment["CI"] != nil {
                Issue.record("\(urlVariable) is not set under CI: .ci/run must start scripts/postgres.sh")
            }
            try Test.cancel("PostgreSQL case skipped: \(urlVariable) is not set (eval \"$(scripts/postgres.sh start)\")")
        }
        let parsed = try PostgresPushStore.Configuration(url: url)
        var settings = ServerConfiguration.PostgresSettings(
            host: parsed.host, port: parsed.port, username: parsed.username, database: parsed.database)
        settings.password = parsed.password.map { Secret(bytes: Array($0.utf8), origin: "test") }
        settings.schema = schema
        // Two connections an instance: the suite runs several instances at once.
        settings.poolSize = 2
        return settings
    }

    static func freshSchema() -> String {
        "herald_cluster_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
    }

    /// Options of one instance on the shared schema: heartbeats every 200 ms, dead after 15 s.
    /// Generous: while the whole suite runs, a live instance's beat can be seconds late, and
    /// one taken for dead has its items sent again by the other (at-least-once), which the
    /// exactly-once checks here would count. The dead instance of the take-over test stopped
    /// beating a minute ago.
    static func options(_ world: TestWorld, settings: ServerConfiguration.PostgresSettings, rescan: Duration)
        -> HeraldProcessOptions
    {
        world.options { options in
            options.configuration.storage = .postgres(settings)
            options.jobs.exclusiveStore = false
            options.jobs.rescanInterval = rescan
            options.jobs.claimSize = 50
            options.jobs.concurrencyPerTenant = 16
            options.heartbeat = .init(interval: .milliseconds(200), timeout: .seconds(15))
        }
    }

    /// Opens the schema's store directly (as a third party), and drops the schema afterwards.
    static func withSchemaStore(_ settings: ServerConfiguration.PostgresSettings, _ body: (PostgresPushStore) async throws -> Void)
        async throws
    {
        let store = try await PostgresPushStore.open(
            PostgresPushStore.Configuration(
                host: settings.host, port: settings.port, username: settings.username, password: settings.password?.text,
                database: settings.database, schema: settings.schema, poolSize: 2),
            logger: Logger(label: "test.cluster"))
        do {
            try await body(store)
        } catch {
            try? await store.dropSchemaForTests()
            await store.close()
            throw error
        }
        try? await store.dropSchemaForTests()
        await store.close()
    }

    /// Waits (generously; never a timing assertion) until `condition` holds.
    static func eventually(_ what: String, timeout: Duration = .seconds(60), _ condition: () async throws -> Bool)
        async throws
    {
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: timeout)
        while try await !condition() {
            guard clock.now < end else { throw HarnessError("timed out waiting for: \(what)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    @Test("a job posted to one instance reaches an idle one through NOTIFY (no polling); /admin/instances lists both")
    func notifyReachesIdleInstance() async throws {
        let settings = try Self.postgresSettings(schema: Self.freshSchema())
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        // Neither instance polls for jobs within the test: only a notification can start the job on B.
        let options = Self.options(world, settings: settings, rescan: .seconds(3600))
        try await Self.withTwoInstances(world, settings: settings, options: options) { a, b in
            #expect(a.server.instanceID != b.server.instanceID)
            #expect(b.server.runner.statistics.peakActiveJobs == 0)
            let tokens = (0..<400).map { Tokens.make(0x42, $0) }
            let body = """
                {"job_id": "cluster-1", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await a.client().request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            try await Self.eventually("instance B starts the job posted to A") {
                b.server.runner.statistics.peakActiveJobs >= 1
            }
            // Read through B: the shared store has A's job and its final counts.
            let job = try await b.client().waitForJob("cluster-1", key: acme.apiKey)
            let counts = job["counts"] as? [String: Any]
            #expect(counts?["sent"] as? Int == 400, "\(job)")
            let ids = Set(world.sandbox.requests.filter(\.processed).map(\.apnsID))
            #expect(ids.count == 400)

            let reply = try await b.client().request(.get, "/admin/instances", key: "test-admin-token")
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["instance"] as? String == b.server.instanceID)
            let listed = (reply.json["instances"] as? [[String: Any]]) ?? []
            #expect(Set(listed.compactMap { $0["id"] as? String }) == [a.server.instanceID, b.server.instanceID])
            #expect(listed.allSatisfy { ($0["pid"] as? Int) == Int(ProcessInfo.processInfo.processIdentifier) })
            #expect(listed.filter { $0["self"] as? Bool == true }.compactMap { $0["id"] as? String } == [b.server.instanceID])
            #expect(listed.allSatisfy { ($0["claimant"] as? String)?.hasSuffix("/" + ($0["id"] as? String ?? "?")) == true })
        }
    }

    @Test("two instances: usage adds up to the job's report; an admin token revoked through one stops on the other at once")
    func usageAndAdminTokensAreShared() async throws {
        let settings = try Self.postgresSettings(schema: Self.freshSchema())
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        var options = Self.options(world, settings: settings, rescan: .seconds(3600))
        options.usageFlushInterval = .milliseconds(50)
        let admin = "test-admin-token"
        try await Self.withTwoInstances(world, settings: settings, options: options) { a, b in
            let total = 2_000
            let tokens = (0..<total).map { Tokens.make(0x46, $0) }
            let body = """
                {"job_id": "cluster-usage", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            #expect(try await a.client().request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body).status == 202)
            let job = try await b.client().waitForJob("cluster-usage", key: acme.apiKey)
            let counts = try #require(job["counts"] as? [String: Int])
            // Read through B what both instances counted, once both have flushed their counts.
            let usage = try await UsageAPITests.usage(
                b.client(), "/admin/usage?tenant=acme", key: admin, accepted: total,
                also: ["batch_items": total, "delivered": counts["sent"] ?? -1, "failed": counts["failed"] ?? -1])
            let totals = try #require(usage["totals"] as? [String: Any])
            #expect(totals["batch_items"] as? Int == total)
            #expect(totals["delivered"] as? Int == counts["sent"])
            #expect(totals["failed"] as? Int == counts["failed"])

            // An account made through A works on B; revoked through A, it stops on B at once.
            let token = try await AdminAccountsTests.account("ops", .operator, client: a.client(), admin: admin)
            #expect(try await b.client().request(.get, "/admin/me", key: token).status == 200)
            let listed = try await a.client().request(.get, "/admin/accounts/ops/tokens", key: admin)
            let id = try #require((listed.json["tokens"] as? [[String: Any]])?.first?["id"] as? String)
            #expect(try await a.client().request(.delete, "/admin/accounts/ops/tokens/\(id)", key: admin).status == 200)
            #expect(try await b.client().request(.get, "/admin/me", key: token).status == 401)
            let audit = try await b.client().request(.get, "/admin/audit?action=token.revoke", key: admin)
            #expect((audit.json["entries"] as? [[String: Any]])?.count == 1, "\(audit.text)")
        }
    }

    @Test("a job cancelled through one instance stops on every instance; every item is sent, failed or cancelled")
    func cancelThroughOneInstanceStopsBoth() async throws {
        let settings = try Self.postgresSettings(schema: Self.freshSchema())
        // Each answer held 40 ms: two instances at 16 sends each take ~10 s for the 8,000 tokens.
        let world = try await TestWorld.make(faults: SandboxFaults(addedLatency: 0.04))
        let acme = world.tenant("acme")
        let tenant = try TenantID(acme.id)
        let total = 8_000
        let options = Self.options(world, settings: settings, rescan: .seconds(3600))
        try await Self.withTwoInstances(world, settings: settings, options: options) { a, b in
            let tokens = (0..<total).map { Tokens.make(0x43, $0) }
            let body = """
                {"job_id": "cluster-cancel", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await a.client().request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            // Both instances send it.
            try await Self.eventually("both instances send the job") {
                a.server.runner.permitsHeld(by: tenant) > 0 && b.server.runner.permitsHeld(by: tenant) > 0
            }
            let cancelled = try await a.client().request(.post, "/v1/jobs/cluster-cancel/cancel", key: acme.apiKey)
            let requestsAtCancel = world.sandbox.requests.count
            #expect(cancelled.status == 200 && cancelled.json["state"] as? String == "cancelled", "\(cancelled.text)")
            // B heard of it (NOTIFY) or found it at its next claim or lease check: both stop.
            try await Self.eventually("both instances stop sending") {
                a.server.runner.permitsHeld(by: tenant) == 0 && b.server.runner.permitsHeld(by: tenant) == 0
            }
            let requestsAfter = world.sandbox.requests.count
            // What was on the wire, and what each driving task had started before it stopped.
            #expect(requestsAfter - requestsAtCancel <= 4 * 16, "\(requestsAtCancel) → \(requestsAfter)")
            #expect(requestsAfter < total / 2, "the cancel came early: most of the job is never sent")
            // Once the job's runs have returned on both, none of its senders is left to send.
            let job = try JobID("cluster-cancel")
            try await Self.eventually("both instances' runs of the job end") {
                !a.server.runner.isRunning(job, of: tenant) && !b.server.runner.isRunning(job, of: tenant)
            }
            #expect(world.sandbox.requests.count == requestsAfter, "sent after both stopped")

            // Read through B: the same report, every item accounted for, none sent twice. The
            // outcomes of the last sends are written after their permits went back: read until
            // they are in.
            let processed = world.sandbox.requests.filter(\.processed).count
            var report = try await b.client().request(.get, "/v1/jobs/cluster-cancel", key: acme.apiKey)
            try await Self.eventually("the outcomes of every processed send are recorded") {
                report = try await b.client().request(.get, "/v1/jobs/cluster-cancel", key: acme.apiKey)
                return ((report.json["counts"] as? [String: Int])?["sent"] ?? -1) >= processed
            }
            #expect(report.json["state"] as? String == "cancelled")
            let counts = try #require(report.json["counts"] as? [String: Int])
            let sent = counts["sent"] ?? -1
            let unsent = counts["cancelled"] ?? -1
            #expect(sent + (counts["failed"] ?? -1) + unsent == total, "\(counts)")
            #expect(sent == world.sandbox.requests.filter(\.processed).count, "\(counts)")
            let devices = world.sandbox.requests.compactMap(\.deviceToken)
            #expect(Set(devices).count == devices.count, "a device got it twice")
        }
    }

    @Test("a job sent by two instances is told finished once: both finish their part, one moves the job, one webhook is posted")
    func jobEndToldOnceAcrossInstances() async throws {
        let settings = try Self.postgresSettings(schema: Self.freshSchema())
        let receiver = try await WebhookTestServer()
        // Each answer held 10 ms: both instances take part in the 2,000 tokens.
        let world = try await JobWebhookTests.world(hookedTo: receiver, faults: SandboxFaults(addedLatency: 0.01))
        let acme = world.tenant("acme")
        let tenant = try TenantID(acme.id)
        var options = Self.options(world, settings: settings, rescan: .seconds(3600))
        options.environment["JOB_HOOK_SECRET"] = JobWebhookTests.secret
        try await Self.withTwoInstances(world, settings: settings, options: options) { a, b in
            let total = 2_000
            let tokens = (0..<total).map { Tokens.make(0x45, $0) }
            let body = """
                {"job_id": "cluster-end", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await a.client().request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            try await Self.eventually("both instances send the job") {
                a.server.runner.permitsHeld(by: tenant) > 0 && b.server.runner.permitsHeld(by: tenant) > 0
            }
            _ = try await b.client().waitForJob("cluster-end", key: acme.apiKey)
            try await JobWebhookTests.waitFor(1, at: receiver)
            try await Self.eventually("both instances stop sending") {
                a.server.runner.permitsHeld(by: tenant) == 0 && b.server.runner.permitsHeld(by: tenant) == 0
            }
            // Told once, and nothing more to come: the end is marked told in the transaction that
            // queued its event (an instance that ends the job later finds the mark and queues
            // nothing), and the outbox holds nothing for the tenant once the event is delivered.
            let store = try await PostgresPushStore.open(
                PostgresPushStore.Configuration(
                    host: settings.host, port: settings.port, username: settings.username, password: settings.password?.text,
                    database: settings.database, schema: settings.schema, poolSize: 1),
                logger: Logger(label: "test.cluster"))
            let untold = try await store.untoldJobEnds(endedBefore: Date().addingTimeInterval(3600), limit: 100)
            #expect(!untold.contains { $0.id.rawValue == "cluster-end" }, "the end is not marked told")
            try await Self.eventually("the delivered event leaves the outbox") { try await store.outboxCounts()[tenant] == nil }
            await store.close()
            let events = receiver.received.filter { $0.headers["x-herald-event"] == "job.finished" }
            #expect(events.count == 1, "\(receiver.received.map(\.headers))")
            let end = try #require(try events.first.flatMap { try JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] })
            #expect(end["counts"] as? [String: Int] == ["sent": total, "failed": 0, "unknown": 0, "cancelled": 0])
        }
        try await receiver.shutdown()
    }

    @Test("a dead instance's leases are released by a live one and its items sent, long before the leases end")
    func deadInstanceLeasesAreTakenOver() async throws {
        let settings = try Self.postgresSettings(schema: Self.freshSchema())
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        let options = Self.options(world, settings: settings, rescan: .seconds(1))
        try await Self.closing(world) {
        try await Self.withSchemaStore(settings) { store in
            let tenant = try TenantID("acme")
            let id = try JobID("orphaned")
            let now = Date()
            let notifications = try (0..<60).map { index in
                HeraldCore.Notification(
                    deviceToken: try DeviceToken(hex: Tokens.make(0x77, index)), topic: "com.acme.app",
                    payload: Data(#"{"aps":{"alert":"x"}}"#.utf8))
            }
            _ = try await store.createJob(tenant: tenant, id: id, environment: nil, notifications: notifications, createdAt: now)
            try await store.updateJob(tenant: tenant, id: id, state: .running, at: now)
            // A process that claimed every item under an hour's lease, then died (its heartbeat stopped a minute ago).
            let dead = InstanceRecord(
                id: "deadbeef", claimant: "herald/deadbeef", host: "gone", pid: 1, startedAt: now.addingTimeInterval(-600),
                lastHeartbeat: now.addingTimeInterval(-60))
            try await store.registerInstance(dead)
            #expect(
                try await store.claimPendingItems(
                    tenant: tenant, job: id, limit: 100, claimant: dead.claimant, now: now, leaseUntil: now.addingTimeInterval(3600)
                ).count == 60)

            try await LiveServer.with(options) { live in
                let job = try await live.client().waitForJob("orphaned", key: acme.apiKey)
                #expect((job["counts"] as? [String: Any])?["sent"] as? Int == 60, "\(job)")
                let ids = Set(world.sandbox.requests.filter(\.processed).map(\.apnsID))
                #expect(ids.count == 60)
                let instances = try await store.instances()
                #expect(instances.map(\.id) == [live.server.instanceID])
            }
        }
        }
    }

    @Test("a key uploaded through one instance's admin API is sent with by another within seconds (NOTIFY, no watcher)")
    func credentialUploadReachesTheOtherInstance() async throws {
        let settings = try Self.postgresSettings(schema: Self.freshSchema())
        // acme, and a second key of acme's team that only the sandbox knows yet.
        let (world, next) = try await ReloadAPITests.world()
        let acme = world.tenant("acme")
        let options = Self.options(world, settings: settings, rescan: .seconds(3600))
        #expect(options.watchInterval == nil, "no directory watcher: only the notification can tell B")
        try await Self.withTwoInstances(world, settings: settings, options: options) { a, b in
            #expect(try await ReloadAPITests.send(b.client(), acme, 1).status == 200)
            #expect(world.sandbox.requests.last?.keyID == "ACMEKEY001")

            let body =
                #"{"kind": "token", "key_id": "ACMEKEY002", "pem": \#(try ReloadAPITests.quoted(next.key.pemRepresentation))}"#
            let reply = try await a.client().request(
                .put, "/admin/tenants/acme/credentials", key: "test-admin-token", json: body)
            #expect(reply.status == 200, "\(reply.text)")

            // B reloads when A's notification arrives; until then it keeps sending with the old key.
            var index = 2
            try await Self.eventually("instance B sends with the key uploaded through A") {
                index += 1
                let sent = try await ReloadAPITests.send(b.client(), acme, index)
                #expect(sent.status == 200, "\(sent.text)")
                return world.sandbox.requests.last?.keyID == "ACMEKEY002"
            }
            let tenants = try await b.client().request(.get, "/admin/tenants", key: "test-admin-token")
            let listed = (tenants.json["tenants"] as? [[String: Any]] ?? []).first { $0["id"] as? String == "acme" }
            #expect((listed?["auth"] as? [String: Any])?["key_id"] as? String == "ACMEKEY002")
        }
    }

    /// Runs `body`, then closes the world whether it threw or not.
    static func closing(_ world: TestWorld, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch {
            await world.close()
            throw error
        }
        await world.close()
    }
}
