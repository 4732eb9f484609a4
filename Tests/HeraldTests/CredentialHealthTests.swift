import APNsSandbox
import Crypto
import Foundation
import Herald
import HeraldCore
import InMemoryLogging
import Logging
import MetricsTestKit
import Synchronization
import Testing

/// Credential health: certificate expiry and key age as gauges per tenant, warnings from 30 days
/// before a certificate expires, a notice to the tenant (its webhook) from 14 days, once a day.
@Suite("Credential health")
struct CredentialHealthTests {
    final class Notices: CredentialExpiryNotifier {
        let seen = Mutex<[(TenantID, Date)]>([])
        func certificateExpiring(_ health: CredentialHealth, tenant: TenantConfiguration, now: Date) async {
            seen.withLock { $0.append((tenant.id, now)) }
        }
        var tenants: [String] { seen.withLock { $0.map(\.0.rawValue) } }
    }

    static func certificateTenant(_ id: String, ca: SandboxCertificateAuthority, expiresIn: TimeInterval, now: Date)
        throws -> TenantConfiguration
    {
        let issued = try ca.issueClientCertificate(
            commonName: "Apple Push Services: com.example.\(id)", topics: ["com.example.\(id)"],
            notBefore: now.addingTimeInterval(-86_400 * 300), notAfter: now.addingTimeInterval(expiresIn))
        return TenantConfiguration(
            id: Fixtures.tenantID(id), teamID: "TEAM000001",
            auth: .certificate(
                CertificateAuthConfiguration(
                    identity: .pem(
                        certificateChain: Array(issued.certificatePEM.utf8),
                        privateKey: Secret(bytes: Array(issued.privateKeyPEM.utf8), origin: "test")),
                    passphrase: nil, origin: "test")),
            topics: ["com.example.\(id)"], endpoints: EndpointsConfiguration(), sourceFile: "tenants/\(id).yaml")
    }

