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

    /// Writes the webhook secret next to a tenant file and returns the tenant file's path.
    func tenantFile() throws -> String {
        let directory = Fixtures.temporaryDirectory("herald-feedback")
        try secret.write(toFile: directory + "/webhook.secret", atomically: true, encoding: .utf8)
        return directory + "/fb.yaml"
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
    func webhook() async throws {
        let server = try await WebhookTestServer(statuses: [503])
        let store = try Fixtures.store()
        let transport = ScriptedTransport([.respond(status: 410, reason: .unregistered, timestamp: apnsTime)])
        let file = try tenantFile()
        var logger = Logging.Logger(label: "t")
        logger.logLevel = .critical
        let router = Router(
            configuration: RouterConfiguration(
                store: store, transports: ScriptedTransports { _ in transport }, clock: ManualPushClock(),
                logger: logger,
                webhooks: HTTPWebhookSender(), environment: [:]))
        let options: JSONValue = .obj([
            "webhook": .string(server.url), "secret": .string("file:webhook.secret"), "webhook_backoff_ms": .int(10),
            // Generous: a delivery that times out on a loaded machine is sent again (at least once),
            // which would make a third request here.
            "webhook_timeout_ms": .int(60_000),
            // The test server listens on loopback: the tenant allows it explicitly.
            "webhook_allow_private_addresses": .bool(true),
        ])
        await router.install([Fixtures.tenant("fb", plugins: [Fixtures.plugin("feedback", options)], file: file)])

        let result = try await router.send(tenant: Fixtures.tenantID("fb"), notification: Fixtures.note())
        await router.tasks.waitForAll()
        await server.waitForRequests(2)
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

    @Test("options are checked: the webhook needs a secret reference, never a literal secret")
    func options() throws {
        let resolver = FileSecretResolver(
            baseDirectory: "/nonexistent", environment: ["HOOK_SECRET": "0123456789abcdef0123"])
        #expect(
            throws: PluginOptionError(
                option: "secret", message: "is required with 'webhook' (env:NAME or file:PATH), to sign the webhook")
        ) {
            try FeedbackConfiguration(
                options: .obj(["webhook": .string("https://hooks.example/apns")]), secrets: resolver)
        }
        #expect(
            throws: PluginOptionError(
                option: "secret",
                message: "must be a reference, env:NAME or file:PATH (never the secret itself in the tenant file)")
        ) {
            try FeedbackConfiguration(
                options: .obj([
                    "webhook": .string("https://hooks.example/apns"), "secret": .string("hunter2hunter2hunter2"),
                ]), secrets: resolver)
        }
        #expect(throws: PluginOptionError(option: "webhook", message: "must be an http:// or https:// URL")) {
            try FeedbackConfiguration(
                options: .obj(["webhook": .string("ftp://hooks.example/apns"), "secret": .string("env:HOOK_SECRET")]),
                secrets: resolver)
        }
        #expect(throws: PluginOptionError(option: "secret", message: "environment variable MISSING is not set")) {
            try FeedbackConfiguration(
                options: .obj(["webhook": .string("https://hooks.example/apns"), "secret": .string("env:MISSING")]),
                secrets: resolver)
        }
        #expect(
            throws: PluginOptionError(
                option: "refuse",
                message:
                    "'Gone' is not a reason this plugin records (BadDeviceToken, DeviceTokenNotForTopic, Unregistered)")
        ) {
            try FeedbackConfiguration(options: .obj(["refuse": .array([.string("Gone")])]), secrets: resolver)
        }
        let ok = try FeedbackConfiguration(
            options: .obj(["webhook": .string("https://hooks.example/apns"), "secret": .string("env:HOOK_SECRET")]),
            secrets: resolver)
        #expect(ok.webhook?.secret.origin == "env HOOK_SECRET")
        #expect(ok.refuse == [.unregistered])
    }
}
