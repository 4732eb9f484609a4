import APNsSandbox
import Foundation
import HeraldServer
import Logging
import Testing

/// `PUT /admin/tenants/{id}/credentials` with `kind: certificate`, over HTTP against a server in
/// this process: a certificate tenant talks to a sandbox of its own whose CA the test holds, so
/// the test can issue the tenant's next certificate.
@Suite("API: certificate upload")
struct CertificateUploadAPITests {
    static let admin = "admin-token-for-certificate-tests"
    static let topics = ["com.certco.app", "com.certco.app.voip"]

    /// A certificate tenant `certco` (beside TestWorld's token tenants) on its own sandbox.
    struct CertificateTenant {
        var world: TestWorld
        var sandbox: APNsSandbox
        var ca: SandboxCertificateAuthority
        var apiKey: String
        var certPath: String { world.tenantsDirectory + "/certs/certco.pem" }
        var keyPath: String { world.tenantsDirectory + "/certs/certco.key" }
        var filePath: String { world.tenantsDirectory + "/certco.yaml" }

        func issue(_ commonName: String, topics: [String], days: Double) throws -> (
            certificatePEM: String, privateKeyPEM: String
        ) {
            try ca.issueClientCertificate(
                commonName: commonName, topics: topics, notBefore: Date().addingTimeInterval(-3600),
                notAfter: Date().addingTimeInterval(86_400 * days))
        }

        func close() async {
            try? await sandbox.shutdown()
            await world.close()
        }
    }

    static func certificateTenant() async throws -> CertificateTenant {
        let world = try await TestWorld.make()
        let ca = try SandboxCertificateAuthority.generate(commonName: "certco test CA")
        var logger = Logger(label: "test.sandbox.certco")
        logger.logLevel = .critical
        let sandbox = try await APNsSandbox.start(SandboxConfiguration(certificateAuthority: ca), logger: logger)
        let tenant = CertificateTenant(world: world, sandbox: sandbox, ca: ca, apiKey: APIKeys.generate())
        let first = try tenant.issue("Apple Push Services: com.certco.app (first)", topics: topics, days: 30)
        try FileManager.default.createDirectory(
            atPath: world.tenantsDirectory + "/certs", withIntermediateDirectories: true)
        let caPath = world.directory + "/config/certco-ca.pem"
        try sandbox.trustRootsPEM.write(toFile: caPath, atomically: true, encoding: .utf8)
        try first.certificatePEM.write(toFile: tenant.certPath, atomically: true, encoding: .utf8)
        try (first.privateKeyPEM + "\n").write(toFile: tenant.keyPath, atomically: true, encoding: .utf8)
        let yaml = """
            id: certco
            team_id: CERTTEAM01
            auth:
              certificate:
                cert_file: certs/certco.pem
                key_file: certs/certco.key
            topics: [\(topics.joined(separator: ", "))]
            endpoints:
              development: https://127.0.0.1:\(sandbox.port)
              production: https://127.0.0.1:\(sandbox.port)
              default: development
              ca_file: \(caPath)
            api_keys:
              - name: test
                sha256: \(APIKeys.sha256Hex(of: tenant.apiKey))

            """
        try yaml.write(toFile: tenant.filePath, atomically: true, encoding: .utf8)
        return tenant
    }

    static func send(_ client: APIClient, _ tenant: CertificateTenant, _ index: Int) async throws -> APIClient.Reply {
        try await client.request(
            .post, "/v1/notifications", key: tenant.apiKey,
            json:
                #"{"device_token": "\#(Tokens.make(0xC1, index))", "topic": "com.certco.app", "payload": {"aps": {}}}"#
        )
    }

    static func upload(_ certificate: (certificatePEM: String, privateKeyPEM: String), revoke: Bool) throws -> String {
        let pem = try ReloadAPITests.quoted(certificate.certificatePEM + certificate.privateKeyPEM + "\n")
        return #"{"kind": "certificate", "pem": \#(pem), "revoke": \#(revoke)}"#
    }

    /// certco's `auth` object in `GET /admin/tenants`.
    static func listedAuth(_ client: APIClient) async throws -> [String: Any] {
        let tenants = try await client.request(.get, "/admin/tenants", key: admin)
        let listed = (tenants.json["tenants"] as? [[String: Any]] ?? []).first { $0["id"] as? String == "certco" }
        return try #require(listed?["auth"] as? [String: Any], "\(tenants.text)")
    }

    static func permissions(_ path: String) throws -> Int? {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue
    }

