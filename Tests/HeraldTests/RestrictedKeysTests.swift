import APNsSandbox
import Crypto
import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldTestSupport
import Testing

/// A tenant with several token keys, each restricted by Apple to an environment or to topics:
/// every send signed with the key that fits it (the sandbox records the key ID), a send no key
/// fits refused before the wire, and the sandbox refusing a key used in the other environment.
@Suite("Token keys restricted to an environment or to topics")
struct RestrictedKeysTests {
    static let teamID = "TEAMKEYS01"
    static let topics = ["com.keys.app", "com.keys.app.voip", "com.keys.other"]

    struct Keys {
        let development = P256.Signing.PrivateKey()
        let production = P256.Signing.PrivateKey()
        let other = P256.Signing.PrivateKey()

        func sandboxKeys() -> [SandboxTokenKey] {
            [
                SandboxTokenKey(
                    teamID: RestrictedKeysTests.teamID, keyID: "DEVKEY0001", publicKey: development.publicKey,
                    topics: RestrictedKeysTests.topics, environment: .development),
                SandboxTokenKey(
                    teamID: RestrictedKeysTests.teamID, keyID: "PRODKEY001", publicKey: production.publicKey,
                    topics: RestrictedKeysTests.topics, environment: .production),
                SandboxTokenKey(
                    teamID: RestrictedKeysTests.teamID, keyID: "OTHERKEY01", publicKey: other.publicKey, topics: ["com.keys.other"]),
            ]
        }
    }

    static func sandbox(_ environment: APNsEnvironment, keys: Keys, ca: SandboxCertificateAuthority) async throws -> APNsSandbox {
        var configuration = SandboxConfiguration(certificateAuthority: ca)
        configuration.environment = environment
        configuration.tokenKeys = keys.sandboxKeys()
        return try await APNsSandbox.start(configuration, logger: SandboxRig.quietLogger)
    }

    /// The tenant file, with its keys written beside it.
    static func tenant(_ keysYAML: String, keys: Keys, development: APNsSandbox, production: APNsSandbox) throws -> TenantConfiguration {
        let directory = try ScratchDirectories.make("herald-restricted-keys")
        for (name, key) in [("dev", keys.development), ("prod", keys.production), ("other", keys.other)] {
            try ("# test key\n" + key.pemRepresentation + "\n").write(toFile: "\(directory)/\(name).p8", atomically: true, encoding: .utf8)
        }
        try development.trustRootsPEM.write(toFile: "\(directory)/ca.pem", atomically: true, encoding: .utf8)
        let yaml = """
            id: keys
            team_id: \(teamID)
            auth:
              token:
            \(keysYAML)
            topics: [\(topics.joined(separator: ", "))]
            endpoints:
              development: https://127.0.0.1:\(development.port)
              production: https://127.0.0.1:\(production.port)
              default: development
              ca_file: ca.pem

            """
        try yaml.write(toFile: "\(directory)/keys.yaml", atomically: true, encoding: .utf8)
        return try TenantLoader(environment: [:]).loadTenant(file: "\(directory)/keys.yaml")
    }

