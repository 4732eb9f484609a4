import Foundation
import HeraldAPNs
import HeraldConfig
import HeraldCore
import Testing

@Suite("Tenant loader")
struct TenantLoaderTests {
    @Test func loadsATokenTenantWithAppleDefaults() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write("acme.yaml", TenantFixture.tokenTenant)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)

        #expect(tenant.id.rawValue == "acme")
        #expect(tenant.teamID == "ABCDE12345")
        #expect(tenant.topics == ["com.acme.app", "com.acme.app.voip"])
        #expect(tenant.sourceFile == file)
        guard case .token(let token) = tenant.auth else {
            Issue.record("expected token auth, got \(tenant.auth)")
            return
        }
        #expect(token.keyID == "ABC123DEFG")
        #expect(token.privateKey.text.contains(fixture.tokenKeyPEM))
        #expect(token.privateKey.origin == "file \(fixture.path("keys/AuthKey_ABC123DEFG.p8"))")
        #expect(tenant.endpoints.production == .production)
        #expect(tenant.endpoints.development == .development)
        #expect(tenant.endpoints.defaultEnvironment == .production)
        #expect(tenant.endpoints.trustRootsPEM == nil)
        #expect(tenant.pool == PoolConfiguration())
        #expect(tenant.plugins.isEmpty)
        #expect(tenant.apiKeys.isEmpty)
    }

    @Test func aTokenTenantBuildsACredentialProvider() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write("acme.yaml", TenantFixture.tokenTenant)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)
        let provider = try CredentialProviders.make(for: tenant, clock: ManualWallClock(Date()))
        #expect(provider.kind == .token)
        #expect(provider.summary.keyID == "ABC123DEFG")
        #expect(provider.summary.teamID == "ABCDE12345")
    }

    @Test func loadsACertificateTenantAndItsCredential() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write("acme-cert.yaml", TenantFixture.certificateTenant)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)

        #expect(tenant.id.rawValue == "acme-cert")
        guard case .certificate(let certificate) = tenant.auth else {
            Issue.record("expected certificate auth, got \(tenant.auth)")
            return
        }
        guard case .pem(let chain, let key) = certificate.identity else {
            Issue.record("expected a PEM identity")
            return
        }
        #expect(String(decoding: chain, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----"))
        #expect(key.text.contains(fixture.certificateKeyPEM))
        #expect(certificate.passphrase == nil)
        #expect(certificate.origin == fixture.path("certs/client.pem"))
        #expect(tenant.endpoints.production == APNsEndpoint(host: "localhost", port: 2197))
        #expect(tenant.endpoints.development == APNsEndpoint(host: "localhost", port: 2197))
        #expect(tenant.endpoints.defaultEnvironment == .development)
        #expect(tenant.endpoints.trustRootsOrigin == fixture.path("certs/ca.pem"))
        #expect(
            tenant.endpoints.trustRootsPEM.map { String(decoding: $0, as: UTF8.self) }?.contains("BEGIN CERTIFICATE")
                == true)

        let provider = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
        #expect(provider.kind == .certificate)
        #expect(provider.summary.certificateTopics == TenantFixture.certificateTopics)
        #expect(provider.summary.notAfter != nil)
    }

    @Test func pkcs12TenantWithPassphraseFromAFile() throws {
        let fixture = try TenantFixture()
        try fixture.write("certs/pass.txt", "correct horse\n")
        let file = try fixture.write(
            "acme.yaml",
            """
            team_id: ABCDE12345
            auth:
              certificate:
                pkcs12_file: certs/bundle.p12
                passphrase: file:certs/pass.txt
            topics: [com.acme.app]

            """)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)
        #expect(tenant.id.rawValue == "acme", "the id defaults to the file name")
        guard case .certificate(let certificate) = tenant.auth, case .pkcs12(let bundle) = certificate.identity else {
            Issue.record("expected a PKCS#12 identity")
            return
        }
        #expect(bundle.bytes == [0x30, 0x82, 0x01, 0x00, 0x02, 0x01, 0x03])
        #expect(certificate.passphrase?.text == "correct horse", "one trailing newline is removed")
        #expect(certificate.passphrase?.origin == "file \(fixture.path("certs/pass.txt"))")
    }

    @Test func secretsFromTheEnvironment() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write(
            "acme.yaml",
            """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key: env:ACME_APNS_KEY
            topics: [com.acme.app]

            """)
        let loader = TenantLoader(environment: ["ACME_APNS_KEY": fixture.tokenKeyPEM])
        let tenant = try loader.loadTenant(file: file)
        guard case .token(let token) = tenant.auth else {
            Issue.record("expected token auth")
            return
        }
        #expect(token.privateKey.text == fixture.tokenKeyPEM)
        #expect(token.privateKey.origin == "env ACME_APNS_KEY")
        #expect("\(token.privateKey)" == "<secret from env ACME_APNS_KEY>")
        _ = try CredentialProviders.make(for: tenant, clock: SystemWallClock())

        // An empty variable is an error that names the variable.
        let emptyFailure = try #require(TenantLoader(environment: ["ACME_APNS_KEY": ""]).failure(of: file))
        #expect(
            emptyFailure.errors.map(\.description) == [
                "\(file):5:10: auth.token.key: environment variable ACME_APNS_KEY is empty"
            ])
    }

    @Test func relativePathsAreRelativeToTheTenantFile() throws {
        let fixture = try TenantFixture()
        try FileManager.default.createDirectory(atPath: fixture.path("tenants"), withIntermediateDirectories: true)
        let file = try fixture.write(
            "tenants/acme.yaml",
            """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: ../keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            endpoints:
              ca_file: ../certs/ca.pem

            """)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)
        #expect(tenant.endpoints.trustRootsOrigin == fixture.path("tenants/../certs/ca.pem"))
        // Absolute paths are used as they are.
        let absolute = try fixture.write(
            "tenants/abs.yaml",
            """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: file:\(fixture.path("keys/AuthKey_ABC123DEFG.p8"))
            topics: [com.acme.app]

            """)
        let abs = try TenantLoader(environment: [:]).loadTenant(file: absolute)
        guard case .token(let token) = abs.auth else { return }
        #expect(token.privateKey.origin == "file \(fixture.path("keys/AuthKey_ABC123DEFG.p8"))")
    }

    @Test func optionalSectionsAreParsed() throws {
        let fixture = try TenantFixture()
        let hash = String(repeating: "ab", count: 32)
        let file = try fixture.write(
            "acme.yaml",
            TenantFixture.tokenTenant + """
                endpoints:
                  production: null
                  development: https://[::1]:2197
                pool:
                  connections: 4
                  max_queued: 100
                  request_timeout: 500ms
                  idle_timeout: 10m
                  ping_interval: 15
                  open_next_at: 32
                  max_streams: 100
                plugins:
                  - metrics
                  - name: rate-limit
                    options:
                      per_second: 50
                      burst: 2.5
                      enabled: true
                      label: "100"
                      tags: [a, b]
                      nested: {x: null}
                api_keys:
                  - name: ci
                    sha256: \(hash)

                """)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)
        #expect(tenant.endpoints.production == nil)
        #expect(tenant.endpoints.development == APNsEndpoint(host: "::1", port: 2197))
        #expect(tenant.endpoints.defaultEnvironment == .development, "the default follows the only configured endpoint")
        #expect(tenant.pool.connections == 4)
        #expect(tenant.pool.maxQueued == 100)
        #expect(tenant.pool.requestTimeout == 0.5)
        #expect(tenant.pool.idleTimeout == 600)
        #expect(tenant.pool.pingInterval == 15)
        #expect(tenant.pool.openNextAt == 32)
        #expect(tenant.pool.maxStreams == 100)
        #expect(TransportConfiguration(pool: tenant.pool).streamCeiling == 100)
        #expect(tenant.plugins.map(\.name) == ["metrics", "rate-limit"])
        #expect(tenant.plugins[0].options == .object([]))
        #expect(tenant.plugins[0].location == HeraldCore.SourceLocation(file: file, line: 20, column: 5))
        #expect(tenant.plugins[1].location == HeraldCore.SourceLocation(file: file, line: 21, column: 5))
        let expected: JSONValue = .object([
            ("per_second", .int(50)), ("burst", .double(2.5)), ("enabled", .bool(true)), ("label", .string("100")),
            ("tags", .array([.string("a"), .string("b")])), ("nested", .object([("x", .null)])),
        ])
        #expect(tenant.plugins[1].options == expected)
        #expect(tenant.apiKeys == [APIKeyEntry(name: "ci", sha256Hex: hash)])
    }

    @Test func oneBrokenFileDoesNotStopTheOthers() throws {
        let fixture = try TenantFixture()
        let dir = fixture.path("tenants")
        try FileManager.default.createDirectory(atPath: dir + "/keys", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: fixture.path("keys/AuthKey_ABC123DEFG.p8"), toPath: dir + "/keys/AuthKey_ABC123DEFG.p8")
        try fixture.write(
            "tenants/alpha.yaml", TenantFixture.tokenTenant.replacingOccurrences(of: "id: acme", with: "id: alpha"))
        try fixture.write(
            "tenants/bravo.yml", TenantFixture.tokenTenant.replacingOccurrences(of: "ABCDE12345", with: "nope"))
        try fixture.write(
            "tenants/charlie.yaml", TenantFixture.tokenTenant.replacingOccurrences(of: "id: acme", with: "id: charlie"))
        try fixture.write("tenants/notes.txt", "not a tenant")
        try fixture.write("tenants/.hidden.yaml", "garbage: [")

        let load = try TenantLoader(environment: [:]).loadDirectory(dir)
        #expect(load.tenants.map(\.id.rawValue) == ["alpha", "charlie"])
        #expect(load.failures.map(\.file) == [dir + "/bravo.yml"])
        #expect(
            load.failures.first?.errors.map(\.description) == [
                "\(dir)/bravo.yml:2:10: team_id: must be exactly 10 characters (A-Z, 0-9); this team ID has 4"
            ])
        #expect(load.failures.first?.tenantID?.rawValue == "acme")
        #expect(!load.isValid)
        #expect(
            try TenantLoader.tenantFiles(in: dir) == [dir + "/alpha.yaml", dir + "/bravo.yml", dir + "/charlie.yaml"])
    }

    @Test func duplicateIDsFailEveryFileThatClaimsThem() throws {
        let fixture = try TenantFixture()
        let first = try fixture.write("first.yaml", TenantFixture.tokenTenant)
        let second = try fixture.write("second.yaml", TenantFixture.tokenTenant)
        // No id: key, so the file name gives "acme", the same id again.
        let third = try fixture.write(
            "acme.yaml", TenantFixture.tokenTenant.replacingOccurrences(of: "id: acme\n", with: ""))
        let other = try fixture.write(
            "other.yaml", TenantFixture.tokenTenant.replacingOccurrences(of: "id: acme", with: "id: other"))

        let load = TenantLoader(environment: [:]).loadFiles([first, second, third, other])
        #expect(load.tenants.map(\.id.rawValue) == ["other"])
        #expect(load.failures.map(\.file) == [first, second, third])
        #expect(
            load.failures[0].errors.map(\.description) == [
                "\(first):1:5: id: duplicate tenant id 'acme': also used by \(second), \(third)"
            ])
        #expect(
            load.failures[1].errors.map(\.description) == [
                "\(second):1:5: id: duplicate tenant id 'acme': also used by \(first), \(third)"
            ])
        #expect(
            load.failures[2].errors.map(\.description) == [
                "\(third):1:1: id: duplicate tenant id 'acme' (from the file name): also used by \(first), \(second)"
            ])
    }

    @Test func missingDirectoryIsAnError() throws {
        #expect(throws: ConfigFileError(path: "/nonexistent/herald-tenants", message: "tenants directory not found")) {
            try TenantLoader().loadDirectory("/nonexistent/herald-tenants")
        }
        let fixture = try TenantFixture()
        let file = try fixture.write("acme.yaml", TenantFixture.tokenTenant)
        #expect(throws: ConfigFileError(path: file, message: "is a file, not a tenants directory")) {
            try TenantLoader().loadDirectory(file)
        }
    }

    @Test func parseTenantFromText() throws {
        let fixture = try TenantFixture()
        let tenant = try TenantLoader(environment: [:]).parseTenant(
            yaml: TenantFixture.tokenTenant, file: fixture.path("acme.yaml"))
        #expect(tenant.id.rawValue == "acme")
    }

    @Test func laterChecksAreReportedAtTheFieldsLocation() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write("acme.yaml", TenantFixture.tokenTenant)
        let load = TenantLoader(environment: [:]).loadFiles([file])
        let tenant = try #require(load.tenants.first)
        #expect(
            load.location(of: "auth.token.key_file", in: tenant)
                == HeraldCore.SourceLocation(file: file, line: 6, column: 15))
        #expect(
            load.location(of: "auth.token.key", in: tenant) == HeraldCore.SourceLocation(file: file, line: 4, column: 3)
        )
        #expect(
            load.location(of: "auth.token.key_id", in: tenant)
                == HeraldCore.SourceLocation(file: file, line: 5, column: 13))
        #expect(
            load.location(of: "topics[1]", in: tenant) == HeraldCore.SourceLocation(file: file, line: 7, column: 24))
        #expect(load.location(of: "topics[5]", in: tenant) == HeraldCore.SourceLocation(file: file, line: 7, column: 9))
        #expect(
            load.location(of: "pool.connections", in: tenant)
                == HeraldCore.SourceLocation(file: file, line: 1, column: 1))

        let checked = load.checking { _ in ("auth.token.key_file", "the key is not a P-256 key") }
        #expect(checked.tenants.isEmpty)
        #expect(
            checked.failures.map(\.description) == ["\(file):6:15: auth.token.key_file: the key is not a P-256 key"])
        #expect(load.checking { _ in nil }.tenants.map(\.id) == load.tenants.map(\.id))
    }
}

