import APNsSandbox
import Crypto
import Foundation
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Testing

@testable import HeraldServer

@Suite("API: a batch job's end told to the tenant's webhook")
struct JobWebhookTests {
    static let secret = "job-webhook-secret-of-32-bytes-at-least"

    /// `acme` has a webhook set by its feedback plugin's options (the deprecated form, still
    /// read); `globex` has none. A finished job and a cancelled one are each told once, signed,
    /// with their counts; globex's job is told nothing.
    @Test func finishedAndCancelledJobsAreToldOnceSigned() async throws {
        let receiver = try await WebhookTestServer()
        let world = try await Self.world(hookedTo: receiver, faults: SandboxFaults(addedLatency: 0.02))
        let (acme, globex) = (world.tenant("acme"), world.tenant("globex"))
        let options = world.options {
            $0.environment["JOB_HOOK_SECRET"] = Self.secret
            $0.jobs.concurrencyPerTenant = 8
        }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            func batch(_ id: String, _ tenant: TestTenant, topic: String, count: Int, seed: UInt8) -> String {
                let tokens = (0..<count).map { "\"\(Tokens.make(seed, $0))\"" }.joined(separator: ",")
                return """
                    {"job_id": "\(id)", "notification": {"topic": "\(topic)", "aps": {"alert": "hi"}}, "device_tokens": [\(tokens)]}
                    """
            }
            // Finished.
            let small = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey, json: batch("small", acme, topic: "com.acme.app", count: 3, seed: 0x81))
            #expect(small.status == 202, "\(small.text)")
            _ = try await client.waitForJob("small", key: acme.apiKey)
            try await Self.waitFor(1, at: receiver)
            let theirs = try await client.request(
                .post, "/v1/notifications/batch", key: globex.apiKey,
                json: batch("theirs", globex, topic: "com.globex.app", count: 2, seed: 0x82))
            #expect(theirs.status == 202, "\(theirs.text)")
            _ = try await client.waitForJob("theirs", key: globex.apiKey)

            // Cancelled while it runs (each answer held 20 ms, 8 at once).
            let slow = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey, json: batch("slow", acme, topic: "com.acme.app", count: 1_000, seed: 0x83))
            #expect(slow.status == 202, "\(slow.text)")
            let cancelled = try await client.request(.post, "/v1/jobs/slow/cancel", key: acme.apiKey)
            #expect(cancelled.status == 200, "\(cancelled.text)")
            #expect(try await client.request(.post, "/v1/jobs/slow/cancel", key: acme.apiKey).status == 200, "a repeat")
            try await Self.waitFor(2, at: receiver)
            try await Self.waitUntilNothingIsLeftToTell(live.server.sharedStore)

            let received = receiver.received
            #expect(received.count == 2, "one event per job end, none for the tenant without a webhook: \(received.map(\.headers))")
            for delivery in received {
                let timestamp = try #require(delivery.headers["x-herald-timestamp"])
                let expected = HMAC<SHA256>.authenticationCode(
                    for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + delivery.body, using: SymmetricKey(data: Array(Self.secret.utf8)))
                #expect(delivery.headers["x-herald-signature"] == "sha256=" + expected.map { String(format: "%02x", $0) }.joined())
                #expect(!String(decoding: delivery.body, as: UTF8.self).contains(Self.secret))
            }
            let finished = try #require(received.first { $0.headers["x-herald-event"] == "job.finished" })
            try OpenAPIEvents.check(finished.body, headers: finished.headers, as: "jobFinished")
            #expect(finished.headers["x-herald-delivery"] == "acme-job-small-finished")
            let done = try #require(try JSONSerialization.jsonObject(with: Data(finished.body)) as? [String: Any])
            #expect(done["event"] as? String == "job.finished" && done["tenant"] as? String == "acme")
            #expect(done["job_id"] as? String == "small" && done["items"] as? Int == 3)
            #expect(done["counts"] as? [String: Int] == ["sent": 3, "failed": 0, "unknown": 0, "cancelled": 0])
            let report = try await client.request(.get, "/v1/jobs/small", key: acme.apiKey)
            let updated = try #require(report.json["updated_at"] as? String)
            let endedAt = try #require(done["ended_at"] as? Int)
            #expect(Timestamps.iso8601(Date(timeIntervalSince1970: Double(endedAt) / 1000)) == updated, "ended_at is the job's updated_at")

            let stopped = try #require(received.first { $0.headers["x-herald-event"] == "job.cancelled" })
            try OpenAPIEvents.check(stopped.body, headers: stopped.headers, as: "jobCancelled")
            #expect(stopped.headers["x-herald-delivery"] == "acme-job-slow-cancelled")
            let end = try #require(try JSONSerialization.jsonObject(with: Data(stopped.body)) as? [String: Any])
            #expect(end["job_id"] as? String == "slow" && end["items"] as? Int == 1_000)
            let counts = try #require(end["counts"] as? [String: Int])
            #expect((counts["cancelled"] ?? 0) > 500, "\(counts)")
            #expect((counts["sent"] ?? 0) + (counts["failed"] ?? 0) + (counts["unknown"] ?? 0) + (counts["cancelled"] ?? 0) == 1_000)
            #expect(end["ended_at"] as? Int != nil)
        }
        try await receiver.shutdown()
        await world.close()
    }
}

