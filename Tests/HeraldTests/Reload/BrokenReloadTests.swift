import Crypto
import Foundation
import Herald
import HeraldCore
import MetricsTestKit
import Synchronization
import Testing

/// A replacement that does not validate changes nothing: the running runtime keeps sending on
/// its old configuration, and the error is visible (status, failures, metric).
@Suite("Broken replacement files")
struct BrokenReloadTests {
    enum Breakage: String, CaseIterable, Sendable {
        case yamlSyntax
        case notAKey
        case keyForAnotherCurve
        case unknownPlugin
        case badPluginOption
        case certificateMissingTopic
        case certificateExpired
    }

    @Test("old configuration keeps sending, the error is visible", arguments: Breakage.allCases)
    func brokenReplacement(_ breakage: Breakage) async throws {
        let metrics = TestMetrics()
        try await withReloadRig(metrics: metrics) { rig in
            let certificateCase = breakage == .certificateMissingTopic || breakage == .certificateExpired
            let id = try TenantID(certificateCase ? "certco" : "acme")
            let topic = certificateCase ? ReloadRig.certTopics[0] : ReloadRig.topics[0]
            if certificateCase {
                try rig.writeCertificateTenant("certco", certificate: try rig.issueCertificate())
            } else {
                try rig.writeTokenTenant("acme")
            }
            try await rig.coordinator.reloadAll(trigger: .startup)
            let running = try #require(rig.router.runtime(for: id))
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1, topic: topic)).status == 200)

            switch breakage {
            case .yamlSyntax:
                try rig.write("id: acme\nteam_id: [unclosed\n", to: "acme.yaml")
            case .notAKey:
                try rig.write(
                    "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
                    to: "keys/AuthKey_KEYA000001.p8")
            case .keyForAnotherCurve:
                try rig.write(P384Key.pem, to: "keys/AuthKey_KEYA000001.p8")
            case .unknownPlugin:
                try rig.writeTokenTenant("acme", extra: "plugins:\n  - name: no-such-plugin\n")
            case .badPluginOption:
                try rig.writeTokenTenant(
                    "acme", extra: "plugins:\n  - name: rate-limit\n    options: {per_second: -5}\n")
            case .certificateMissingTopic:
                // The new certificate does not allow the tenant's voip topic.
                try rig.writeCertificateTenant(
                    "certco", certificate: try rig.issueCertificate(topics: [ReloadRig.certTopics[0]]))
            case .certificateExpired:
                let expired = try rig.ca.issueClientCertificate(
                    commonName: "expired", topics: ReloadRig.certTopics, notBefore: Date().addingTimeInterval(-7200),
                    notAfter: Date().addingTimeInterval(-3600))
                try rig.writeCertificateTenant("certco", certificate: expired)
            }

            await #expect(throws: ReloadError.self) { try await rig.coordinator.reload(tenant: id) }
            // The watcher, SIGHUP and POST /admin/reload take the whole-directory path: same outcome.
            let report = try await rig.coordinator.reloadAll(trigger: .watcher)
            #expect(report.failures.count == 1)
            #expect(report.reloaded.isEmpty && report.removed.isEmpty)

            // Nothing was swapped: the same runtime, still open, still sending.
            #expect(rig.router.runtime(for: id) === running)
            #expect(!running.isClosed)
            for seed in 2...5 {
                #expect(try await rig.router.send(tenant: id, notification: rig.note(seed, topic: topic)).status == 200)
            }

            // Visible: the tenant's last reload error, the failure list, the metric.
            let status = try #require(rig.coordinator.status(of: id))
            let message = try #require(status.lastError)
            #expect(
                message.contains(certificateCase ? "certco.yaml" : "acme.yaml") || message.contains(".p8"), "\(message)"
            )
            #expect(status.consecutiveFailures == 2)
            #expect(status.lastErrorAt != nil)
            #expect(rig.coordinator.failures.contains { $0.tenant == id })
            let counter = try metrics.expectCounter("herald_reload_failures_total", [("tenant", id.rawValue)])
            #expect(counter.totalValue == 2)
            // No secret in the message: the key's PEM body never appears.
            #expect(!message.contains("bm90IGEga2V5"))
            #expect(!message.contains("BEGIN"))
        }
    }

    @Test("fixing the file clears the error and applies the fix")
    func fixClearsError() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            try rig.writeTokenTenant("acme", extra: "plugins:\n  - name: no-such-plugin\n")
            try await rig.coordinator.reloadAll()
            #expect(rig.coordinator.status(of: id)?.lastError != nil)

            try rig.writeTokenTenant("acme", keyID: "KEYB000001")
            let report = try await rig.coordinator.reloadAll()
            #expect(report.reloaded == [id])
            #expect(report.failures.isEmpty)
            #expect(rig.coordinator.status(of: id)?.lastError == nil)
            #expect(rig.coordinator.failures.isEmpty)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(9)).status == 200)
            #expect(rig.sandbox.requests.last?.keyID == "KEYB000001")
        }
    }

    @Test("a new tenant whose file is broken is not added; a broken file keeps its running tenant")
    func brokenNewAndBrokenExisting() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            try rig.write("id: newco\nteam_id: RLDTEAM001\n", to: "newco.yaml")
            try rig.write("{{{", to: "acme.yaml")  // unreadable: its tenant ID cannot be read from it
            let report = try await rig.coordinator.reloadAll()
            #expect(report.added.isEmpty && report.removed.isEmpty)
            #expect(report.failures.count == 2)
            #expect(rig.router.runtime(for: try TenantID("newco")) == nil)
            #expect(rig.router.runtime(for: try TenantID("acme")) != nil)
            #expect(rig.coordinator.status(of: try TenantID("newco"))?.lastError != nil)
        }
    }
}

/// A P-384 key: a valid PEM key that cannot sign ES256 tokens.
enum P384Key {
    static var pem: String { P384.Signing.PrivateKey().pemRepresentation + "\n" }
}