@Suite("Secrets never appear in errors")
struct SecretRedactionTests {
    @Test func noErrorDescriptionContainsSecretMaterial() throws {
        let fixture = try TenantFixture()
        let secretKeyText = "NOT-A-PEM-BUT-VERY-SECRET-0123456789"
        let secretPassphrase = "hunter2-passphrase-SECRET"
        let rawAPIKey = "sk_live_SECRET_api_key_material"
        try fixture.write("keys/bad.p8", secretKeyText + "\n")

        let files = [
            // A key (in the environment) that is not PEM.
            """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key: env:BAD_KEY
            topics: [com.acme.app]
            """,
            // A key file that is not PEM.
            """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/bad.p8
            topics: [com.acme.app]
            """,
            // A passphrase written into the file.
            """
            team_id: ABCDE12345
            auth:
              certificate:
                cert_file: certs/client.pem
                key_file: certs/client.key
                passphrase: \(secretPassphrase)
            topics: [com.acme.app]
            """,
            // A raw API key where its hash belongs.
            """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            api_keys:
              - name: ci
                sha256: \(rawAPIKey)
            """,
            // A syntax error on a line holding a secret.
            """
            team_id: ABCDE12345
            auth: { token: { key_id: ABC123DEFG, key: "\(secretKeyText)
            topics: [com.acme.app]
            """,
            // A duplicated key whose values are secrets.
            """
            team_id: ABCDE12345
            passphrase: \(secretPassphrase)
            passphrase: \(secretPassphrase)
            """,
        ]
        let environment = ["BAD_KEY": secretKeyText, "OTHER": secretPassphrase]
        let loader = TenantLoader(environment: environment)
        var descriptions: [String] = []
        for (i, yaml) in files.enumerated() {
            let file = try fixture.write("tenant-\(i).yaml", yaml + "\n")
            let failure = try #require(loader.failure(of: file), "file \(i) should fail")
            descriptions.append(failure.description)
            descriptions.append(String(describing: failure))
        }
        #expect(descriptions.count == files.count * 2)
        for text in descriptions {
            for secret in [secretKeyText, secretPassphrase, rawAPIKey, fixture.tokenKeyPEM, fixture.certificateKeyPEM] {
                #expect(!text.contains(secret), "an error shows secret material: \(text)")
            }
        }
    }

