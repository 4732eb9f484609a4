import Crypto
import Foundation
import HeraldCore
import HeraldTestSupport
import Testing

@testable import HeraldServer

/// The tenant's webhook through the admin API and the console: set at onboarding (its secret as a
/// reference, or as a value Herald writes to a 0600 file), changed, kept, removed; the tenant view
/// shows its URL and never its secret.
@Suite("API and console: the tenant's webhook")
struct LifecycleWebhookTests {
    static let admin = LifecycleAPITests.admin
    static let secret = "onboarded-webhook-secret-0123456789"

    static func mode(_ path: String) -> Int { LifecycleAPITests.mode(path) }

    static func read(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }

    /// The delivery is signed with `secret` over `<timestamp>.<body>`.
    static func isSigned(_ delivery: WebhookTestServer.Received, with secret: String) -> Bool {
        guard let timestamp = delivery.headers["x-herald-timestamp"] else { return false }
        let expected = HMAC<SHA256>.authenticationCode(
            for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + delivery.body,
            using: SymmetricKey(data: Array(secret.utf8)))
        return delivery.headers["x-herald-signature"] == "sha256="
            + expected.map { String(format: "%02x", $0) }.joined()
    }

    @Test func onboardingWithAWebhookWritesItsSecretBesideTheFileAndTheTenantIsToldOfItsJobs() async throws {
        let receiver = try await WebhookTestServer()
        let world = try await LifecycleAPITests.world()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let body = LifecycleAPITests.createBody(
                world,
                extra:
                    #", "webhook": {"url": "\#(receiver.url)", "secret_value": "\#(Self.secret)", "allow_private_addresses": true, "timeout_ms": 60000}"#
            )
            let created = try await client.request(.post, "/admin/tenants", key: Self.admin, json: body)
            #expect(created.status == 201, "\(created.text)")
            #expect(!created.text.contains(Self.secret))
            let webhook = try #require(
                (created.json["tenant"] as? [String: Any])?["webhook"] as? [String: Any], "\(created.text)")
            #expect(webhook["url"] as? String == receiver.url)
            #expect(webhook["set_in"] as? String == "webhook")
            #expect(webhook["timeout_ms"] as? Int == 60_000)
            #expect(webhook["attempts"] as? Int == 5)

            // The secret in its own 0600 file; the tenant file refers to it.
            let secretFile = world.tenantsDirectory + "/initech/webhook.secret"
            #expect(Self.mode(secretFile) == 0o600)
            #expect(try Self.read(secretFile) == Self.secret)
            let yaml = try Self.read(world.tenantsDirectory + "/initech.yaml")
            #expect(yaml.contains(#"secret: "file:initech/webhook.secret""#), "\(yaml)")
            #expect(!yaml.contains(Self.secret))
            let shown = try await client.request(.get, "/admin/tenants/initech", key: Self.admin)
            #expect((shown.json["webhook"] as? [String: Any])?["url"] as? String == receiver.url)
            #expect(!shown.text.contains(Self.secret))

