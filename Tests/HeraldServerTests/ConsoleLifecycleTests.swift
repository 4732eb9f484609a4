import Crypto
import Foundation
import HTTPTypes
import Herald
import HeraldCore
import Testing

@testable import HeraldServer

/// The console's lifecycle forms on the admin API's tenant lifecycle service: onboarding,
/// settings, API keys and deletion, each refused with the field named and nothing written, or
/// done exactly as the admin API does it.
@Suite("Console: onboarding, settings, API keys, deletion")
struct ConsoleLifecycleTests {
    static let admin = "console-lifecycle-admin-token"

    /// The onboarding form's fields for a token tenant of the test world's sandbox.
    static func onboardFields(_ world: TestWorld, id: String, keyID: String = "NEWKEY0001") -> [(String, String)] {
        [
            ("id", id), ("team_id", "NEWTEAM001"), ("topics", "com.new.app, com.new.app.voip"),
            ("production", "https://127.0.0.1:\(world.sandbox.port)"), ("development", "https://127.0.0.1:\(world.sandbox.port)"),
            ("ca_file", world.caPath), ("kind", "token"), ("key_id", keyID), ("api_key_name", "backend"),
        ]
    }

    static func keyValue(in html: String) -> String? {
        guard let range = html.range(of: #"id="new-key-value">"#) else { return nil }
        let rest = html[range.upperBound...]
        return rest.firstIndex(of: "<").map { String(rest[..<$0]) }
    }

    /// The settings form's fields as a browser posts them.
    static func fields(_ edit: TenantPage.Edit) -> [(String, String)] {
        [
            ("topics", edit.topics), ("production", edit.production), ("development", edit.development),
            ("default", edit.developmentIsDefault ? "development" : "production"), ("ca_file", edit.caFile),
            ("connections", edit.connections), ("max_queued", edit.maxQueued), ("plugins", edit.plugins),
            ("webhook_url", edit.webhookURL), ("proxy", edit.proxy),
        ]
    }

    static func mode(_ path: String) throws -> Int? {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue
    }

    @Test func onboardingValidatesWritesLoadsAndSurvivesARestart() async throws {
        // The sandbox knows the new tenant's key (as Apple would); its file is not written yet.
        let newco = TestTenant.make(id: "newco", teamID: "NEWTEAM001", keyID: "NEWKEY0001", topics: ["com.new.app", "com.new.app.voip"])
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"], extraYAML: TestWorld.acmePlugins)
        let world = try await TestWorld.make(tenants: [acme, newco], devices: [], faults: .none, recordPayloads: false)
        try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/newco.yaml")
        try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/keys/newco.p8")
        let key = newco.key
        let files: [(String, String, [UInt8])] = [("key_file", "AuthKey_NEWKEY0001.p8", Array(key.pemRepresentation.utf8))]
        let apiKey = try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws -> String in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let before = try ConsoleGuardTests.snapshot(world.tenantsDirectory)

            // A bad credential, a bad field: 422 naming the field, nothing written, typed values kept.
            let junk = try await browser.post(
                "/console/onboard", Self.onboardFields(world, id: "newco"), files: [("key_file", "k.p8", Array("junk".utf8))])
            #expect(junk.status == 422, "\(junk.text)")
            #expect(junk.text.contains(#"id="error">key_file"#), "\(junk.text)")
            #expect(junk.text.contains(#"value="newco""#), "what was typed is shown again")
            let badTeam = try await browser.post(
                "/console/onboard", Self.onboardFields(world, id: "newco").map { $0.0 == "team_id" ? ($0.0, "bad") : $0 }, files: files)
            #expect(badTeam.status == 422)
            #expect(badTeam.text.contains(#"id="error">team_id"#), "\(badTeam.text)")
            #expect(try ConsoleGuardTests.snapshot(world.tenantsDirectory) == before, "nothing written")
            // An ID that exists: 409, and acme is untouched.
            let taken = try await browser.post("/console/onboard", Self.onboardFields(world, id: "acme"), files: files)
            #expect(taken.status == 409, "\(taken.text)")
            #expect(try ConsoleGuardTests.snapshot(world.tenantsDirectory) == before)

            let created = try await browser.post("/console/onboard", Self.onboardFields(world, id: "newco"), files: files)
            #expect(created.status == 201, "\(created.text)")
            let apiKey = try #require(Self.keyValue(in: created.text))
            #expect(apiKey.hasPrefix("hk_"))
            let file = world.tenantsDirectory + "/newco.yaml"
            #expect(try Self.mode(file) == 0o600)
            #expect(try Self.mode(world.tenantsDirectory + "/newco/AuthKey_NEWKEY0001.p8") == 0o600)
            #expect(try !String(contentsOfFile: file, encoding: .utf8).contains(apiKey), "only the key's SHA-256 is written")
            #expect(ConsoleTests.isRunning(live, "newco"))
            let page = try await browser.get("/console/tenants/newco")
            #expect(page.text.contains("<code>backend</code>") && !page.text.contains(apiKey), "the key is shown only once")

            // The new key works on the tenant API at once, and the console's test send too.
            let send = try await live.client().request(
                .post, "/v1/notifications", key: apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x93, 1))", "topic": "com.new.app", "payload": {"aps": {}}}"#)
            #expect(send.status == 200, "\(send.text)")
            return apiKey
        }
        // A restart loads the tenant from its files.
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            #expect(ConsoleTests.isRunning(live, "newco"))
            let send = try await live.client().request(
                .post, "/v1/notifications", key: apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x93, 2))", "topic": "com.new.app", "payload": {"aps": {}}}"#)
            #expect(send.status == 200, "\(send.text)")
        }
        await world.close()
    }

    @Test func settingsAreValidatedWrittenAndApplied() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let file = world.tenantsDirectory + "/acme.yaml"
            let acme = try TenantID("acme")
            let current = try #require(live.server.router.runtime(for: acme)?.configuration)
            var fields = Self.fields(Console.editForm(current))

            // Unchanged: nothing is written.
            let before = try String(contentsOfFile: file, encoding: .utf8)
            let unchanged = try await browser.post("/console/tenants/acme/settings", fields)
            #expect(unchanged.status == 200 && unchanged.text.contains("Nothing was changed"), "\(unchanged.text)")
            #expect(try String(contentsOfFile: file, encoding: .utf8) == before)

            // A pool size out of range: 422 naming the form's field, nothing written, the typed value shown.
            fields = fields.map { $0.0 == "connections" ? ("connections", "1000") : $0 }
            let refused = try await browser.post("/console/tenants/acme/settings", fields)
            #expect(refused.status == 422, "\(refused.text)")
            #expect(refused.text.contains(#"id="error">connections"#), "\(refused.text)")
            #expect(refused.text.contains(#"value="1000""#))
            #expect(try String(contentsOfFile: file, encoding: .utf8) == before)
            let notANumber = try await browser.post(
                "/console/tenants/acme/settings", fields.map { $0.0 == "connections" ? ("connections", "-1") : $0 })
            #expect(notANumber.status == 422 && notANumber.text.contains("connections must be a whole number"))

            // A new topic and three connections: written and applied; the plugins keep their options.
            fields = fields.map {
                switch $0.0 {
                case "connections": return ("connections", "3")
                case "topics": return ("topics", "com.acme.app\ncom.acme.app.voip\ncom.acme.other")
                default: return $0
                }
            }
            let applied = try await browser.post("/console/tenants/acme/settings", fields)
            #expect(applied.status == 200, "\(applied.text)")
            #expect(applied.text.contains("topics, pool settings were validated"), "\(applied.text)")
            let running = try #require(live.server.router.runtime(for: acme)?.configuration)
            #expect(running.topics == ["com.acme.app", "com.acme.app.voip", "com.acme.other"])
            #expect(running.pool.connections == 3 && running.pool.maxQueued == current.pool.maxQueued)
            #expect(running.plugins.map(\.name) == current.plugins.map(\.name))
            #expect(running.plugins.first { $0.name == "retry" }?.options == current.plugins.first { $0.name == "retry" }?.options)
            #expect(try String(contentsOfFile: file, encoding: .utf8).contains("com.acme.other"))

            // The proxy: a URL is set and shown by its address; a bad one names the field; none goes direct.
            fields = Self.fields(Console.editForm(running))
            let proxied = try await browser.post(
                "/console/tenants/acme/settings", fields.map { $0.0 == "proxy" ? ("proxy", "http://proxy.acme.example:8080") : $0 })
            #expect(proxied.status == 200 && proxied.text.contains(#"id="proxy"><code>http://proxy.acme.example:8080"#), "\(proxied.text)")
            #expect(live.server.router.runtime(for: acme)?.configuration.proxy?.proxy?.host == "proxy.acme.example")
            let badProxy = try await browser.post(
                "/console/tenants/acme/settings", fields.map { $0.0 == "proxy" ? ("proxy", "ftp://x") : $0 })
            #expect(badProxy.status == 422 && badProxy.text.contains(#"id="error">proxy"#), "\(badProxy.text)")
            let direct = try await browser.post(
                "/console/tenants/acme/settings", fields.map { $0.0 == "proxy" ? ("proxy", "none") : $0 })
            #expect(direct.status == 200 && live.server.router.runtime(for: acme)?.configuration.proxy == .direct, "\(direct.text)")
        }
        await world.close()
    }

    @Test func apiKeysAreAddedAndRevokedAndADeletedTenantIsArchived() async throws {
        let world = try await TestWorld.make()
        let globex = world.tenant("globex")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let send = #"{"device_token": "\#(Tokens.make(0x94, 1))", "topic": "com.globex.app", "payload": {"aps": {}}}"#

            let added = try await browser.post("/console/tenants/globex/api-keys", [("name", "mobile")])
            #expect(added.status == 200, "\(added.text)")
            let key = try #require(Self.keyValue(in: added.text))
            #expect(try await live.client().request(.post, "/v1/notifications", key: key, json: send).status == 200)
            #expect(try !String(contentsOfFile: world.tenantsDirectory + "/globex.yaml", encoding: .utf8).contains(key))
            let duplicate = try await browser.post("/console/tenants/globex/api-keys", [("name", "mobile")])
            #expect(duplicate.status == 409 || duplicate.status == 422, "\(duplicate.status)")
            #expect(duplicate.text.contains(#"id="error">name"#), "\(duplicate.text)")
            let badName = try await browser.post("/console/tenants/globex/api-keys", [("name", "a b/<c>")])
            #expect(badName.status == 422)
            #expect(!badName.text.contains("<c>"), "escaped")

            let revoked = try await browser.post("/console/tenants/globex/api-keys/delete", [("name", "mobile")])
            #expect(revoked.status == 200)
            #expect(revoked.text.contains("was revoked"))
            #expect(try await live.client().request(.post, "/v1/notifications", key: key, json: send).status == 401)
            #expect(try await live.client().request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 200)

            // Deleting needs the ID typed again.
            let unconfirmed = try await browser.post("/console/tenants/globex/delete", [("confirm", "acme")])
            #expect(unconfirmed.status == 422)
            #expect(ConsoleTests.isRunning(live, "globex"))
            let deleted = try await browser.post("/console/tenants/globex/delete", [("confirm", "globex")])
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(deleted.text.contains("was deleted"))
            #expect(!ConsoleTests.isRunning(live, "globex"))
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/globex.yaml"))
            let archived = try FileManager.default.contentsOfDirectory(atPath: world.tenantsDirectory + "/.archive")
            #expect(archived.count == 1 && archived[0].hasPrefix("globex-"), "\(archived)")
            #expect(try await live.client().request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 401)
            #expect(try await browser.get("/console/tenants/globex").status == 404)
        }
        await world.close()
    }
}
