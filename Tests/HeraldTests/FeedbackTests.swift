import Crypto
import FeedbackPlugin
import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Logging
import Testing

@Suite("feedback plugin")
struct FeedbackTests {
    let apnsTime = Date(timeIntervalSince1970: 1_700_000_123.456)
    let secret = "0123456789abcdef-webhook-secret"

    /// The tenant's webhook (its `webhook:` section) pointing at `url`, signed with ``secret``.
    func webhook(_ url: String) -> TenantWebhook {
        var webhook = TenantWebhook(
            url: url, secret: Secret(bytes: Array(secret.utf8), origin: "file webhook.secret"), secretReference: "file:webhook.secret")
        webhook.initialBackoff = .milliseconds(10)
        // Generous: a delivery that times out on a loaded machine is sent again (at least once),
        // which would make a third request here.
        webhook.timeout = .seconds(60)
        // The test server listens on loopback: the tenant allows it explicitly.
        webhook.allowPrivateAddresses = true
        return webhook
    }

    @Test("a 410 is recorded with APNs' timestamp, later sends are refused until the token is registered again")
    func unregistered() async throws {
        let store = try Fixtures.store()
        let transport = ScriptedTransport([.respond(status: 410, reason: .unregistered, timestamp: apnsTime)])
        let router = try Fixtures.router(transports: ScriptedTransports { _ in transport }, store: store)
        await router.install([Fixtures.tenant("fb", plugins: [Fixtures.plugin("feedback")])])
        let id = Fixtures.tenantID("fb")

        let first = try await router.send(tenant: id, notification: Fixtures.note())
        #expect(first.status == 410 && first.reason == .unregistered)
        let record = try #require(
            try await store.invalidToken(
                tenant: id, token: Fixtures.token, topic: "com.example.app", environment: .production))
        #expect(record.reason == .unregistered)
        #expect(record.apnsTimestamp.map { abs($0.timeIntervalSince(apnsTime)) < 0.001 } == true)

        do {
            _ = try await router.send(tenant: id, notification: Fixtures.note())
            Issue.record("expected the token to be refused")
        } catch let error as PushError {
            #expect(error.code == .tokenRefused && error.reason == .unregistered && error.field == "device_token")
        }
        #expect(transport.attempts.count == 1)
        // Another topic, environment or token is not affected.
        _ = try await router.send(
            tenant: id, notification: Fixtures.note(topic: "com.example.app.voip", pushType: .voip))
        _ = try await router.send(tenant: id, notification: Fixtures.note(), environment: .development)
        _ = try await router.send(tenant: id, notification: Fixtures.note(token: Fixtures.otherToken))
        #expect(transport.attempts.count == 4)