            // The new tenant (no feedback plugin) is told when its job finishes, signed with that secret.
            let apiKey = try #require((created.json["api_key"] as? [String: Any])?["key"] as? String)
            let batch = try await client.request(
                .post, "/v1/notifications/batch", key: apiKey,
                json:
                    #"{"job_id": "first", "notification": {"topic": "com.initech.app", "aps": {"alert": "hi"}}, "device_tokens": ["\#(Tokens.make(0x95, 1))"]}"#
            )
            #expect(batch.status == 202, "\(batch.text)")
            _ = try await client.waitForJob("first", key: apiKey)
            try await JobWebhookTests.waitFor(1, at: receiver)
            let event = try #require(receiver.received.first)
            #expect(event.headers["x-herald-event"] == "job.finished")
            #expect(Self.isSigned(event, with: Self.secret))
        }
        try await receiver.shutdown()
        await world.close()
    }

    @Test func badWebhooksAtOnboardingAre422NamingTheFieldAndWriteNothing() async throws {
        let world = try await LifecycleAPITests.world()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let before = LifecycleAPITests.listing(world)
            let cases: [(webhook: String, field: String)] = [
                (#"{"url": "ftp://hooks.example", "secret_value": "\#(Self.secret)"}"#, "webhook.url"),
                (#"{"secret_value": "\#(Self.secret)"}"#, "webhook.url"),
                (#"{"url": "https://hooks.example"}"#, "webhook.secret"),
                (#"{"url": "https://hooks.example", "secret": "\#(Self.secret)"}"#, "webhook.secret"),
                (#"{"url": "https://hooks.example", "secret": "env:NOT_SET_ANYWHERE"}"#, "webhook.secret"),
                (#"{"url": "https://hooks.example", "secret_value": "short"}"#, "webhook.secret_value"),
                (
                    #"{"url": "https://hooks.example", "secret": "env:X", "secret_value": "\#(Self.secret)"}"#,
                    "webhook.secret_value"
                ),
                (
                    #"{"url": "https://hooks.example", "secret_value": "\#(Self.secret)", "attempts": 99}"#,
                    "webhook.attempts"
                ),
                (
                    #"{"url": "https://hooks.example", "secret_value": "\#(Self.secret)", "colour": 1}"#,
                    "webhook.colour"
                ),
            ]
            for (webhook, field) in cases {
                let reply = try await client.request(
                    .post, "/admin/tenants", key: Self.admin,
                    json: LifecycleAPITests.createBody(world, extra: #", "webhook": \#(webhook)"#))
                #expect(reply.status == 422, "\(field): \(reply.text)")
                #expect(reply.errorField == field, "\(field): \(reply.text)")
                #expect(!reply.text.contains(Self.secret), "\(field): the answer echoes the secret")
                #expect(LifecycleAPITests.listing(world) == before, "\(field): something was written")
            }
        }
        await world.close()
    }

    @Test func patchSetsKeepsRotatesAndRemovesTheWebhook() async throws {
        let world = try await LifecycleAPITests.world()
        let options = world.options(adminToken: Self.admin) {
            $0.environment["ACME_HOOK"] = "acme-hook-secret-from-the-environment"
        }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let file = world.tenantsDirectory + "/acme.yaml"
            func patch(_ json: String) async throws -> APIClient.Reply {
                try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: json)
            }
            func configured() throws -> TenantWebhook? {
                try #require(live.server.router.runtime(for: TenantID("acme"))).configuration.webhook
            }

            // A refused first secret upload leaves no file and no directory behind.
            let refusedFirst = try await patch(#"{"webhook": {"url": "ftp://x", "secret_value": "\#(Self.secret)"}}"#)
            #expect(refusedFirst.status == 422 && refusedFirst.errorField == "webhook.url", "\(refusedFirst.text)")
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/acme"))

            // Set, with the secret as a reference.
            let set = try await patch(
                #"{"webhook": {"url": "https://hooks.acme.example/a", "secret": "env:ACME_HOOK"}}"#)
            #expect(set.status == 200, "\(set.text)")
            #expect((set.json["webhook"] as? [String: Any])?["url"] as? String == "https://hooks.acme.example/a")
            #expect(try configured()?.secret.bytes == Array("acme-hook-secret-from-the-environment".utf8))

            // Changed without a secret: the current one stays.
            let moved = try await patch(#"{"webhook": {"url": "https://hooks.acme.example/b", "attempts": 7}}"#)
            #expect(moved.status == 200, "\(moved.text)")
            #expect(try configured()?.url == "https://hooks.acme.example/b")
            #expect(try configured()?.attempts == 7)
            #expect(try configured()?.secretReference == "env:ACME_HOOK")

            // Rotated by value: written to acme/webhook.secret (0600), swapped like a reload.
            let rotated = try await patch(
                #"{"webhook": {"url": "https://hooks.acme.example/b", "secret_value": "\#(Self.secret)"}}"#)
            #expect(rotated.status == 200, "\(rotated.text)")
            #expect(!rotated.text.contains(Self.secret))
            let secretFile = world.tenantsDirectory + "/acme/webhook.secret"
            #expect(Self.mode(secretFile) == 0o600)
            #expect(try Self.read(secretFile) == Self.secret)
            #expect(try configured()?.secret.bytes == Array(Self.secret.utf8))
            #expect(try configured()?.secretReference == "file:acme/webhook.secret")

            // A refused change with a new secret puts the old secret file back, and the tenant file.
            let written = try Self.read(file)
            let refused = try await patch(
                #"{"webhook": {"url": "not a url", "secret_value": "another-secret-0123456789"}}"#)
            #expect(refused.status == 422 && refused.errorField == "webhook.url", "\(refused.text)")
            #expect(!refused.text.contains("another-secret-0123456789"))
            #expect(try Self.read(secretFile) == Self.secret)
            #expect(try Self.read(file) == written)
            let literal = try await patch(
                #"{"webhook": {"url": "https://hooks.acme.example/b", "secret": "a-literal-secret-in-the-body"}}"#)
            #expect(literal.status == 422 && literal.errorField == "webhook.secret", "\(literal.text)")
            #expect(!literal.text.contains("a-literal-secret-in-the-body"))
            #expect(try Self.read(file) == written)

            // Removed.
            let removed = try await patch(#"{"webhook": null}"#)
            #expect(removed.status == 200, "\(removed.text)")
            #expect(removed.json["webhook"] is NSNull, "\(removed.text)")
            #expect(try configured() == nil)
            #expect(!(try Self.read(file)).contains("webhook"))
        }
        await world.close()
    }

    @Test func aWebhookSetInTwoPlacesIsRefusedNamingBoth() async throws {
        let world = try await LifecycleAPITests.world()
        let options = world.options(adminToken: Self.admin) {
            $0.environment["ACME_HOOK"] = "acme-hook-secret-from-the-environment"
        }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let legacy =
                #"{"plugins": [{"name": "feedback", "options": {"webhook": "https://hooks.acme.example/old", "secret": "env:ACME_HOOK"}}]}"#
            let old = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: legacy)
            #expect(old.status == 200, "\(old.text)")
            #expect((old.json["webhook"] as? [String: Any])?["set_in"] as? String == "plugins[feedback].options")
            let both = try await client.request(
                .patch, "/admin/tenants/acme", key: Self.admin,
                json: #"{"webhook": {"url": "https://hooks.acme.example/new", "secret": "env:ACME_HOOK"}}"#)
            #expect(both.status == 422 && both.errorField == "webhook", "\(both.text)")
            #expect(
                both.text.contains("plugins[0].options.webhook") && both.text.contains("set the webhook in one place"),
                "\(both.text)")
        }
        await world.close()
    }

    // MARK: The console

    @Test func theConsoleOnboardsWithAWebhookAndChangesIt() async throws {
        let world = try await LifecycleAPITests.world()
        let newco = world.tenant("initech")
        let fields: [(String, String)] = [
            ("id", "initech"), ("team_id", newco.teamID), ("topics", "com.initech.app"),
            ("production", "https://127.0.0.1:\(world.sandbox.port)"),
            ("development", "https://127.0.0.1:\(world.sandbox.port)"),
            ("ca_file", world.caPath), ("kind", "token"), ("key_id", newco.keyID),
            ("webhook_url", "https://hooks.initech.example/h"),
        ]
        let files: [(String, String, [UInt8])] = [("key_file", "AuthKey.p8", Array(newco.key.pemRepresentation.utf8))]
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let before = LifecycleAPITests.listing(world)

            // A URL without a secret: refused naming the secret's field, nothing written.
            let noSecret = try await browser.post("/console/onboard", fields, files: files)
            #expect(noSecret.status == 422, "\(noSecret.text)")
            #expect(noSecret.text.contains(#"id="error">webhook_secret"#), "\(noSecret.text)")
            #expect(LifecycleAPITests.listing(world) == before)
            // A bad URL: named by the form's field; the secret typed is not shown again.
            let badURL = try await browser.post(
                "/console/onboard",
                fields.map { $0.0 == "webhook_url" ? ($0.0, "ftp://x") : $0 } + [("webhook_secret", Self.secret)],
                files: files)
            #expect(badURL.status == 422, "\(badURL.text)")
            #expect(badURL.text.contains(#"id="error">webhook_url"#), "\(badURL.text)")
            #expect(!badURL.text.contains(Self.secret))
            #expect(LifecycleAPITests.listing(world) == before)

            let created = try await browser.post(
                "/console/onboard", fields + [("webhook_secret", Self.secret)], files: files)
            #expect(created.status == 201, "\(created.text)")
            #expect(!created.text.contains(Self.secret))
            let secretFile = world.tenantsDirectory + "/initech/webhook.secret"
            #expect(Self.mode(secretFile) == 0o600)
            #expect(try Self.read(secretFile) == Self.secret)
            let page = try await browser.get("/console/tenants/initech")
            #expect(page.text.contains("https://hooks.initech.example/h"), "the tenant page shows the URL")
            #expect(!page.text.contains(Self.secret))

            // The settings form: a new URL, the secret field left empty keeps the secret.
            let id = try TenantID("initech")
            let current = try #require(live.server.router.runtime(for: id)?.configuration)
            var edit = Console.editForm(current)
            #expect(edit.webhookURL == "https://hooks.initech.example/h")
            edit.webhookURL = "https://hooks.initech.example/moved"
            let changed = try await browser.post(
                "/console/tenants/initech/settings", ConsoleLifecycleTests.fields(edit))
            #expect(changed.status == 200, "\(changed.text)")
            let moved = try #require(live.server.router.runtime(for: id)?.configuration.webhook)
            #expect(moved.url == "https://hooks.initech.example/moved")
            #expect(moved.secret.bytes == Array(Self.secret.utf8))
            // Emptied: the webhook goes.
            edit.webhookURL = ""
            let emptied = try await browser.post(
                "/console/tenants/initech/settings", ConsoleLifecycleTests.fields(edit))
            #expect(emptied.status == 200, "\(emptied.text)")
            #expect(live.server.router.runtime(for: id)?.configuration.webhook == nil)
        }
        await world.close()
    }

    @Test func theConsoleMovesAWebhookOutOfTheFeedbackPluginsOptions() async throws {
        let legacy = """
            plugins:
              - name: feedback
                options:
                  refuse: []
                  webhook: https://hooks.acme.example/old
                  secret: env:ACME_HOOK
                  webhook_attempts: 3
            """
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"], extraYAML: legacy)
        let world = try await TestWorld.make(tenants: [acme], devices: [], faults: .none, recordPayloads: false)
        let options = world.options(adminToken: Self.admin) {
            $0.environment["ACME_HOOK"] = "acme-hook-secret-from-the-environment"
        }
        try await LiveServer.with(options) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let id = try TenantID("acme")
            let current = try #require(live.server.router.runtime(for: id)?.configuration)
            #expect(current.webhook?.origin == .feedbackOptions)
            var edit = Console.editForm(current)
            edit.webhookURL = "https://hooks.acme.example/new"
            let changed = try await browser.post("/console/tenants/acme/settings", ConsoleLifecycleTests.fields(edit))
            #expect(changed.status == 200, "\(changed.text)")
            let now = try #require(live.server.router.runtime(for: id)?.configuration)
            let webhook = try #require(now.webhook)
            #expect(webhook.origin == .section)
            #expect(webhook.url == "https://hooks.acme.example/new")
            #expect(webhook.attempts == 3, "its settings move with it")
            #expect(webhook.secretReference == "env:ACME_HOOK")
            #expect(now.plugins.first { $0.name == "feedback" }?.options == .object([("refuse", .array([]))]))
        }
        await world.close()
    }
}