    static func note(_ topic: String, pushType: PushType = .alert) -> HeraldCore.Notification {
        HeraldCore.Notification(
            deviceToken: SandboxRig.deviceToken(7), topic: topic, pushType: pushType, payload: Array(#"{"aps":{"alert":"k"}}"#.utf8))
    }

    @Test func eachEnvironmentAndTopicIsSignedWithItsOwnKey() async throws {
        let keys = Keys()
        let ca = try SandboxCertificateAuthority.generate()
        let development = try await Self.sandbox(.development, keys: keys, ca: ca)
        let production = try await Self.sandbox(.production, keys: keys, ca: ca)
        let tenant = try Self.tenant(
            """
                - {key_id: OTHERKEY01, key_file: other.p8, topics: [com.keys.other]}
                - {key_id: DEVKEY0001, key_file: dev.p8, environment: development}
                - {key_id: PRODKEY001, key_file: prod.p8, environment: production, topics: [com.keys.app]}
            """, keys: keys, development: development, production: production)
        guard case .token(let token) = tenant.auth else { Issue.record("not a token tenant"); return }
        #expect(token.keys.map(\.keyID) == ["OTHERKEY01", "DEVKEY0001", "PRODKEY001"] && token.isRestricted)

        let router = Router(
            configuration: RouterConfiguration(
                store: try Fixtures.store(), transports: APNsTransportProvider(), logger: SandboxRig.quietLogger))
        let report = await router.install([tenant])
        #expect(report.failures.isEmpty, "\(report.failures)")
        let sends: [(String, PushType, APNsEnvironment, APNsSandbox, String)] = [
            ("com.keys.app", .alert, .development, development, "DEVKEY0001"),
            ("com.keys.app.voip", .voip, .development, development, "DEVKEY0001"),
            ("com.keys.other", .alert, .development, development, "OTHERKEY01"),
            ("com.keys.other", .alert, .production, production, "OTHERKEY01"),
            ("com.keys.app", .alert, .production, production, "PRODKEY001"),
            ("com.keys.app.voip", .voip, .production, production, "PRODKEY001"),
        ]
        for (topic, type, environment, sandbox, keyID) in sends {
            let result = try await router.send(tenant: tenant.id, notification: Self.note(topic, pushType: type), environment: environment)
            #expect(result.status == 200, "\(topic) in \(environment): \(result.status) \(result.reason?.wireValue ?? "")")
            #expect(sandbox.requests.last?.keyID == keyID, "\(topic) in \(environment)")
        }
        #expect(development.requests.count == 3 && production.requests.count == 3)
        await router.shutdown()
        try await development.shutdown()
        try await production.shutdown()
    }

    @Test func aSendNoKeyFitsIsRefusedBeforeTheWire() async throws {
        let keys = Keys()
        let ca = try SandboxCertificateAuthority.generate()
        let development = try await Self.sandbox(.development, keys: keys, ca: ca)
        let production = try await Self.sandbox(.production, keys: keys, ca: ca)
        let tenant = try Self.tenant(
            """
                - {key_id: DEVKEY0001, key_file: dev.p8, environment: development, topics: [com.keys.app]}
            """, keys: keys, development: development, production: production)
        let router = Router(
            configuration: RouterConfiguration(
                store: try Fixtures.store(), transports: APNsTransportProvider(), logger: SandboxRig.quietLogger))
        _ = await router.install([tenant])
        for (topic, environment) in [("com.keys.app", APNsEnvironment.production), ("com.keys.other", .development)] {
            do {
                _ = try await router.send(tenant: tenant.id, notification: Self.note(topic), environment: environment)
                Issue.record("\(topic) in \(environment) was sent")
            } catch let error as PushError {
                #expect(error.code == .noSigningKey && !error.mayHaveReachedAPNs)
                #expect(error.message.contains("DEVKEY0001 (development only, topics com.keys.app)"), "\(error.message)")
            }
        }
        #expect(development.requests.isEmpty && production.requests.isEmpty)
        #expect(try await router.send(tenant: tenant.id, notification: Self.note("com.keys.app"), environment: .development).status == 200)
        await router.shutdown()
        try await development.shutdown()
        try await production.shutdown()
    }

    @Test func theSandboxRefusesAKeyInTheOtherEnvironment() async throws {
        let keys = Keys()
        let ca = try SandboxCertificateAuthority.generate()
        let development = try await Self.sandbox(.development, keys: keys, ca: ca)
        let production = try await Self.sandbox(.production, keys: keys, ca: ca)
        // One unrestricted key, as Herald sees it, that Apple restricted to development.
        let tenant = try Self.tenant(
            """
                  key_id: DEVKEY0001
                  key_file: dev.p8
            """, keys: keys, development: development, production: production)
        let router = Router(
            configuration: RouterConfiguration(
                store: try Fixtures.store(), transports: APNsTransportProvider(), logger: SandboxRig.quietLogger))
        _ = await router.install([tenant])
        let result = try await router.send(tenant: tenant.id, notification: Self.note("com.keys.app"), environment: .production)
        #expect(result.status == 403 && result.reason == .badEnvironmentKeyInToken && result.attempts == 1)
        let status = router.runtime(for: tenant.id)?.transport.status
        #expect(status?.lastError == "credential problem: APNs answered 403 BadEnvironmentKeyInToken", "\(String(describing: status?.lastError))")
        await router.shutdown()
        try await development.shutdown()
        try await production.shutdown()
    }

    @Test(arguments: [
        ("    - {key_id: DEVKEY0001, key_file: dev.p8, environment: staging}", "auth.token[0].environment"),
        ("    - {key_id: DEVKEY0001, key_file: dev.p8}\n    - {key_id: DEVKEY0001, key_file: prod.p8}", "auth.token[1].key_id"),
        ("    - {key_id: DEVKEY0001, key_file: dev.p8, topics: []}", "auth.token[0].topics"),
        ("    []", "auth.token"),
    ])
    func badKeyListsNameTheField(_ yaml: String, _ field: String) async throws {
        let keys = Keys()
        let ca = try SandboxCertificateAuthority.generate()
        let development = try await Self.sandbox(.development, keys: keys, ca: ca)
        defer { Task { try? await development.shutdown() } }
        do {
            _ = try Self.tenant(yaml, keys: keys, development: development, production: development)
            Issue.record("the file loaded")
        } catch let failure as TenantLoadFailure {
            #expect(failure.errors.contains { $0.description.contains(": \(field):") }, "\(failure)")
        }
    }
}
