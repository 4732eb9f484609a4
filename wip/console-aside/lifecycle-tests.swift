    /// The onboarding form's fields for a token tenant of the test world's sandbox.
    static func onboardFields(_ world: TestWorld, id: String, keyID: String = "NEWKEY0001") -> [(String, String)] {
        [
            ("id", id), ("team_id", "NEWTEAM001"), ("topics", "com.new.app, com.new.app.voip"),
            ("production", "https://127.0.0.1:\(world.sandbox.port)"), ("development", "https://127.0.0.1:\(world.sandbox.port)"),
            ("kind", "token"), ("key_id", keyID), ("api_key_name", "backend"),
        ]
    }

    static func keyValue(in html: String) -> String? {
        guard let range = html.range(of: #"id="new-key-value">"#) else { return nil }
        let rest = html[range.upperBound...]
        return rest.firstIndex(of: "<").map { String(rest[..<$0]) }
    }

    @Test func onboardingValidatesWritesLoadsAndSurvivesARestart() async throws {
        let world = try await TestWorld.make()
        let key = P256.Signing.PrivateKey()
        let ca = try Array(Data(contentsOf: URL(fileURLWithPath: world.caPath)))
        let files: [(String, String, [UInt8])] = [
            ("key_file", "AuthKey_NEWKEY0001.p8", Array(key.pemRepresentation.utf8)), ("ca_file", "ca.pem", ca),
        ]
        let apiKey = try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws -> String in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)

            // A bad credential: 422 naming the field, nothing written.
            let junk = try await browser.post(
                "/console/onboard", Self.onboardFields(world, id: "newco"), files: [("key_file", "k.p8", Array("junk".utf8))])
            #expect(junk.status == 422)
            #expect(junk.text.contains("key_file: is not a .p8 key"), "\(junk.text)")
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/newco.yaml"))
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/newco"))
            let badTeam = try await browser.post(
                "/console/onboard", Self.onboardFields(world, id: "newco").map { $0.0 == "team_id" ? ($0.0, "bad") : $0 }, files: files)
            #expect(badTeam.status == 422)
            #expect(badTeam.text.contains("team_id"))

            // An ID that exists: 409.
            let taken = try await browser.post("/console/onboard", Self.onboardFields(world, id: "acme"), files: files)
            #expect(taken.status == 409)

            let created = try await browser.post("/console/onboard", Self.onboardFields(world, id: "newco"), files: files)
            #expect(created.status == 201, "\(created.text)")
            let apiKey = try #require(Self.keyValue(in: created.text))
            #expect(apiKey.hasPrefix("hk_"))
            let file = world.tenantsDirectory + "/newco.yaml"
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let keyMode = try FileManager.default.attributesOfItem(atPath: world.tenantsDirectory + "/newco/AuthKey_NEWKEY0001.p8")[
                .posixPermissions] as? Int
            #expect(keyMode == 0o600)
            #expect(try !String(contentsOfFile: file, encoding: .utf8).contains(apiKey), "only the key's SHA-256 is written")
            #expect(Self.isRunning(live, "newco"))
            let page = try await browser.get("/console/tenants/newco")
            #expect(page.text.contains("<code>backend</code>") && !page.text.contains(apiKey), "the key is shown only once")

            // The new key works on the tenant API at once.
            let send = try await live.client().request(
                .post, "/v1/notifications", key: apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x93, 1))", "topic": "com.new.app", "payload": {"aps": {}}}"#)
            #expect(send.status == 200, "\(send.text)")
            return apiKey
        }
        // A restart loads the tenant from its files.
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            #expect(Self.isRunning(live, "newco"))
            let send = try await live.client().request(
                .post, "/v1/notifications", key: apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x93, 2))", "topic": "com.new.app", "payload": {"aps": {}}}"#)
            #expect(send.status == 200, "\(send.text)")
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
            let duplicate = try await browser.post("/console/tenants/globex/api-keys", [("name", "mobile")])
            #expect(duplicate.status == 422)
            let badName = try await browser.post("/console/tenants/globex/api-keys", [("name", "a b/c")])
            #expect(badName.status == 422)

            let revoked = try await browser.post("/console/tenants/globex/api-keys/delete", [("name", "mobile")])
            #expect(revoked.status == 200)
            #expect(revoked.text.contains("was revoked"))
            #expect(try await live.client().request(.post, "/v1/notifications", key: key, json: send).status == 401)
            #expect(try await live.client().request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 200)

            // Deleting needs the ID typed again.
            let unconfirmed = try await browser.post("/console/tenants/globex/delete", [("confirm", "acme")])
            #expect(unconfirmed.status == 422)
            #expect(Self.isRunning(live, "globex"))
            let deleted = try await browser.post("/console/tenants/globex/delete", [("confirm", "globex")])
            #expect(deleted.status == 200)
            #expect(deleted.text.contains("was deleted"))
            #expect(!Self.isRunning(live, "globex"))
            #expect(!FileManager.default.fileExists(atPath: world.tenantsDirectory + "/globex.yaml"))
            let archived = try FileManager.default.contentsOfDirectory(atPath: world.tenantsDirectory + "/.archive")
            #expect(archived.count == 1 && archived[0].hasPrefix("globex-"))
            #expect(try await live.client().request(.post, "/v1/notifications", key: globex.apiKey, json: send).status == 401)
            #expect(try await browser.get("/console/tenants/globex").status == 404)
        }
        await world.close()
    }