        // A registration older than APNs' timestamp does not lift it; a newer one does.
        try await store.registerToken(
            tenant: id, token: Fixtures.token, topic: nil, registeredAt: apnsTime.addingTimeInterval(-60))
        await #expect(throws: PushError.self) { _ = try await router.send(tenant: id, notification: Fixtures.note()) }
        try await store.registerToken(
            tenant: id, token: Fixtures.token, topic: nil, registeredAt: apnsTime.addingTimeInterval(60))
        #expect(try await router.send(tenant: id, notification: Fixtures.note()).isSuccess)
        #expect(transport.attempts.count == 5)
    }

    @Test("a tenant's feedback is its own: another tenant sending to the same token is not refused")
    func isolation() async throws {
        let store = try Fixtures.store()
        let transports = ScriptedTransports { tenant in
            tenant.id.rawValue == "alpha"
                ? ScriptedTransport([.respond(status: 410, reason: .unregistered, timestamp: apnsTime)])
                : ScriptedTransport()
        }
        let router = try Fixtures.router(transports: transports, store: store)
        await router.install([
            Fixtures.tenant("alpha", plugins: [Fixtures.plugin("feedback")]),
            Fixtures.tenant("beta", plugins: [Fixtures.plugin("feedback")]),
        ])
        let alpha = Fixtures.tenantID("alpha")
        let beta = Fixtures.tenantID("beta")
        _ = try await router.send(tenant: alpha, notification: Fixtures.note())
        await #expect(throws: PushError.self) {
            _ = try await router.send(tenant: alpha, notification: Fixtures.note())
        }
        #expect(try await router.send(tenant: beta, notification: Fixtures.note()).isSuccess)
        #expect(try await store.invalidTokens(tenant: beta, limit: 10).isEmpty)
        #expect(try await store.invalidTokens(tenant: alpha, limit: 10).count == 1)
    }

    @Test("BadDeviceToken and DeviceTokenNotForTopic are recorded; only the reasons in 'refuse' are refused")
    func otherReasons() async throws {
        let store = try Fixtures.store()
        let transport = ScriptedTransport([
            .respond(status: 400, reason: .badDeviceToken), .respond(status: 400, reason: .deviceTokenNotForTopic),
        ])
        let router = try Fixtures.router(transports: ScriptedTransports { _ in transport }, store: store)
        await router.install([
            Fixtures.tenant(
                "fb", plugins: [Fixtures.plugin("feedback", .obj(["refuse": .array([.string("BadDeviceToken")])]))])
        ])
        let id = Fixtures.tenantID("fb")
        _ = try await router.send(tenant: id, notification: Fixtures.note())
        _ = try await router.send(tenant: id, notification: Fixtures.note(token: Fixtures.otherToken))
        let records = try await store.invalidTokens(tenant: id, limit: 10)
        #expect(Set(records.map(\.reason)) == [.badDeviceToken, .deviceTokenNotForTopic])
        await #expect(throws: PushError.self) { _ = try await router.send(tenant: id, notification: Fixtures.note()) }
        #expect(try await router.send(tenant: id, notification: Fixtures.note(token: Fixtures.otherToken)).isSuccess)
    }

    @Test("delivers a signed webhook to the tenant's URL, retrying a 503")
    func webhookDelivery() async throws {
        let server = try await WebhookTestServer(statuses: [503])
        let store = try Fixtures.store()
        let transport = ScriptedTransport([.respond(status: 410, reason: .unregistered, timestamp: apnsTime)])
        var logger = Logging.Logger(label: "t")
        logger.logLevel = .critical
        let router = Router(
            configuration: RouterConfiguration(
                store: store, transports: ScriptedTransports { _ in transport }, clock: ManualPushClock(),
                logger: logger,
                webhooks: HTTPWebhookSender(), environment: [:]))
        // The plugin has no options: the tenant's webhook is its own setting.
        var tenant = Fixtures.tenant("fb", plugins: [Fixtures.plugin("feedback")])
        tenant.webhook = webhook(server.url)
        await router.install([tenant])

        let result = try await router.send(tenant: Fixtures.tenantID("fb"), notification: Fixtures.note())
        await router.tasks.waitForAll()
        #expect(await eventually(timeout: .seconds(30)) { server.received.count >= 2 }, "the webhook and its retry came")
        try await server.shutdown()

        let received = server.received
        #expect(received.count == 2)
        let delivery = try #require(received.last)
        #expect(delivery.method == "POST" && delivery.uri == "/hooks/apns")
        #expect(
            received[0].body == delivery.body
                && received[0].headers["x-herald-signature"] == delivery.headers["x-herald-signature"])
        let timestamp = try #require(delivery.headers["x-herald-timestamp"])
        let signature = try #require(delivery.headers["x-herald-signature"])
        let expected = HMAC<SHA256>.authenticationCode(
            for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + delivery.body,
            using: SymmetricKey(data: Array(secret.utf8)))
        #expect(signature == "sha256=" + expected.map { String(format: "%02x", $0) }.joined())
        let wrong = HMAC<SHA256>.authenticationCode(
            for: delivery.body, using: SymmetricKey(data: Array("another-secret-value".utf8)))
        #expect(signature != "sha256=" + wrong.map { String(format: "%02x", $0) }.joined())

        let json = try #require(try JSONSerialization.jsonObject(with: Data(delivery.body)) as? [String: Any])
        #expect(json["tenant"] as? String == "fb")
        #expect(json["device_token"] as? String == Fixtures.token.hex)
        #expect(json["topic"] as? String == "com.example.app")
        #expect(json["reason"] as? String == "Unregistered")
        #expect((json["apns_timestamp"] as? NSNumber)?.int64Value == 1_700_000_123_456)
        #expect(json["apns_id"] as? String == result.notificationID.rawValue)
    }

    @Test("options are checked; the deprecated webhook options are accepted and left to the tenant file loader")
    func options() throws {
        #expect(
            throws: PluginOptionError(
                option: "refuse",
                message:
                    "'Gone' is not a reason this plugin records (BadDeviceToken, DeviceTokenNotForTopic, ExpiredToken, Unregistered)")
        ) {
            try FeedbackConfiguration(options: .obj(["refuse": .array([.string("Gone")])]))
        }
        #expect(throws: PluginOptionError.self) { try FeedbackConfiguration(options: .obj(["webhook_url": .string("x")])) }
        let legacy = try FeedbackConfiguration(
            options: .obj(["webhook": .string("https://hooks.example/apns"), "secret": .string("env:HOOK_SECRET")]))
        #expect(legacy.refuse == [.unregistered, .expiredToken], "the tokens gone for good are refused by default")
    }

    @Test("without a webhook, a recorded token tells nobody")
    func noWebhook() async throws {
        let webhooks = RecordingWebhooks()
        let transport = ScriptedTransport([.respond(status: 410, reason: .unregistered, timestamp: apnsTime)])
        let router = try Fixtures.router(transports: ScriptedTransports { _ in transport }, webhooks: webhooks)
        await router.install([Fixtures.tenant("fb", plugins: [Fixtures.plugin("feedback", .obj(["refuse": .array([])]))])])
        _ = try await router.send(tenant: Fixtures.tenantID("fb"), notification: Fixtures.note())
        await router.tasks.waitForAll()
        #expect(webhooks.requests.isEmpty)
    }
}
