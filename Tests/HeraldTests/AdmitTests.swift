import Foundation
import Herald
import HeraldCore
import Testing

/// `TenantConfiguration.admit`: the policy `TenantRuntime` applies to every send and the HTTP
/// API applies to every batch item, tested as a value (no router, no transport).
@Suite("Tenant policy as a value")
struct AdmitTests {
    let tenant = Fixtures.tenant(
        "admit", topics: ["com.example.app", "com.example.app.voip"], development: nil)

    func refusal(_ note: HeraldCore.Notification, environment: APNsEnvironment? = nil) -> PushError? {
        do {
            _ = try tenant.admit(note, environment: environment)
            return nil
        } catch {
            return error
        }
    }

    @Test("an allowed notification passes unchanged and gets the tenant's default environment")
    func admitted() throws {
        let note = Fixtures.note(topic: "com.example.app.voip", pushType: .voip)
        let admitted = try tenant.admit(note, environment: nil)
        #expect(admitted.notification == note)
        #expect(admitted.environment == .production)
        #expect(try tenant.admit(note, environment: .production).environment == .production)
    }

    @Test("each rule refuses with its own code and field")
    func refusals() {
        #expect(refusal(Fixtures.note(topic: "com.other.app"))?.code == .topicDisallowed)
        #expect(refusal(Fixtures.note(topic: "com.example.app", pushType: .voip))?.code == .pushTypeMismatch)
        #expect(refusal(Fixtures.note(topic: "com.example.app.voip", pushType: .alert))?.code == .pushTypeMismatch)
        let environment = refusal(Fixtures.note(), environment: .development)
        #expect(environment?.code == .environmentUnavailable)
        let missing = refusal(Fixtures.note(topic: nil))
        #expect(missing?.code == .invalidNotification)
        #expect(missing?.field == "topic")
    }

    @Test("a single-topic certificate tenant fills in its topic; a token tenant does not")
    func certificateTopic() throws {
        var certificate = Fixtures.tenant("cert", topics: ["com.example.cert"])
        certificate.auth = .certificate(
            CertificateAuthConfiguration(
                identity: .pem(certificateChain: [1], privateKey: Secret(bytes: [2], origin: "test")), passphrase: nil,
                origin: "test"))
        let admitted = try certificate.admit(Fixtures.note(topic: nil), environment: nil)
        #expect(admitted.notification.topic == "com.example.cert")
        let token = Fixtures.tenant("token", topics: ["com.example.cert"])
        #expect(throws: PushError.self) { try token.admit(Fixtures.note(topic: nil), environment: nil) }
    }
}