    @Test func loadedSecretsPrintOnlyTheirOrigin() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write("acme.yaml", TenantFixture.tokenTenant)
        let tenant = try TenantLoader(environment: [:]).loadTenant(file: file)
        let printed = "\(tenant) \(String(reflecting: tenant))"
        #expect(!printed.contains("PRIVATE KEY"))
        #expect(!printed.contains(fixture.tokenKeyPEM))
    }
}

@Suite("Committed demo tenants")
struct DemoTenantTests {
    @Test func demoTenantsLoadAndTheirCredentialsBuild() throws {
        let directory = packageRoot() + "/tenants"
        let load = try TenantLoader(environment: [:]).loadDirectory(directory)
        #expect(load.failures.map(\.description) == [])
        #expect(load.tenants.map(\.id.rawValue) == ["demo-cert", "demo-token"])
        for tenant in load.tenants {
            #expect(tenant.endpoints.defaultEnvironment == .development)
            #expect(tenant.endpoints.development == APNsEndpoint(host: "localhost", port: 2197))
            #expect(tenant.endpoints.trustRootsPEM != nil)
            let provider = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
            #expect(provider.kind == tenant.auth.kind)
        }
        let token = try #require(load.tenants.first { $0.id.rawValue == "demo-token" })
        #expect(token.teamID == "DEMOTEAM01")
        #expect(token.topics == ["com.example.herald.demo", "com.example.herald.demo.voip"])
        let cert = try #require(load.tenants.first { $0.id.rawValue == "demo-cert" })
        #expect(cert.teamID == "DEMOTEAM02")
        #expect(cert.topics == ["com.example.herald.certdemo", "com.example.herald.certdemo.voip"])
    }
}
