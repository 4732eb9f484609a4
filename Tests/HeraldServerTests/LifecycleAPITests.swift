import APNsSandbox
import Crypto
import Foundation
import HeraldCore
import HeraldProcess
import HeraldServer
import HeraldStore
import InMemoryLogging
import Logging
import Testing

/// The tenant lifecycle through the admin API: onboarding with a credential, changes, API keys,
/// deletion; every refusal leaves the tenants directory as it was.
@Suite("API: tenant lifecycle")
struct LifecycleAPITests {
    static let admin = "lifecycle-admin-token"

    /// acme and globex have files; `initech` is known to the sandbox (its key signs tokens APNs
    /// accepts) but has no file: the tests onboard it through the API.
    static func world() async throws -> TestWorld {
        let acme = TestTenant.make(id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"])
        let initech = TestTenant.make(id: "initech", teamID: "INITECH001", keyID: "INITECHK01", topics: ["com.initech.app"])
        let world = try await TestWorld.make(tenants: [acme, initech], devices: [], faults: .none, recordPayloads: false)
        try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/initech.yaml")
        try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/keys/initech.p8")
        return world
    }

    static func createBody(_ world: TestWorld, id: String = "initech", pem: String? = nil, keyID: String = "INITECHK01",
                           topics: String = #"["com.initech.app"]"#, extra: String = "") -> String {
        let tenant = world.tenant("initech")
        let key = pem ?? tenant.key.pemRepresentation
        return """
            {"id": "\(id)", "team_id": "\(tenant.teamID)", "topics": \(topics),
             "endpoints": {"development": "https://127.0.0.1:\(world.sandbox.port)", "production": "https://127.0.0.1:\(world.sandbox.port)",
                           "default": "development", "ca_file": "\(world.caPath)"},
             "credential": {"kind": "token", "key_id": "\(keyID)", "pem": \(jsonString(key))}\(extra)}
            """
    }

    static func jsonString(_ text: String) -> String {
        (try? JSONEncoder().encode(text)).map { String(decoding: $0, as: UTF8.self) } ?? #""""#
    }

    static func send(_ client: APIClient, key: String, topic: String = "com.initech.app") async throws -> APIClient.Reply {
        try await client.request(
            .post, "/v1/notifications", key: key,
            json: #"{"device_token": "\#(Tokens.make(0x91, 1))", "topic": "\#(topic)", "payload": {"aps": {"alert": "hi"}}}"#)
    }

    /// Every path under the tenants directory (to show that a refusal wrote nothing).
    static func listing(_ world: TestWorld) -> [String] {
        (FileManager.default.enumerator(atPath: world.tenantsDirectory)?.allObjects as? [String] ?? []).sorted()
    }

    static func mode(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test func onboardingATokenTenantLoadsItAndAnswersItsFirstKeyOnce() async throws {
        let world = try await Self.world()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let created = try await client.request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world))
            #expect(created.status == 201, "\(created.text)")
            #expect(created.headers[.location] == "/admin/tenants/initech")
            let apiKey = try #require((created.json["api_key"] as? [String: Any])?["key"] as? String)
            #expect((created.json["api_key"] as? [String: Any])?["name"] as? String == "default")
            let tenant = try #require(created.json["tenant"] as? [String: Any])
            #expect(tenant["id"] as? String == "initech")
            #expect(tenant["api_keys"] as? [String] == ["default"])
            #expect(!created.text.contains("PRIVATE KEY"))

            // The key works at once, and the notification reaches the sandbox.
            let sent = try await Self.send(client, key: apiKey)
            #expect(sent.status == 200, "\(sent.text)")
            #expect(sent.json["status"] as? Int == 200)

            // The files: mode 0600, the key under initech/.
            let file = world.tenantsDirectory + "/initech.yaml"
            let keyFile = world.tenantsDirectory + "/initech/AuthKey_INITECHK01.p8"
            #expect(Self.mode(file) == 0o600)
            #expect(Self.mode(keyFile) == 0o600)
            let yaml = try String(contentsOfFile: file, encoding: .utf8)
            #expect(yaml.contains(APIKeys.sha256Hex(of: apiKey)))
            #expect(!yaml.contains(apiKey))
            #expect(!Self.listing(world).contains { $0.hasPrefix(".staging") })

            let shown = try await client.request(.get, "/admin/tenants/initech", key: Self.admin)
            #expect(shown.status == 200)
            #expect(shown.json["id"] as? String == "initech")
            #expect(try await client.request(.get, "/admin/tenants/nobody", key: Self.admin).status == 404)
        }
        await world.close()
    }