    @Test func uploadingANewCertificateWritesItAt0600AndTheNextSendUsesItOnANewConnection() async throws {
        let tenant = try await Self.certificateTenant()
        try await LiveServer.with(tenant.world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let first = try await Self.send(client, tenant, 1)
            #expect(first.status == 200, "\(first.text)")
            let oldRequest = try #require(tenant.sandbox.requests.last)
            #expect(oldRequest.authKind == .certificate && oldRequest.status == 200)
            #expect((try await Self.listedAuth(client))["certificate_subject"] as? String ?? "" != "")
            let subjectBefore = try await Self.listedAuth(client)["certificate_subject"] as? String
            #expect(subjectBefore?.contains("(first)") == true, "\(subjectBefore ?? "nil")")

            let next = try tenant.issue("Apple Push Services: com.certco.app (second)", topics: Self.topics, days: 90)
            let connectionsBefore = tenant.sandbox.connectionCount
            let reply = try await client.request(
                .put, "/admin/tenants/certco/credentials", key: Self.admin, json: try Self.upload(next, revoke: true))
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["reloaded"] as? [String] == ["certco"])
            #expect(reply.json["revoked"] as? [String] == ["certco"])
            #expect(!reply.text.contains("BEGIN"), "neither certificate nor key is echoed")

            // The certificate and its key replace cert_file and key_file, owner-only.
            #expect(try Self.permissions(tenant.certPath) == 0o600)
            #expect(try Self.permissions(tenant.keyPath) == 0o600)
            let writtenCertificate = try String(contentsOfFile: tenant.certPath, encoding: .utf8)
            let writtenKey = try String(contentsOfFile: tenant.keyPath, encoding: .utf8)
            #expect(
                writtenCertificate.trimmingCharacters(in: .whitespacesAndNewlines)
                    == next.certificatePEM.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(!writtenCertificate.contains("PRIVATE KEY"))
            #expect(
                writtenKey.trimmingCharacters(in: .whitespacesAndNewlines)
                    == next.privateKeyPEM.trimmingCharacters(in: .whitespacesAndNewlines))

            // The next send is accepted on a connection opened after the upload (the old ones
            // were revoked), authenticated by certificate; the tenant now shows the new one.
            let second = try await Self.send(client, tenant, 2)
            #expect(second.status == 200, "\(second.text)")
            let newRequest = try #require(tenant.sandbox.requests.last)
            #expect(newRequest.authKind == .certificate && newRequest.status == 200)
            #expect(newRequest.connectionID > connectionsBefore, "sent on a connection opened after the upload")
            #expect(newRequest.connectionID != oldRequest.connectionID)
            let auth = try await Self.listedAuth(client)
            #expect(auth["kind"] as? String == "certificate")
            #expect((auth["certificate_subject"] as? String)?.contains("(second)") == true, "\(auth)")
            let days = auth["expires_in_days"] as? Int ?? 0
            #expect((88...90).contains(days), "the new certificate's expiry: \(auth)")
        }
        await tenant.close()
    }

    @Test func aCertificateThatDoesNotCoverTheTenantsTopicsIs422AndTheTenantKeepsSending() async throws {
        let tenant = try await Self.certificateTenant()
        try await LiveServer.with(tenant.world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            #expect(try await Self.send(client, tenant, 3).status == 200)
            let oldRequest = try #require(tenant.sandbox.requests.last)
            let fileBefore = try String(contentsOfFile: tenant.filePath, encoding: .utf8)
            let certBefore = try String(contentsOfFile: tenant.certPath, encoding: .utf8)
            let keyBefore = try String(contentsOfFile: tenant.keyPath, encoding: .utf8)

            // Valid, from the right CA, but only for the first topic: the voip topic is not covered.
            let narrow = try tenant.issue(
                "Apple Push Services: com.certco.app (narrow)", topics: ["com.certco.app"], days: 90)
            let reply = try await client.request(
                .put, "/admin/tenants/certco/credentials", key: Self.admin, json: try Self.upload(narrow, revoke: true))
            #expect(reply.status == 422, "\(reply.text)")
            #expect(reply.errorField == "pem", "\(reply.text)")
            let message = reply.error["message"] as? String ?? ""
            #expect(message.contains("com.certco.app.voip"), "names the uncovered topic: \(message)")
            #expect(!reply.text.contains("BEGIN"), "neither certificate nor key is echoed")

            // Nothing changed on disk, and the tenant sends on its old certificate and connection.
            #expect(try String(contentsOfFile: tenant.filePath, encoding: .utf8) == fileBefore)
            #expect(try String(contentsOfFile: tenant.certPath, encoding: .utf8) == certBefore)
            #expect(try String(contentsOfFile: tenant.keyPath, encoding: .utf8) == keyBefore)
            let after = try await Self.send(client, tenant, 4)
            #expect(after.status == 200, "\(after.text)")
            let request = try #require(tenant.sandbox.requests.last)
            #expect(request.authKind == .certificate && request.status == 200)
            #expect(request.connectionID == oldRequest.connectionID)
            // Every send of the test on that one connection (the record, not every h2 connection
            // made to the sandbox's port).
            #expect(Set(tenant.sandbox.requests.map(\.connectionID)) == [oldRequest.connectionID])
            let auth = try await Self.listedAuth(client)
            #expect((auth["certificate_subject"] as? String)?.contains("(first)") == true, "\(auth)")
        }
        await tenant.close()
    }
}
