import APNsSandbox
import Foundation
import HeraldServer
import Testing

/// The admin reload and credential routes over HTTP, against a server in this process.
@Suite("API: reload and credential upload")
struct ReloadAPITests {
    static let admin = "admin-token-for-reload-tests"

    /// acme and globex, plus `ACMEKEY002`: a second key for acme's team that the sandbox knows
    /// (acme has not got it yet).
    static func world() async throws -> (TestWorld, next: TestTenant) {
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app", "com.acme.app.voip"],
            extraYAML: TestWorld.acmePlugins)
        let globex = TestTenant.make(
            id: "globex", teamID: "GLOBEXTM01", keyID: "GLOBEXKEY1", topics: ["com.globex.app"])
        let next = TestTenant.make(id: "acmenext", teamID: acme.teamID, keyID: "ACMEKEY002", topics: acme.topics)
        let world = try await TestWorld.make(
            tenants: [acme, globex, next], devices: [], faults: .none, recordPayloads: false)
        // Only the sandbox knows the second key: no tenant file uses it.
        try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/acmenext.yaml")
        try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/keys/acmenext.p8")
        return (world, next)
    }

    static func send(_ client: APIClient, _ tenant: TestTenant, _ index: Int) async throws -> APIClient.Reply {
        try await client.request(
            .post, "/v1/notifications", key: tenant.apiKey,
            json:
                #"{"device_token": "\#(Tokens.make(0xA1, index))", "topic": "\#(tenant.topics[0])", "payload": {"aps": {}}}"#
        )
    }

    /// JSON for a string value (PEM text has newlines).
    static func quoted(_ text: String) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast()
            .description
    }

    @Test func uploadingANewP8WritesItAt0600AndTheNextSendUsesTheNewKeyID() async throws {
        let (world, next) = try await Self.world()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            #expect(try await Self.send(client, acme, 1).status == 200)
            #expect(world.sandbox.requests.last?.keyID == "ACMEKEY001")
            let body =
                #"{"kind": "token", "key_id": "ACMEKEY002", "pem": \#(try Self.quoted(next.key.pemRepresentation))}"#
            let reply = try await client.request(.put, "/admin/tenants/acme/credentials", key: Self.admin, json: body)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["reloaded"] as? [String] == ["acme"])
            #expect(reply.json["revoked"] as? [String] == [])
            #expect(!reply.text.contains("BEGIN"), "the key is never echoed")

            // Written next to the tenant's key file, owner-only, and the tenant file points at it.
            let path = world.tenantsDirectory + "/keys/AuthKey_ACMEKEY002.p8"
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            let file = try String(contentsOfFile: world.tenantsDirectory + "/acme.yaml", encoding: .utf8)
            #expect(file.contains("key_id: ACMEKEY002"))
            #expect(file.contains("key_file: keys/AuthKey_ACMEKEY002.p8"))

            #expect(try await Self.send(client, acme, 2).status == 200)
            #expect(world.sandbox.requests.last?.keyID == "ACMEKEY002")
            let tenants = try await client.request(.get, "/admin/tenants", key: Self.admin)
            let listed = (tenants.json["tenants"] as? [[String: Any]] ?? []).first { $0["id"] as? String == "acme" }
            #expect((listed?["auth"] as? [String: Any])?["key_id"] as? String == "ACMEKEY002")
            let reload = try #require(listed?["reload"] as? [String: Any])
            #expect(reload["swaps"] as? Int == 2)
            #expect(reload["last_error"] is NSNull)
        }
        await world.close()
    }

    @Test func aBadUploadIs422NamingTheFieldAndTheTenantKeepsSending() async throws {
        let (world, next) = try await Self.world()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let before = try String(contentsOfFile: world.tenantsDirectory + "/acme.yaml", encoding: .utf8)

            let notAKey = try await client.request(
                .put, "/admin/tenants/acme/credentials", key: Self.admin,
                json: #"{"kind": "token", "key_id": "ACMEKEY002", "pem": "hello"}"#)
            #expect(notAKey.status == 422, "\(notAKey.text)")
            #expect(notAKey.errorCode == "upload_rejected")
            #expect(notAKey.errorField == "pem")

            let badKeyID = try await client.request(
                .put, "/admin/tenants/acme/credentials", key: Self.admin,
                json: #"{"kind": "token", "key_id": "short", "pem": \#(try Self.quoted(next.key.pemRepresentation))}"#)
            #expect(badKeyID.status == 422, "\(badKeyID.text)")
            #expect(badKeyID.errorField == "key_id")

            let wrongKind = try await client.request(
                .put, "/admin/tenants/acme/credentials", key: Self.admin,
                json:
                    #"{"kind": "certificate", "pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}"#
            )
            #expect(wrongKind.status == 422, "\(wrongKind.text)")
            #expect((wrongKind.error["message"] as? String)?.contains("token") == true)

            let badField = try await client.request(
                .put, "/admin/tenants/acme/credentials", key: Self.admin, json: #"{"kind": "p8", "pem": "x"}"#)
            #expect(badField.status == 400)
            #expect(badField.errorField == "kind")
            let unknown = try await client.request(
                .put, "/admin/tenants/acme/credentials", key: Self.admin,
                json: #"{"kind": "token", "pem": "x", "passphrase": "y"}"#)
            #expect(unknown.status == 400)
            #expect(unknown.errorCode == "unknown_field")

            // Nothing changed: same file, no new key file, same key on the wire.
            #expect(try String(contentsOfFile: world.tenantsDirectory + "/acme.yaml", encoding: .utf8) == before)
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/keys/AuthKey_ACMEKEY002.p8"))
            #expect(try await Self.send(client, acme, 3).status == 200)
            #expect(world.sandbox.requests.last?.keyID == "ACMEKEY001")
        }
        await world.close()
    }

    @Test func revokeClosesTheOldConnectionsAndAnUnchangedCredentialCannotBeRevoked() async throws {
        let (world, next) = try await Self.world()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            #expect(try await Self.send(client, acme, 4).status == 200)
            let oldConnection = try #require(world.sandbox.requests.last?.connectionID)
            let active = world.sandbox.activeConnections

            // Nothing changed in the file: revoking would cut connections for nothing.
            let unchanged = try await client.request(
                .post, "/admin/tenants/acme/reload", key: Self.admin, json: #"{"revoke": true}"#)
            #expect(unchanged.status == 409, "\(unchanged.text)")
            #expect(unchanged.errorCode == "credential_unchanged")
            #expect(world.sandbox.activeConnections == active)

            let body =
                #"{"kind": "token", "key_id": "ACMEKEY002", "pem": \#(try Self.quoted(next.key.pemRepresentation)), "revoke": true}"#
            let reply = try await client.request(.put, "/admin/tenants/acme/credentials", key: Self.admin, json: body)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["revoked"] as? [String] == ["acme"])
            // The old connection is closed by the time the answer comes.
            let closed = await eventually(timeout: .seconds(10)) { world.sandbox.activeConnections == active - 1 }
            #expect(closed, "the revoked key's connection is still open")

            #expect(try await Self.send(client, acme, 5).status == 200)
            let last = try #require(world.sandbox.requests.last)
            #expect(last.keyID == "ACMEKEY002")
            #expect(last.connectionID != oldConnection)
        }
        await world.close()
    }

    @Test func theAdminRoutesTakeTheAdminTokenOnly() async throws {
        let (world, next) = try await Self.world()
        let acme = world.tenant("acme")
        let upload =
            #"{"kind": "token", "key_id": "ACMEKEY002", "pem": \#(try Self.quoted(next.key.pemRepresentation))}"#
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            for key in [nil, acme.apiKey, "wrong-token"] {
                #expect(
                    try await client.request(.put, "/admin/tenants/acme/credentials", key: key, json: upload).status
                        == 401)
                #expect(try await client.request(.post, "/admin/tenants/acme/reload", key: key).status == 401)
                #expect(try await client.request(.post, "/admin/reload", key: key).status == 401)
            }
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/keys/AuthKey_ACMEKEY002.p8"))
            #expect(try await client.request(.post, "/admin/tenants/nobody/reload", key: Self.admin).status == 404)
        }
        // Without an admin token configured, the admin routes do not exist.
        try await LiveServer.with(world.options(adminToken: nil)) { live async throws in
            let client = live.client()
            #expect(
                try await client.request(.put, "/admin/tenants/acme/credentials", key: "anything", json: upload).status
                    == 404)
        }
        await world.close()
    }

    @Test func aBrokenTenantFileShowsInAdminTenantsAndTheTenantStillSends() async throws {
        let (world, _) = try await Self.world()
        let globex = world.tenant("globex")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let file = world.tenantsDirectory + "/globex.yaml"
            let good = try String(contentsOfFile: file, encoding: .utf8)
            try good.replacingOccurrences(of: "topics: [", with: "topics: [com.globex.other, ").appending(
                "pool: {connections: many}\n"
            )
            .write(toFile: file, atomically: true, encoding: .utf8)

            let all = try await client.request(.post, "/admin/reload", key: Self.admin)
            #expect(all.status == 200, "\(all.text)")
            #expect((all.json["failures"] as? [[String: Any]])?.compactMap { $0["tenant"] as? String } == ["globex"])

            let tenants = try await client.request(.get, "/admin/tenants", key: Self.admin)
            let listed = try #require(
                (tenants.json["tenants"] as? [[String: Any]])?.first { $0["id"] as? String == "globex" })
            let reload = try #require(listed["reload"] as? [String: Any])
            let lastError = try #require(reload["last_error"] as? [String: Any])
            let message = try #require(lastError["message"] as? String)
            #expect(message.contains("globex.yaml:"), "names the file and line: \(message)")
            #expect(message.contains("pool.connections"), "names the field: \(message)")
            #expect(lastError["consecutive_failures"] as? Int == 1)
            // It runs as before: the old topics, the old pool.
            #expect(listed["topics"] as? [String] == ["com.globex.app"])
            #expect(try await Self.send(client, globex, 6).status == 200)
            let metrics = try await client.request(.get, "/metrics", key: Self.admin)
            #expect(metrics.text.contains(#"herald_reload_failures_total{tenant="globex"} 1"#), "\(metrics.text)")

            // Fixed: the error goes away and the change applies.
            try good.write(toFile: file, atomically: true, encoding: .utf8)
            #expect(try await client.request(.post, "/admin/tenants/globex/reload", key: Self.admin).status == 200)
            let after = try await client.request(.get, "/admin/tenants", key: Self.admin)
            let fixed = try #require(
                (after.json["tenants"] as? [[String: Any]])?.first { $0["id"] as? String == "globex" })
            #expect((fixed["reload"] as? [String: Any])?["last_error"] is NSNull)
        }
        await world.close()
    }

    @Test func aRemovedTenantsAPIKeyAnswers401AtOnce() async throws {
        let (world, _) = try await Self.world()
        let globex = world.tenant("globex")
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            #expect(try await Self.send(client, globex, 7).status == 200)
            try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/globex.yaml")
            let all = try await client.request(.post, "/admin/reload", key: Self.admin)
            #expect(all.status == 200, "\(all.text)")
            #expect(all.json["removed"] as? [String] == ["globex"])
            let refused = try await Self.send(client, globex, 8)
            #expect(refused.status == 401, "\(refused.text)")
            #expect(try await Self.send(client, acme, 9).status == 200)
            let tenants = try await client.request(.get, "/admin/tenants", key: Self.admin)
            #expect((tenants.json["tenants"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["acme"])
        }
        await world.close()
    }
}

/// Polls `condition` until it holds or `timeout` passes; returns whether it held.
private func eventually(timeout: Duration = .seconds(60), _ condition: @Sendable () async throws -> Bool) async rethrows
    -> Bool
{
    let clock = ContinuousClock()
    let end = clock.now.advanced(by: timeout)
    while clock.now < end {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}