    @Test func badFieldsAndCredentialsAre422NamingTheFieldAndWriteNothing() async throws {
        let world = try await Self.world()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let before = Self.listing(world)
            let otherCurve = P384.Signing.PrivateKey().pemRepresentation
            // The base64 lines of the keys sent (an error may name the PEM label it expected).
            let secrets = [otherCurve, world.tenant("initech").key.pemRepresentation].flatMap { pem in
                pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
            }
            let cases: [(body: String, field: String)] = [
                (Self.createBody(world, pem: "not a key"), "credential.pem"),
                (Self.createBody(world, pem: otherCurve), "credential.pem"),
                (Self.createBody(world, keyID: "short"), "credential.key_id"),
                (Self.createBody(world, topics: #"["com.initech.app", "has space"]"#), "topics[1]"),
                (Self.createBody(world, topics: "[]"), "topics"),
                // JSON scalars that would read back from the YAML file as the topics "false" and "7".
                (Self.createBody(world, topics: #"["com.initech.app", false]"#), "topics[1]"),
                (Self.createBody(world, topics: "[7]"), "topics[0]"),
                (Self.createBody(world, topics: #""com.initech.app""#), "topics"),
                (Self.createBody(world, extra: #", "pool": {"connections": 0}"#), "pool.connections"),
                (Self.createBody(world, extra: #", "pool": {"connections": 1e400}"#), "pool.connections"),
                (Self.createBody(world, extra: #", "plugins": [{"name": "no-such-plugin"}]"#), "plugins"),
                (Self.createBody(world, extra: #", "colour": "blue""#), "colour"),
                (Self.createBody(world, id: "Not An ID"), "id"),
                (Self.createBody(world, extra: #", "api_key_name": "a/b""#), "api_key_name"),
                (#"{"id": "initech", "team_id": "INITECH001"}"#, "credential"),
            ]
            for (body, field) in cases {
                let reply = try await client.request(.post, "/admin/tenants", key: Self.admin, json: body)
                #expect(reply.status == 422, "\(field): \(reply.text)")
                #expect(reply.errorField?.hasPrefix(field) == true, "\(field): \(reply.text)")
                #expect(!secrets.contains { reply.text.contains($0) }, "\(field): the answer echoes key material")
                #expect(Self.listing(world) == before, "\(field): something was written")
            }
            #expect(try await client.request(.get, "/admin/tenants/initech", key: Self.admin).status == 404)
            // Not JSON at all stays a 400 / 415.
            #expect(try await client.request(.post, "/admin/tenants", key: Self.admin, json: "{").status == 400)
            #expect(try await client.request(.post, "/admin/tenants", key: Self.admin, json: "{}", contentType: "text/plain").status == 415)
            // Without the admin token: 401, and nothing written.
            #expect(try await client.request(.post, "/admin/tenants", key: "wrong", json: Self.createBody(world)).status == 401)
            #expect(Self.listing(world) == before)
        }
        await world.close()
    }

    @Test func anIDInUseIs409AndWritesNothing() async throws {
        let world = try await Self.world()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let before = Self.listing(world)
            let acmeFile = try String(contentsOfFile: world.tenantsDirectory + "/acme.yaml", encoding: .utf8)
            let reply = try await client.request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world, id: "acme"))
            #expect(reply.status == 409, "\(reply.text)")
            #expect(reply.errorCode == "conflict")
            #expect(Self.listing(world) == before)
            #expect(try String(contentsOfFile: world.tenantsDirectory + "/acme.yaml", encoding: .utf8) == acmeFile)
            // The same twice: the second is a conflict.
            #expect(try await client.request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world)).status == 201)
            #expect(try await client.request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world)).status == 409)
        }
        await world.close()
    }

    @Test func patchChangesSettingsAndRefusesBadOnesWithoutWriting() async throws {
        let world = try await Self.world()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            // A topic outside the tenant's list is refused by Herald itself (422 naming `topic`).
            // (Not a `.voip` topic: an alert to a suffixed topic is refused as a push-type mismatch
            // whatever the topics are.)
            let before = try await Self.send(client, key: acme.apiKey, topic: "com.acme.other")
            #expect(before.status == 422 && before.errorField == "topic", "\(before.text)")
            let changed = try await client.request(
                .patch, "/admin/tenants/acme", key: Self.admin, json: #"{"topics": ["com.acme.app", "com.acme.other"]}"#)
            #expect(changed.status == 200, "\(changed.text)")
            #expect(changed.json["topics"] as? [String] == ["com.acme.app", "com.acme.other"])
            // The sandbox knows acme's key for com.acme.app only, so it may answer the new topic
            // itself; the point is that Herald let it through to APNs.
            let after = try await Self.send(client, key: acme.apiKey, topic: "com.acme.other")
            #expect(after.status != 422 && after.errorField != "topic", "\(after.text)")

            let file = world.tenantsDirectory + "/acme.yaml"
            let written = try String(contentsOfFile: file, encoding: .utf8)
            let bad = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"pool": {"connections": -1}}"#)
            #expect(bad.status == 422, "\(bad.text)")
            #expect(bad.errorField == "pool.connections")
            #expect(try String(contentsOfFile: file, encoding: .utf8) == written)
            let notAString = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"topics": [false]}"#)
            #expect(notAString.status == 422, "\(notAString.text)")
            #expect(notAString.errorField == "topics[0]")
            #expect(try String(contentsOfFile: file, encoding: .utf8) == written)
            #expect(try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"team_id": "X"}"#).status == 422)
            #expect(try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: "{}").status == 422)
            #expect(try await client.request(.patch, "/admin/tenants/nobody", key: Self.admin, json: #"{"topics": []}"#).status == 404)
        }
        await world.close()
    }

    @Test func theProxyIsSetShownWithoutCredentialsAndTakenOut() async throws {
        let world = try await Self.world()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let file = world.tenantsDirectory + "/acme.yaml"
            let shown = try await client.request(.get, "/admin/tenants/acme", key: Self.admin)
            #expect(shown.json["proxy"] is NSNull, "\(shown.text)")

            let set = try await client.request(
                .patch, "/admin/tenants/acme", key: Self.admin,
                json: #"{"proxy": {"url": "http://proxy.acme.example:8080", "username": "acme", "password": "env:ACME_PROXY_PASSWORD"}}"#)
            // The password's variable is not set in this process: refused, naming the field.
            #expect(set.status == 422 && set.errorField == "proxy.password", "\(set.text)")
            let written = try String(contentsOfFile: file, encoding: .utf8)
            #expect(!written.contains("proxy"))

            let bare = try await client.request(
                .patch, "/admin/tenants/acme", key: Self.admin, json: #"{"proxy": "socks5://[fd00::7]:1081"}"#)
            #expect(bare.status == 200, "\(bare.text)")
            #expect(bare.json["proxy"] as? String == "socks5://[fd00::7]:1081")
            let direct = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"proxy": "none"}"#)
            #expect(direct.json["proxy"] as? String == "none", "\(direct.text)")
            let refused = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"proxy": "ftp://x"}"#)
            #expect(refused.status == 422 && refused.errorField == "proxy", "\(refused.text)")
            let removed = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"proxy": null}"#)
            #expect(removed.status == 200 && removed.json["proxy"] is NSNull, "\(removed.text)")
            #expect(!(try String(contentsOfFile: file, encoding: .utf8)).contains("proxy"))
        }
        await world.close()
    }

    @Test func apiKeysAreAddedShownOnceListedByNameAndRevoked() async throws {
        let world = try await Self.world()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let added = try await client.request(.post, "/admin/tenants/acme/api-keys", key: Self.admin, json: #"{"name": "ci"}"#)
            #expect(added.status == 201, "\(added.text)")
            let key = try #require(added.json["key"] as? String)
            #expect(try await Self.send(client, key: key, topic: "com.acme.app").status == 200)
            let shown = try await client.request(.get, "/admin/tenants/acme", key: Self.admin)
            #expect(shown.json["api_keys"] as? [String] == ["test", "ci"])
            #expect(!shown.text.contains(key))

            #expect(try await client.request(.post, "/admin/tenants/acme/api-keys", key: Self.admin, json: #"{"name": "ci"}"#).status == 409)
            #expect(try await client.request(.post, "/admin/tenants/acme/api-keys", key: Self.admin, json: #"{"name": ""}"#).status == 422)

            let removed = try await client.request(.delete, "/admin/tenants/acme/api-keys/ci", key: Self.admin)
            #expect(removed.status == 204, "\(removed.text)")
            #expect(try await Self.send(client, key: key, topic: "com.acme.app").status == 401)
            #expect(try await Self.send(client, key: acme.apiKey, topic: "com.acme.app").status == 200)
            #expect(try await client.request(.delete, "/admin/tenants/acme/api-keys/ci", key: Self.admin).status == 404)
        }
        await world.close()
    }

    @Test func topicsKeysAndBodiesAreBoundedAndCredentialHealthIsShown() async throws {
        let world = try await Self.world()
        // acme starts with 100 API keys (its `test` key and 99 more), the most a tenant may have.
        let file = world.tenantsDirectory + "/acme.yaml"
        let more = (1...99).map { "  - name: k\($0)\n    sha256: \(APIKeys.sha256Hex(of: "bound-key-\($0)"))\n" }.joined()
        let yaml = try String(contentsOfFile: file, encoding: .utf8)
        #expect(yaml.contains("api_keys:\n"))
        try yaml.replacingOccurrences(of: "api_keys:\n", with: "api_keys:\n" + more).write(toFile: file, atomically: true, encoding: .utf8)
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let before = try String(contentsOfFile: file, encoding: .utf8)
            let key = try await client.request(.post, "/admin/tenants/acme/api-keys", key: Self.admin, json: #"{"name": "one-too-many"}"#)
            #expect(key.status == 422 && key.errorField == "name", "\(key.text)")

            let topics = (0...1000).map { "\"com.acme.t\($0)\"" }.joined(separator: ",")
            let many = try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: #"{"topics": [\#(topics)]}"#)
            #expect(many.status == 422 && many.errorField == "topics", "\(many.text)")
            let huge = #"{"topics": ["com.acme.app"], "plugins": [{"name": "metrics", "options": {"x": "\#(String(repeating: "a", count: 70_000))"}}]}"#
            #expect(try await client.request(.patch, "/admin/tenants/acme", key: Self.admin, json: huge).status == 413)
            #expect(try String(contentsOfFile: file, encoding: .utf8) == before)

            // The credential monitor's look shows in the tenant (a token tenant: the key's age).
            let clock = ContinuousClock()
            let end = clock.now.advanced(by: .seconds(60))
            var health: [String: Any]?
            while health == nil, clock.now < end {
                health = try await client.request(.get, "/admin/tenants/acme", key: Self.admin).json["credential_health"] as? [String: Any]
                if health == nil { try await Task.sleep(for: .milliseconds(100)) }
            }
            let look = try #require(health, "credential_health never appeared")
            #expect(look["key_age_days"] as? Int == 0, "\(look)")
            #expect(look["certificate_not_after"] is NSNull)
        }
        await world.close()
    }

    @Test func noSecretReachesTheLogOrAnAnswerExceptTheNewKeyOnce() async throws {
        let world = try await Self.world()
        let logs = InMemoryLogHandler()
        var logger = Logger(label: "test.herald", factory: { _ in logs })
        logger.logLevel = .trace
        let options = world.options(adminToken: Self.admin) { $0.logger = logger }
        let pem = world.tenant("initech").key.pemRepresentation
        let keyLines = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
        let (keys, answers) = try await LiveServer.with(options) { live async throws -> ([String], [String]) in
            var keys: [String] = []
            var answers: [String] = []
            let client = live.client()
            // Refused (no topics: the key was read and then refused), created, a second key, reads,
            // a PATCH, a send and the delete: everything the lifecycle logs.
            answers.append(try await client.request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world, topics: "[]")).text)
            let created = try await client.request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world))
            #expect(created.status == 201, "\(created.text)")
            keys.append(try #require((created.json["api_key"] as? [String: Any])?["key"] as? String))
            let added = try await client.request(.post, "/admin/tenants/initech/api-keys", key: Self.admin, json: #"{"name": "ci"}"#)
            keys.append(try #require(added.json["key"] as? String))
            answers.append(try await client.request(.get, "/admin/tenants/initech", key: Self.admin).text)
            answers.append(try await client.request(.get, "/admin/tenants", key: Self.admin).text)
            answers.append(try await client.request(.patch, "/admin/tenants/initech", key: Self.admin, json: #"{"topics": ["com.initech.app"]}"#).text)
            #expect(try await Self.send(client, key: keys[0]).status == 200)
            answers.append(try await client.request(.delete, "/admin/tenants/initech", key: Self.admin).text)
            return (keys, answers)
        }
        let logged = logs.entries.map { "\($0.message) \($0.metadata)" }
        #expect(logged.contains { $0.contains("tenant created through the admin API") }, "the log captured nothing useful")
        for secret in keyLines + keys + [Self.admin] {
            #expect(!logged.contains { $0.contains(secret) }, "a secret is in the log")
            #expect(!answers.contains { $0.contains(secret) }, "a secret is in an answer")
        }
        await world.close()
    }

    @Test func deletingATenantWithAJobInFlightArchivesItsFilesAndKeepsItsItems() async throws {
        let world = try await Self.world()
        // Slow answers keep the job running while the tenant is deleted.
        world.sandbox.setFaults(SandboxFaults(addedLatency: 0.02))
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let tokens = (0..<400).map { "\"\(Tokens.make(0x93, $0))\"" }.joined(separator: ",")
            let batch = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: #"{"notification": {"topic": "com.acme.app", "payload": {"aps": {}}}, "device_tokens": [\#(tokens)]}"#)
            #expect(batch.status == 202, "\(batch.text)")
            let jobID = try #require(batch.json["job_id"] as? String)

            let deleted = try await client.request(.delete, "/admin/tenants/acme", key: Self.admin)
            #expect(deleted.status == 200, "\(deleted.text)")
            let archive = try #require(deleted.json["archive"] as? String)
            #expect(FileManager.default.fileExists(atPath: archive + "/acme.yaml"))
            #expect(FileManager.default.fileExists(atPath: archive + "/keys/acme.p8"))
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/acme.yaml"))
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/keys/acme.p8"))

            #expect(try await Self.send(client, key: acme.apiKey, topic: "com.acme.app").status == 401)
            #expect(try await client.request(.get, "/admin/tenants/acme", key: Self.admin).status == 404)
            #expect(try await client.request(.delete, "/admin/tenants/acme", key: Self.admin).status == 404)

            // Every item is still in the store: sent before the delete, or waiting.
            let outcomes = try await live.server.sharedStore.outcomes(tenant: try TenantID("acme"), job: try JobID(jobID))
            #expect(outcomes.reduce(0) { $0 + $1.count } == 400)
        }
        await world.close()
    }

    @Test func aTenantCreatedThroughTheAPISurvivesARestart() async throws {
        let world = try await Self.world()
        let options = world.options(adminToken: Self.admin)
        let key = try await LiveServer.with(options) { live async throws -> String in
            let created = try await live.client().request(.post, "/admin/tenants", key: Self.admin, json: Self.createBody(world))
            #expect(created.status == 201, "\(created.text)")
            return try #require((created.json["api_key"] as? [String: Any])?["key"] as? String)
        }
        try await LiveServer.with(options) { live async throws in
            #expect(live.server.loadedTenants.contains(try TenantID("initech")))
            let sent = try await Self.send(live.client(), key: key)
            #expect(sent.status == 200, "\(sent.text)")
        }
        await world.close()
    }
}