    @Test("gauges, the 14-day notice once a day, key age from the key file, gauges gone with the tenant")
    func monitor() async throws {
        // The real date: the issued certificates must parse; the monitor's own clock is manual.
        let start = Date()
        let clock = ManualWallClock(start)
        let ca = try SandboxCertificateAuthority.generate()
        let soon = try Self.certificateTenant("soon", ca: ca, expiresIn: 10 * 86_400, now: start)
        let later = try Self.certificateTenant("later", ca: ca, expiresIn: 20 * 86_400, now: start)
        let far = try Self.certificateTenant("far", ca: ca, expiresIn: 200 * 86_400, now: start)

        let keyDirectory = Fixtures.temporaryDirectory("herald-key-age")
        let keyPath = keyDirectory + "/AuthKey_KEY0000001.p8"
        try Data("test key file (not read by scripted transports)\n".utf8).write(to: URL(fileURLWithPath: keyPath))
        try FileManager.default.setAttributes(
            [.modificationDate: start.addingTimeInterval(-100 * 86_400)], ofItemAtPath: keyPath)
        let token = TenantConfiguration(
            id: Fixtures.tenantID("token"), teamID: "TEAM000001",
            auth: .token(
                TokenAuthConfiguration(keyID: "KEY0000001", privateKey: Secret(bytes: [1], origin: "file \(keyPath)"))),
            topics: ["com.example.app"], sourceFile: "tenants/token.yaml")

        let router = try Fixtures.router()
        _ = await router.install([soon, later, far, token])
        #expect(router.tenantIDs.count == 4)

        let metrics = TestMetrics()
        let notices = Notices()
        let logs = InMemoryLogHandler()
        let monitor = CredentialHealthMonitor(
            router: router, clock: clock, metricsFactory: metrics, notifier: notices,
            logger: Logger(label: "herald.tests.health", factory: { _ in logs }))
        /// The tenants warned about (`client certificate expires soon` / `has expired`), in order.
        func warned() -> [String] {
            logs.entries.filter { $0.level == .warning && "\($0.message)".hasPrefix("client certificate") }
                .compactMap { $0.metadata["herald.tenant"].map { "\($0)" } }
        }

        let first = await monitor.checkOnce()
        #expect(first.map(\.tenant.rawValue) == ["far", "later", "soon", "token"])
        let soonLeft = try #require(
            try metrics.expectGauge("herald_credential_expiry_seconds", [("tenant", "soon")]).lastValue)
        #expect(abs(soonLeft - 10 * 86_400) < 5)
        let farLeft = try #require(
            try metrics.expectGauge("herald_credential_expiry_seconds", [("tenant", "far")]).lastValue)
        #expect(abs(farLeft - 200 * 86_400) < 5)
        let age = try #require(
            try metrics.expectGauge("herald_credential_key_age_seconds", [("tenant", "token")]).lastValue)
        #expect(abs(age - 100 * 86_400) < 5)
        #expect(monitor.health(of: Fixtures.tenantID("token"))?.certificateNotAfter == nil)

        // Only the certificate under 14 days is sent to the tenant, and once a day; the log warns
        // from 30 days (soon: 10, later: 20; far: 200 is not warned about), once a day too.
        #expect(notices.tenants == ["soon"])
        #expect(warned().sorted() == ["later", "soon"])
        clock.advance(by: 3600)
        await monitor.checkOnce()
        #expect(notices.tenants == ["soon"])
        #expect(warned().count == 2)
        #expect(
            try metrics.expectGauge("herald_credential_expiry_seconds", [("tenant", "soon")]).lastValue
                == soonLeft - 3600)

        // A week later "later" is under 14 days too; "soon" is due again.
        clock.advance(by: 7 * 86_400)
        await monitor.checkOnce()
        #expect(notices.tenants.sorted() == ["later", "soon", "soon"])
        #expect(warned().sorted() == ["later", "later", "soon", "soon"])
        // No log line of the monitor carries key material.
        #expect(!logs.entries.contains { "\($0.message) \($0.metadata)".contains("PRIVATE KEY") })

        // Expired: still reported (negative seconds), still noticed once a day.
        clock.advance(by: 5 * 86_400)
        await monitor.checkOnce()
        let expired = try #require(
            try metrics.expectGauge("herald_credential_expiry_seconds", [("tenant", "soon")]).lastValue)
        #expect(expired < 0)

        // A removed tenant's gauges go.
        await router.remove(tenant: Fixtures.tenantID("soon"))
        await monitor.checkOnce()
        #expect(monitor.health(of: Fixtures.tenantID("soon")) == nil)
        #expect(throws: (any Error).self) {
            try metrics.expectGauge("herald_credential_expiry_seconds", [("tenant", "soon")])
        }
    }

    final class RecordingQueue: WebhookQueue {
        let queued = Mutex<[(WebhookRequest, TenantID)]>([])
        func enqueue(_ request: WebhookRequest, tenant: TenantID, attempts: Int, initialBackoff: Duration) async throws {
            queued.withLock { $0.append((request, tenant)) }
        }
    }

    @Test("the 14-day notice goes to the tenant's webhook, signed; tenants without one get nothing")
    func webhookNotice() async throws {
        let now = Date()
        let ca = try SandboxCertificateAuthority.generate()
        // The webhook alone, without the feedback plugin.
        var hooked = try Self.certificateTenant("hooked", ca: ca, expiresIn: 10 * 86_400, now: now)
        hooked.webhook = TenantWebhook(
            url: "https://hooks.example.com/herald", secret: Secret(bytes: Array("s3cret-value-of-32-bytes-or-more".utf8), origin: "env HOOK_SECRET"),
            secretReference: "env:HOOK_SECRET")
        #expect(hooked.plugins.isEmpty)
        let silent = try Self.certificateTenant("silent", ca: ca, expiresIn: 10 * 86_400, now: now)
        let queue = RecordingQueue()
        let notifier = TenantWebhookExpiryNotifier(queue: queue, logger: .init(label: "herald.tests.health"))
        let health = CredentialHealth(
            tenant: hooked.id, kind: .certificate, certificateNotAfter: now.addingTimeInterval(10 * 86_400), checkedAt: now)
        await notifier.certificateExpiring(health, tenant: hooked, now: now)
        await notifier.certificateExpiring(health, tenant: silent, now: now)

        let queued = queue.queued.withLock { $0 }
        #expect(queued.count == 1)
        let (request, tenant) = try #require(queued.first)
        #expect(tenant == hooked.id)
        #expect(request.url == "https://hooks.example.com/herald")
        #expect(request.headers["X-Herald-Event"] == "credential.expiring")
        let body = try #require(try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
        #expect(body["event"] as? String == "credential.expiring")
        #expect(body["tenant"] as? String == "hooked")
        #expect(body["days_left"] as? Int == 9 || body["days_left"] as? Int == 10)
        // Signed with the webhook's secret over "<timestamp>.<body>"; the secret itself is not sent.
        let timestamp = try #require(request.headers["X-Herald-Timestamp"])
        let expected = HMAC<SHA256>.authenticationCode(
            for: Array(timestamp.utf8) + [UInt8(ascii: ".")] + request.body, using: SymmetricKey(data: Array("s3cret-value-of-32-bytes-or-more".utf8)))
        #expect(request.headers["X-Herald-Signature"] == "sha256=" + expected.map { String(format: "%02x", $0) }.joined())
        #expect(!String(decoding: request.body, as: UTF8.self).contains("s3cret-value-of-32-bytes-or-more"))
    }
}