extension JobWebhookTests {
    /// A job that ended with its end not told (an instance that stopped between the job's final
    /// state and its event: here the state is written into the store before the server starts)
    /// is told by the sweep, once: a second run finds it told. globex's untold end (no webhook)
    /// is recorded, nothing sent.
    @Test func anEndLeftUntoldIsToldByTheSweepOnce() async throws {
        let receiver = try await WebhookTestServer()
        let world = try await Self.world(hookedTo: receiver, faults: .none)
        let ended = Date()
        do {
            let store = try SQLitePushStore(directory: world.directory + "/data")
            for (tenant, id, state) in [("acme", "orphan", JobState.finished), ("acme", "stopped", .cancelled), ("globex", "theirs", .finished)] {
                let notifications = try (0..<3).map { index in
                    HeraldCore.Notification(
                        deviceToken: try DeviceToken(hex: Tokens.make(0x85, index)), topic: "com.\(tenant).app",
                        payload: Data(#"{"aps":{"alert":"x"}}"#.utf8))
                }
                let (tenant, id) = (try TenantID(tenant), try JobID(id))
                _ = try await store.createJob(tenant: tenant, id: id, environment: nil, notifications: notifications, createdAt: ended)
                #expect(try await store.updateJob(tenant: tenant, id: id, state: .running, at: ended))
                #expect(try await store.updateJob(tenant: tenant, id: id, state: state, at: ended))
            }
            #expect(try await store.untoldJobEnds(endedBefore: ended.addingTimeInterval(1), limit: 10).count == 3)
        }
        let options = world.options {
            $0.environment["JOB_HOOK_SECRET"] = Self.secret
            $0.jobs.untoldEndsInterval = .milliseconds(100)
            $0.jobs.untoldEndsGrace = .zero
        }
        try await LiveServer.with(options) { _ async throws in try await Self.waitFor(2, at: receiver) }
        // A second run tells nothing again: its sweeps find every end told (and whatever one
        // stored would be posted before the outbox is empty).
        try await LiveServer.with(options) { live async throws in
            try await ClusterTests.eventually("the second run swept for untold ends twice") {
                live.server.runner.statistics.untoldEndSweeps >= 2
            }
            try await Self.waitUntilNothingIsLeftToTell(live.server.sharedStore)
        }

        let received = receiver.received
        #expect(received.count == 2, "each untold end told once, across two runs: \(received.map(\.headers))")
        let finished = try #require(received.first { $0.headers["x-herald-event"] == "job.finished" })
        try OpenAPIEvents.check(finished.body, headers: finished.headers, as: "jobFinished")
        #expect(finished.headers["x-herald-delivery"] == "acme-job-orphan-finished")
        let body = try #require(try JSONSerialization.jsonObject(with: Data(finished.body)) as? [String: Any])
        #expect(body["job_id"] as? String == "orphan" && body["items"] as? Int == 3)
        #expect(body["ended_at"] as? Int == Int((ended.timeIntervalSince1970 * 1000).rounded()))
        let cancelled = try #require(received.first { $0.headers["x-herald-event"] == "job.cancelled" })
        try OpenAPIEvents.check(cancelled.body, headers: cancelled.headers, as: "jobCancelled")
        let counts = try #require((try JSONSerialization.jsonObject(with: Data(cancelled.body)) as? [String: Any])?["counts"] as? [String: Int])
        #expect(counts == ["sent": 0, "failed": 0, "unknown": 0, "cancelled": 3])
        let store = try SQLitePushStore(directory: world.directory + "/data")
        #expect(try await store.untoldJobEnds(endedBefore: Date().addingTimeInterval(1), limit: 10).isEmpty, "globex's end is recorded too")
        try await receiver.shutdown()
        await world.close()
    }

    /// The feedback plugin's own event, as the API document describes it.
    @Test func aRefusedTokenIsToldAsTheDocumentSays() async throws {
        let receiver = try await WebhookTestServer()
        let gone = Tokens.make(0x84, 1)
        let world = try await Self.world(
            hookedTo: receiver, faults: .none, devices: [.unregistered(gone, since: TestWorld.unregisteredSince)])
        let acme = world.tenant("acme")
        let options = world.options { $0.environment["JOB_HOOK_SECRET"] = Self.secret }
        try await LiveServer.with(options) { live async throws in
            let sent = try await live.client().request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(gone)", "topic": "com.acme.app", "aps": {"alert": "hi"}}"#)
            #expect(sent.status == 200 && sent.json["reason"] as? String == "Unregistered", "\(sent.text)")
            try await Self.waitFor(1, at: receiver)
            let event = try #require(receiver.received.first)
            #expect(event.headers["x-herald-event"] == "device_token.invalid")
            try OpenAPIEvents.check(event.body, headers: event.headers, as: "deviceTokenInvalid")
        }
        try await receiver.shutdown()
        await world.close()
    }

    /// A tenant without the feedback plugin, with only its `webhook:` section, is told of its
    /// job's end, signed with the section's secret.
    @Test func theWebhookSectionAloneIsToldOfJobEnds() async throws {
        let receiver = try await WebhookTestServer()
        let world = try await Self.world(section: receiver, plugins: "", faults: .none)
        let acme = world.tenant("acme")
        let options = world.options { $0.environment["JOB_HOOK_SECRET"] = Self.secret }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let shown = try await client.request(.get, "/admin/tenants/acme", key: "test-admin-token")
            #expect(shown.json["plugins"] as? [String] == [], "no plugin: \(shown.text)")
            let tokens = (0..<2).map { "\"\(Tokens.make(0x86, $0))\"" }.joined(separator: ",")
            let batch = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: #"{"job_id": "plain", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}}, "device_tokens": [\#(tokens)]}"#)
            #expect(batch.status == 202, "\(batch.text)")
            _ = try await client.waitForJob("plain", key: acme.apiKey)
            try await Self.waitFor(1, at: receiver)
            let event = try #require(receiver.received.first)
            #expect(event.headers["x-herald-event"] == "job.finished")
            #expect(event.headers["x-herald-delivery"] == "acme-job-plain-finished")
            try Self.expectSigned(event)
            try OpenAPIEvents.check(event.body, headers: event.headers, as: "jobFinished")
        }
        try await receiver.shutdown()
        await world.close()
    }

    /// The feedback plugin's `device_token.invalid` goes to the tenant's `webhook:` section when
    /// the plugin has no webhook options.
    @Test func aRefusedTokenIsToldThroughTheWebhookSection() async throws {
        let receiver = try await WebhookTestServer()
        let gone = Tokens.make(0x87, 1)
        let world = try await Self.world(
            section: receiver, plugins: "plugins:\n  - name: feedback\n    options: {refuse: []}\n", faults: .none,
            devices: [.unregistered(gone, since: TestWorld.unregisteredSince)])
        let acme = world.tenant("acme")
        let options = world.options { $0.environment["JOB_HOOK_SECRET"] = Self.secret }
        try await LiveServer.with(options) { live async throws in
            let sent = try await live.client().request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(gone)", "topic": "com.acme.app", "aps": {"alert": "hi"}}"#)
            #expect(sent.status == 200 && sent.json["reason"] as? String == "Unregistered", "\(sent.text)")
            try await Self.waitFor(1, at: receiver)
            let event = try #require(receiver.received.first)
            #expect(event.headers["x-herald-event"] == "device_token.invalid")
            try Self.expectSigned(event)
            try OpenAPIEvents.check(event.body, headers: event.headers, as: "deviceTokenInvalid")
        }
        try await receiver.shutdown()
        await world.close()
    }

    /// The delivery is signed with ``secret`` over `<timestamp>.<body>`, and does not carry it.
    static func expectSigned(_ delivery: WebhookTestServer.Received) throws {
        let timestamp = try #require(delivery.headers["x-herald-timestamp"])
        let expected = HMAC<SHA256>.authenticationCode(
            for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + delivery.body, using: SymmetricKey(data: Array(Self.secret.utf8)))
        #expect(delivery.headers["x-herald-signature"] == "sha256=" + expected.map { String(format: "%02x", $0) }.joined())
        #expect(!String(decoding: delivery.body, as: UTF8.self).contains(Self.secret))
    }

    /// `acme` (topic `com.acme.app`) with a `webhook:` section to `receiver` (its secret in
    /// `JOB_HOOK_SECRET`) and the `plugins` section given; `globex` without a webhook.
    static func world(section receiver: WebhookTestServer, plugins: String, faults: SandboxFaults, devices: [SandboxDevice] = [])
        async throws -> TestWorld
    {
        let hooked = """
            webhook:
              url: \(receiver.url)
              secret: env:JOB_HOOK_SECRET
              allow_private_addresses: true
              timeout_ms: 60000
            \(plugins)
            """
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"], extraYAML: hooked)
        let globex = TestTenant.make(id: "globex", teamID: "GLOBEXTM01", keyID: "GLOBEXKEY1", topics: ["com.globex.app"])
        return try await TestWorld.make(tenants: [acme, globex], devices: devices, faults: faults, recordPayloads: false)
    }

    /// `acme` (topic `com.acme.app`) with a webhook to `receiver` set in its feedback plugin's
    /// options (the deprecated form), its secret in `JOB_HOOK_SECRET` (give it in the server's
    /// environment); `globex` without one.
    static func world(hookedTo receiver: WebhookTestServer, faults: SandboxFaults, devices: [SandboxDevice] = []) async throws
        -> TestWorld
    {
        let hooked = """
            plugins:
              - name: feedback
                options:
                  webhook: \(receiver.url)
                  secret: env:JOB_HOOK_SECRET
                  webhook_allow_private_addresses: true
                  webhook_timeout_ms: 60000
            """
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"], extraYAML: hooked)
        let globex = TestTenant.make(id: "globex", teamID: "GLOBEXTM01", keyID: "GLOBEXKEY1", topics: ["com.globex.app"])
        return try await TestWorld.make(tenants: [acme, globex], devices: devices, faults: faults, recordPayloads: false)
    }

    /// Waits (up to 30 s, then fails) until `receiver` got `count` requests.
    /// Waits until no webhook can come any more: every ended job's end recorded as told (its
    /// delivery, if the tenant has a webhook, stored in the outbox in the same transaction) and
    /// every delivery posted (the outbox empty).
    static func waitUntilNothingIsLeftToTell(_ store: any ServerStore) async throws {
        for _ in 0..<1_500 {
            let untold = try await store.untoldJobEnds(endedBefore: Date().addingTimeInterval(3600), limit: 1)
            if untold.isEmpty, try await store.outboxCounts().isEmpty { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("job ends left untold, or deliveries left in the outbox")
    }

    static func waitFor(_ count: Int, at receiver: WebhookTestServer) async throws {
        for _ in 0..<1_500 where receiver.received.count < count {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(receiver.received.count >= count, "\(receiver.received.count) webhook(s) of \(count) came")
    }
}
