import APNsSandbox
import Crypto
import Foundation
import HeraldCore
import Testing

@Suite("APNsSandbox configuration file and demo credentials")
struct SandboxConfigFileTests {
    func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func demoCredentialsWorkWithAConfigFile() async throws {
        let root = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: root) }
        let config = root.appendingPathComponent("config/sandbox").path
        let tenants = root.appendingPathComponent("tenants").path
        let written = try SandboxDemoCredentials.generate(configDirectory: config, tenantsDirectory: tenants, force: false)
        #expect(written.count == 6)
        for path in written {
            #expect(try String(contentsOfFile: path, encoding: .utf8).hasPrefix(SandboxPEM.demoHeader + "\n-----BEGIN "))
        }
        // No silent overwrite.
        #expect(throws: SandboxError.self) {
            try SandboxDemoCredentials.generate(configDirectory: config, tenantsDirectory: tenants, force: false)
        }

        let yaml = """
            listen: {host: 127.0.0.1, port: 0}
            tls:
              ca_certificate: sandbox/demo-ca.pem
              ca_private_key: sandbox/demo-ca.key
            token_keys:
              - team_id: DEMOTEAM01
                key_id: DEMOKEY001
                public_key: sandbox/AuthKey_DEMOKEY001.pub.pem
                topics: [com.example.herald.demo, com.example.herald.demo.voip]
            limits: {max_concurrent_streams: 5, token_update_scope: connection}
            devices:
              - token: "aaaa"
                unregistered_since: "2025-01-01T00:00:00Z"
              - token: "bbbb"
                topic: com.example.herald.demo
            faults: {seed: 3, fraction_500: 0.5, added_latency_ms: 2, goaway_after: 7, drop_after: 11, scope: sandbox}
            record: {in_memory: true}
            """
        let file = try SandboxConfigFile.parse(yaml, baseDirectory: root.appendingPathComponent("config"))
        #expect(file.configuration.maxConcurrentStreams == 5)
        #expect(file.configuration.tokenUpdateScope == .connection)
        #expect(file.configuration.devices.count == 2)
        #expect(file.configuration.faults.seed == 3)
        #expect(file.configuration.faults.addedLatency == 0.002)
        #expect(file.configuration.faults.goawayAfter == 7 && file.configuration.faults.dropAfter == 11)
        #expect(file.configuration.faults.scope == .sandbox)
        #expect(file.caCertificatePath?.hasSuffix("config/sandbox/demo-ca.pem") == true)

        // The demo token key signs tokens this sandbox accepts; the demo certificate connects.
        var configuration = file.configuration
        configuration.faults = .none
        let sandbox = try await APNsSandbox.start(configuration)
        defer { Task { try? await sandbox.shutdown() } }
        let token = try SandboxDemoCredentials.demoToken(privateKeyPath: tenants + "/keys/AuthKey_DEMOKEY001.p8")
        let client = try await RawH2Client.connect(port: sandbox.port, trustRootsPEM: sandbox.trustRootsPEM)
        var request = RawRequest()
        request.authorization = "bearer " + token
        request.topic = "com.example.herald.demo"
        #expect(try await client.roundTrip(request).status == 200)
        await client.close()

        let certificate = try String(contentsOfFile: tenants + "/certs/demo-cert.pem", encoding: .utf8)
        let key = try String(contentsOfFile: tenants + "/certs/demo-cert.key", encoding: .utf8)
        let certClient = try await RawH2Client.connect(
            port: sandbox.port, trustRootsPEM: sandbox.trustRootsPEM,
            clientCertificate: (SandboxPEM.firstBlock(in: certificate), SandboxPEM.firstBlock(in: key)))
        var certRequest = RawRequest()
        certRequest.topic = SandboxDemoCredentials.certificateTopics[1]
        certRequest.pushType = "voip"
        #expect(try await certClient.roundTrip(certRequest).status == 200)
        await certClient.close()
    }

    @Test func theRepositorysSandboxConfigurationLoads() throws {
        // Tests run from the package root.
        let path = FileManager.default.currentDirectoryPath + "/config/sandbox.yaml"
        guard FileManager.default.fileExists(atPath: path) else { return }
        let file = try SandboxConfigFile.load(path: path)
        #expect(file.configuration.port == 2197)
        #expect(file.configuration.tokenKeys.map(\.keyID) == ["DEMOKEY001"])
        #expect(file.configuration.tokenKeys.first?.topics == SandboxDemoCredentials.tokenTopics)
    }

    @Test(arguments: [
        ("listen: {port: 70000}", "listen.port"),
        ("tls: {ca_certificate: a.pem}", "tls"),
        ("token_keys: [{team_id: SHORT, key_id: KEY0000001, public_key: x.pem, topics: [a]}]", "token_keys[0]"),
        ("devices: [{token: \"zz\", topic: a}]", "devices[0].token"),
        ("faults: {fraction_500: 2}", "faults"),
        ("faults: {scope: everywhere}", "faults.scope"),
        ("faults: {drop_after: 0}", "faults.drop_after"),
        ("faults: {goaway_after: -3}", "faults.goaway_after"),
        ("limits: {token_update_scope: everywhere}", "limits.token_update_scope"),
        ("limits: {max_concurrent_streams: many}", "limits.max_concurrent_streams"),
        ("faults: {outages: [{duration: 20}]}", "faults.outages[0]"),
        ("faults: {outages: [{after: 5, duration: 0}]}", "faults.outages[0].duration"),
        ("faults: {outages: [{after: -1, duration: 5}]}", "faults.outages[0].after"),
        ("faults: {outages: [{start: yesterday, duration: 5}]}", "faults.outages[0].start"),
        ("faults: {outages: [{after: 1, start: \"2026-01-01T00:00:00Z\", duration: 5}]}", "faults.outages[0]"),
    ])
    func badConfigurationNamesTheField(_ yaml: String, _ field: String) throws {
        do {
            _ = try SandboxConfigFile.parse(yaml, baseDirectory: URL(fileURLWithPath: "/nonexistent"))
            Issue.record("accepted: \(yaml)")
        } catch let error as SandboxError {
            #expect(error.message.contains(field), "\(error.message)")
        }
    }

    @Test func outageWindowsReadAsDatesOrSecondsAfterStart() throws {
        let yaml = """
            faults:
              outages:
                - {after: 30, duration: 20}
                - {start: "2026-01-01T12:00:00Z", duration: 60}
            """
        let before = Date()
        let file = try SandboxConfigFile.parse(yaml, baseDirectory: URL(fileURLWithPath: "/nonexistent"))
        let outages = file.configuration.faults.outages
        #expect(outages.count == 2)
        #expect(outages[0].duration == 20)
        #expect(outages[0].start >= before.addingTimeInterval(30))
        #expect(outages[0].start <= Date().addingTimeInterval(30))
        #expect(outages[1].start == ISO8601DateFormatter().date(from: "2026-01-01T12:00:00Z"))
        #expect(outages[1].end == outages[1].start.addingTimeInterval(60))
    }
}
