import Crypto
import Foundation
import Herald
import HeraldCore
import InMemoryLogging
import Logging
import Testing

/// The tenant's webhook under `herald serve`'s loading: the deprecated form is logged with its
/// file:line when the tenant loads, and a secret file rewritten in place is read by the next reload.
@Suite("Reload: the tenant's webhook")
struct WebhookReloadTests {
    static let secret = "reloaded-webhook-secret-0123456789"

    /// A tenants directory with a `.p8` key, and a coordinator over a router that logs to `logs`.
    static func rig(_ logs: InMemoryLogHandler) throws -> (
        directory: String, coordinator: ReloadCoordinator, router: Router
    ) {
        let directory = Fixtures.temporaryDirectory("herald-webhook-reload")
        try FileManager.default.createDirectory(atPath: directory + "/keys", withIntermediateDirectories: true)
        try P256.Signing.PrivateKey().pemRepresentation.write(
            toFile: directory + "/keys/key.p8", atomically: true, encoding: .utf8)
        let router = Router(
            configuration: RouterConfiguration(
                store: try Fixtures.store(), transports: ScriptedTransports(),
                logger: Logger(label: "herald.tests", factory: { _ in logs }),
                webhooks: RecordingWebhooks(), environment: ["HOOK_SECRET": secret]))
        return (
            directory,
            ReloadCoordinator(router: router, configuration: ReloadConfiguration(tenantsDirectory: directory)), router
        )
    }

    /// A token tenant file (lines 1-7) followed by `body` from line 8.
    static func tenant(_ id: String, _ body: String) -> String {
        """
        id: \(id)
        team_id: TEAM000001
        auth:
          token:
            key_id: KEY0000001
            key_file: keys/key.p8
        topics: [com.example.app]
        \(body)
        """
    }

    @Test func theDeprecatedFormIsLoggedWithItsFileAndLine() async throws {
        let logs = InMemoryLogHandler()
        let (directory, coordinator, router) = try Self.rig(logs)
        let file = directory + "/legacy.yaml"
        try Self.tenant(
            "legacy",
            """
            plugins:
              - name: feedback
                options:
                  webhook: https://hooks.example.com/herald
                  secret: env:HOOK_SECRET
            """
        ).write(toFile: file, atomically: true, encoding: .utf8)
        try Self.tenant("modern", "webhook: {url: 'https://hooks.example.com/m', secret: 'env:HOOK_SECRET'}\n")
            .write(toFile: directory + "/modern.yaml", atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: directory + "/keys/key.p8")

        let report = try await coordinator.reloadAll(trigger: .startup)
        #expect(Set(report.added.map(\.rawValue)) == ["legacy", "modern"], "\(report.failures)")
        #expect(
            router.runtime(for: Fixtures.tenantID("legacy"))?.configuration.webhook?.url
                == "https://hooks.example.com/herald")

        let warnings = logs.entries.filter {
            $0.level == .warning && "\($0.message)" == "tenant file loaded with a warning"
        }
        #expect(warnings.count == 1, "only the deprecated form warns: \(warnings.map(\.metadata))")
        let warning = try #require(warnings.first)
        #expect(
            warning.metadata["herald.file"].map { "\($0)" }?.hasPrefix(file + ":11:") == true, "\(warning.metadata)")
        #expect(warning.metadata["herald.field"].map { "\($0)" } == "plugins[0].options.webhook")
        #expect(warning.metadata["herald.warning"].map { "\($0)" }?.contains("deprecated") == true)
        #expect(!logs.entries.contains { "\($0.message) \($0.metadata)".contains(Self.secret) })
        await router.shutdown()
    }

    @Test func aSecretFileRewrittenInPlaceIsReadByTheNextReload() async throws {
        let logs = InMemoryLogHandler()
        let (directory, coordinator, router) = try Self.rig(logs)
        try Self.secret.write(toFile: directory + "/hook.secret", atomically: true, encoding: .utf8)
        try Self.tenant("acme", "webhook: {url: 'https://hooks.example.com/a', secret: 'file:hook.secret'}\n")
            .write(toFile: directory + "/acme.yaml", atomically: true, encoding: .utf8)
        _ = try await coordinator.reloadAll(trigger: .startup)
        let acme = Fixtures.tenantID("acme")
        #expect(router.runtime(for: acme)?.configuration.webhook?.secret.bytes == Array(Self.secret.utf8))

        try "a-rotated-secret-0123456789\n".write(toFile: directory + "/hook.secret", atomically: true, encoding: .utf8)
        let report = try await coordinator.reload(tenant: acme)
        #expect(report.reloaded == [acme], "the tenant file is unchanged; its secret is not")
        #expect(
            router.runtime(for: acme)?.configuration.webhook?.secret.bytes == Array("a-rotated-secret-0123456789".utf8))
        await router.shutdown()
    }
}
