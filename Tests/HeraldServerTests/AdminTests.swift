import Foundation
import HeraldServer
import Testing

@Suite("API: admin")
struct AdminTests {
    static let admin = "admin-token-for-tests"

    @Test func tenantsAreListedWithTheirHealth() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let sent = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x81, 1))", "topic": "com.acme.app", "payload": {"aps": {}}}"#)
            #expect(sent.status == 200)
            let reply = try await client.request(.get, "/admin/tenants", key: Self.admin)
            #expect(reply.status == 200, "\(reply.text)")
            let tenants = try #require(reply.json["tenants"] as? [[String: Any]])
            #expect(tenants.compactMap { $0["id"] as? String } == ["acme", "globex"])
            let first = tenants[0]
            let auth = try #require(first["auth"] as? [String: Any])
            #expect(auth["kind"] as? String == "token")
            #expect(auth["key_id"] as? String == "ACMEKEY001")
            let keys = try #require(auth["keys"] as? [[String: Any]])
            #expect(keys.count == 1 && keys[0]["key_id"] as? String == "ACMEKEY001" && keys[0]["environment"] is NSNull)
            #expect(auth["team_id"] as? String == "ACMETEAM01")
            #expect(first["api_keys"] as? [String] == ["test"])
            let pool = try #require(first["pool"] as? [String: Any])
            #expect(pool["state"] as? String == "active")
            #expect(pool["answered"] as? Int == 1)
            #expect(first["last_error"] is NSNull)
            let idle = try #require(tenants[1]["pool"] as? [String: Any])
            #expect(idle["state"] as? String == "idle")
            // Nothing secret: no key material, no API key.
            #expect(!reply.text.contains("BEGIN"))
            #expect(!reply.text.contains(acme.apiKey))
        }
        await world.close()
    }

    @Test func reloadsPickUpChangesAndKeepTheOldRuntimeOnErrors() async throws {
        let world = try await TestWorld.make()
        let original = world.tenant("globex")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            var globex = original
            let oldKey = original.apiKey
            let send = #"{"device_token": "\#(Tokens.make(0x82, 1))", "topic": "com.globex.app", "payload": {"aps": {}}}"#

            // A new key in globex's file takes effect with a reload of globex.
            globex.apiKey = APIKeys.generate()
            try world.writeTenantFile(globex)
            #expect(try await client.request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 401)
            let reload = try await client.request(.post, "/admin/tenants/globex/reload", key: Self.admin)
            #expect(reload.status == 200, "\(reload.text)")
            #expect(try await client.request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 200)
            #expect(try await client.request(.post, "/v1/notifications", key: oldKey, json: send).status == 401)

            // A broken file: the reload fails and globex keeps running as it was.
            let file = world.tenantsDirectory + "/globex.yaml"
            let good = try String(contentsOfFile: file, encoding: .utf8)
            try (good + "\nbogus_key: 1\n").write(toFile: file, atomically: true, encoding: .utf8)
            let broken = try await client.request(.post, "/admin/tenants/globex/reload", key: Self.admin)
            #expect(broken.status == 422)
            #expect(broken.errorCode == "reload_failed")
            #expect((broken.error["message"] as? String)?.contains("bogus_key") == true)
            #expect(try await client.request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 200)

            // A new tenant file: a directory reload adds it; the broken file is reported.
            var initech = TestTenant.make(id: "initech", teamID: "INITECH001", keyID: "INITKEY001", topics: ["com.initech.app"])
            initech.key = globex.key
            try world.writeTenantFile(initech)
            let all = try await client.request(.post, "/admin/reload", key: Self.admin)
            #expect(all.status == 200, "\(all.text)")
            #expect(all.json["reloaded"] as? [String] == ["initech"])
            #expect((all.json["unchanged"] as? [String])?.contains("acme") == true)
            let failures = all.json["failures"] as? [[String: Any]] ?? []
            #expect(failures.compactMap { $0["tenant"] as? String } == ["globex"])
            let initechSend = #"{"device_token": "\#(Tokens.make(0x82, 2))", "topic": "com.initech.app", "payload": {"aps": {}}}"#
            #expect(try await client.request(.post, "/v1/notifications", key: initech.apiKey, json: initechSend).status != 401)

            // Its file removed: the next reload removes the tenant and its keys stop working.
            try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/initech.yaml")
            let again = try await client.request(.post, "/admin/reload", key: Self.admin)
            #expect(again.json["removed"] as? [String] == ["initech"])
            #expect(try await client.request(.post, "/v1/notifications", key: initech.apiKey, json: initechSend).status == 401)

            let listed = try await client.request(.get, "/admin/tenants", key: Self.admin)
            #expect((listed.json["failures"] as? [[String: Any]])?.count == 1)
            #expect(try await client.request(.post, "/admin/tenants/nobody/reload", key: Self.admin).status == 404)
        }
        await world.close()
    }
}
