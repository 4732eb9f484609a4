import APNsSandbox
import Crypto
import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import MetricsTestKit
import Synchronization
import Testing

/// The engine end to end: router → pipeline → real transport → APNsSandbox.
@Suite("Engine against APNsSandbox")
struct SandboxBehaviourTests {
    /// Each apns-id delivered (answered 200) at most once in the sandbox's record.
    func expectNoDuplicateDelivery(_ sandbox: APNsSandbox, sourceLocation: Testing.SourceLocation = #_sourceLocation) {
        var delivered: [String: Int] = [:]
        for request in sandbox.requests where request.processed && request.status == 200 {
            delivered[request.apnsID, default: 0] += 1
        }
        #expect(
            delivered.values.allSatisfy { $0 == 1 }, "apns-ids delivered twice: \(delivered.filter { $0.value > 1 })",
            sourceLocation: sourceLocation)
    }

    @Test("retry resends 500s and 503s with the same apns-id until delivered, never twice")
    func retryFaults() async throws {
        try await withSandboxRig(configure: { $0.faults = SandboxFaults(seed: 7, fraction500: 0.25, fraction503: 0.25) }
        ) { rig in
            let retry = Fixtures.plugin(
                "retry", .obj(["max_attempts": .int(10), "initial_backoff_ms": .int(1), "max_backoff_ms": .int(4)]))
            await rig.router.install([try rig.tenant("faulty", plugins: [retry])])
            let id = Fixtures.tenantID("faulty")
            var attempts = 0
            var ids: [String] = []
            for index in 0..<24 {
                let result = try await rig.router.send(tenant: id, notification: rig.note(index))
                #expect(result.isSuccess)
                attempts += result.attempts
                ids.append(result.notificationID.rawValue)
            }
            let requests = rig.sandbox.requests
            #expect(attempts > 24, "the seeded faults should have caused retries")
            #expect(requests.count == attempts)
            // Every send's attempts carried its apns-id, and exactly one was delivered.
            for apnsID in ids {
                let mine = requests.filter { $0.apnsID == apnsID }
                #expect(mine.filter { $0.status == 200 }.count == 1)
                #expect(mine.filter { $0.status != 200 }.allSatisfy { [500, 503].contains($0.status ?? 0) })
            }
            expectNoDuplicateDelivery(rig.sandbox)
        }
    }

    @Test("GOAWAY: refused streams are resent on a new connection, nothing is delivered twice")
    func retryGoAway() async throws {
        try await withSandboxRig(configure: { $0.faults = SandboxFaults(goawayAfter: 3) }) { rig in
            let retry = Fixtures.plugin(
                "retry", .obj(["max_attempts": .int(6), "initial_backoff_ms": .int(1), "max_backoff_ms": .int(8)]))
            await rig.router.install([try rig.tenant("goaway", plugins: [retry])])
            let id = Fixtures.tenantID("goaway")
            let outcomes = await withTaskGroup(of: Result<PushResult, any Error>.self) { group in
                for index in 0..<16 {
                    group.addTask {
                        do {
                            return .success(try await rig.router.send(tenant: id, notification: rig.note(index)))
                        } catch { return .failure(error) }
                    }
                }
                var all: [Result<PushResult, any Error>] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            for outcome in outcomes {
                switch outcome {
                case .success(let result): #expect(result.isSuccess)
                case .failure(let error):
                    // Only a failure that may have reached APNs may surface; it is never resent.
                    let push = try #require(error as? PushError)
                    #expect(push.mayHaveReachedAPNs, "a surely-unprocessed failure should have been retried: \(push)")
                }
            }
            #expect(rig.sandbox.connectionCount > 1)
            expectNoDuplicateDelivery(rig.sandbox)
        }
    }

    @Test("dropped connections: sends that may have been processed are not resent")
    func retryDrops() async throws {
        try await withSandboxRig(configure: { $0.faults = SandboxFaults(dropAfter: 4) }) { rig in
            let retry = Fixtures.plugin(
                "retry", .obj(["max_attempts": .int(6), "initial_backoff_ms": .int(1), "max_backoff_ms": .int(8)]))
            await rig.router.install([try rig.tenant("drops", plugins: [retry])])
            let id = Fixtures.tenantID("drops")
            var delivered = 0
            var unanswered = 0
            for index in 0..<12 {
                do {
                    let result = try await rig.router.send(tenant: id, notification: rig.note(index))
                    #expect(result.isSuccess)
                    delivered += 1
                } catch let error as PushError {
                    #expect(error.mayHaveReachedAPNs, "\(error)")
                    unanswered += 1
                }
            }
            #expect(delivered + unanswered == 12)
            #expect(delivered >= 8)
            expectNoDuplicateDelivery(rig.sandbox)
        }
    }

    @Test("feedback stores the sandbox's 410 timestamp, refuses the token afterwards and posts a signed webhook")
    func feedback410() async throws {
        let since = Date(timeIntervalSince1970: 1_712_345_678.901)
        let server = try await WebhookTestServer()
        let directory = Fixtures.temporaryDirectory("herald-rig")
        let secret = "rig-webhook-secret-0123456789"
        var unregistered = HeraldCore.Notification(
            deviceToken: Fixtures.token, topic: SandboxRig.topics[0], payload: Array(#"{"aps":{}}"#.utf8))
        unregistered.priority = .conserve
        try await withSandboxRig(
            webhooks: HTTPWebhookSender(),
            configure: { $0.devices = [.unregistered(Fixtures.token.hex, since: since)] }
        ) { rig in
            var tenant = try rig.tenant("fb", plugins: [Fixtures.plugin("feedback")], file: directory + "/fb.yaml")
            tenant.webhook = TenantWebhook(
                url: server.url, secret: Secret(bytes: Array(secret.utf8), origin: "file hook.secret"), secretReference: "file:hook.secret")
            tenant.webhook?.allowPrivateAddresses = true
            await rig.router.install([tenant])
            let id = Fixtures.tenantID("fb")

            let result = try await rig.router.send(tenant: id, notification: unregistered)
            #expect(result.status == 410 && result.reason == .unregistered)
            let stamp = try #require(result.response.timestamp)
            #expect(abs(stamp.timeIntervalSince(since)) < 0.001)
            let record = try #require(
                try await rig.store.invalidToken(
                    tenant: id, token: Fixtures.token, topic: SandboxRig.topics[0], environment: .development))
            #expect(record.apnsTimestamp.map { abs($0.timeIntervalSince(since)) < 0.001 } == true)

            await #expect(throws: PushError.self) {
                _ = try await rig.router.send(tenant: id, notification: unregistered)
            }
            #expect(rig.sandbox.requests.count == 1)

            await rig.router.tasks.waitForAll()
            #expect(await eventually(timeout: .seconds(30)) { !server.received.isEmpty }, "the webhook came")
            let hook = try #require(server.received.first)
            let timestamp = try #require(hook.headers["x-herald-timestamp"])
            let mac = HMAC<SHA256>.authenticationCode(
                for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + hook.body,
                using: SymmetricKey(data: Array(secret.utf8)))
            #expect(hook.headers["x-herald-signature"] == "sha256=" + mac.map { String(format: "%02x", $0) }.joined())
            let json = try #require(try JSONSerialization.jsonObject(with: Data(hook.body)) as? [String: Any])
            #expect((json["apns_timestamp"] as? NSNumber)?.int64Value == 1_712_345_678_901)
        }
        try await server.shutdown()
    }

    @Test("rate limit holds the rate on the wire and refuses what cannot make its deadline")
    func rateLimit() async throws {
        let clock = ManualPushClock()
        // The manual clock's instants double as the transport's (real) deadlines: generous ones,
        // so that a machine busy with other tests cannot turn a slow answer into a failure.
        let patience = Duration.seconds(600)
        try await withSandboxRig(clock: clock) { rig in
            let limit = Fixtures.plugin("rate-limit", .obj(["per_second": .int(20), "burst": .int(4)]))
            await rig.router.install([try rig.tenant("limited", plugins: [limit])])
            let id = Fixtures.tenantID("limited")
            let start = clock.now
            for index in 0..<24 {
                #expect(
                    try await rig.router.send(
                        tenant: id, notification: rig.note(index), deadline: clock.now.advanced(by: patience)
                    ).isSuccess)
            }
            // 4 at once, then 20 more at 20 a second: one virtual second.
            #expect(start.duration(to: clock.now) == .seconds(1))
            #expect(rig.sandbox.requests.count == 24)
            for index in 0..<4 {
                _ = try await rig.router.send(
                    tenant: id, notification: rig.note(100 + index), deadline: clock.now.advanced(by: patience))
            }
            do {
                _ = try await rig.router.send(
                    tenant: id, notification: rig.note(200), deadline: clock.now.advanced(by: .milliseconds(10)))
                Issue.record("expected RateLimited")
            } catch let error as PushError {
                #expect(error.code == .rateLimited)
            }
            #expect(rig.sandbox.requests.count == 28)
        }
    }

    @Test("metrics counts what the sandbox answered")
    func metrics() async throws {
        let metrics = TestMetrics()
        try await withSandboxRig(
            registry: .standard(metricsFactory: metrics),
            configure: {
                $0.devices = [.bound(Fixtures.otherToken.hex, topic: "com.example.elsewhere")]
            }
        ) { rig in
            await rig.router.install([try rig.tenant("metered", plugins: [Fixtures.plugin("metrics")])])
            let id = Fixtures.tenantID("metered")
            for index in 0..<3 { _ = try await rig.router.send(tenant: id, notification: rig.note(index)) }
            let wrongTopic = HeraldCore.Notification(
                deviceToken: Fixtures.otherToken, topic: SandboxRig.topics[0],
                payload: Array(#"{"aps":{"alert":"x"}}"#.utf8))
            let answer = try await rig.router.send(tenant: id, notification: wrongTopic)
            #expect(answer.reason == .deviceTokenNotForTopic)
            func count(_ status: String, _ reason: String) -> Int64 {
                metrics.counterTotal(
                    label: "herald_notifications_total",
                    dimensions: [
                        ("tenant", "metered"), ("kind", "device"), ("topic", SandboxRig.topics[0]), ("push_type", "alert"),
                        ("status", status), ("reason", reason),
                    ])
            }
            #expect(count("200", "none") == 3)
            #expect(count("400", "DeviceTokenNotForTopic") == 1)
        }
    }
}
