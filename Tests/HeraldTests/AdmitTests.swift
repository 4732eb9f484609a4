import Foundation
import Herald
import HeraldCore
import Testing

/// `TenantConfiguration.admit`: the policy `TenantRuntime` applies once to every send (and the
/// HTTP API, as `admissionCheck`, to every batch item), tested as a value (no router, no transport).
@Suite("Tenant policy as a value")
struct AdmitTests {
    let tenant = Fixtures.tenant(
        "admit", topics: ["com.example.app", "com.example.app.voip"], development: nil)

    func refusal(_ note: HeraldCore.Notification, environment: APNsEnvironment? = nil) -> PushError? {
        do {
            _ = try tenant.admit(note, id: Fixtures.apnsID(), environment: environment)
            return nil
        } catch {
            return error
        }
    }

    @Test("an admitted notification carries its apns-id, its topic, its push type and the tenant's default environment")
    func admitted() throws {
        let note = Fixtures.note(topic: "com.example.app.voip", pushType: .voip)
        let id = Fixtures.apnsID()
        let admitted = try tenant.admit(note, id: id, environment: nil, credentialGeneration: 7)
        var sent = note
        sent.id = id
        #expect(admitted.notification == sent)
        #expect(admitted.id == id && admitted.topic == "com.example.app.voip" && admitted.pushType == .voip)
        #expect(admitted.environment == .production && admitted.credentialGeneration == 7)
        #expect(try tenant.admit(note, id: id, environment: .production).environment == .production)
        let checked = try tenant.admissionCheck(note, environment: nil)
        #expect(checked.notification == note && checked.environment == .production)
    }

    @Test("a caller's apns-id is replaced by the one the admission is given")
    func idReplaced() throws {
        var note = Fixtures.note()
        note.id = Fixtures.apnsID()
        let id = Fixtures.apnsID()
        #expect(try tenant.admit(note, id: id, environment: nil).notification.id == id)
    }

    @Test("each rule refuses with its own code and field, in admit and in admissionCheck alike")
    func refusals() {
        #expect(refusal(Fixtures.note(topic: "com.other.app"))?.code == .topicDisallowed)
        #expect(refusal(Fixtures.note(topic: "com.example.app", pushType: .voip))?.code == .pushTypeMismatch)
        #expect(refusal(Fixtures.note(topic: "com.example.app.voip", pushType: .alert))?.code == .pushTypeMismatch)
        let environment = refusal(Fixtures.note(), environment: .development)
        #expect(environment?.code == .environmentUnavailable)
        let missing = refusal(Fixtures.note(topic: nil))
        #expect(missing?.code == .invalidNotification)
        #expect(missing?.field == "topic")
        let checked = #expect(throws: PushError.self) { try tenant.admissionCheck(Fixtures.note(topic: "com.other.app"), environment: nil) }
        #expect(checked?.code == .topicDisallowed)
    }

    @Test("a single-topic certificate tenant fills in its topic; a token tenant does not")
    func certificateTopic() throws {
        var certificate = Fixtures.tenant("cert", topics: ["com.example.cert"])
        certificate.auth = .certificate(
            CertificateAuthConfiguration(
                identity: .pem(certificateChain: [1], privateKey: Secret(bytes: [2], origin: "test")), passphrase: nil,
                origin: "test"))
        let admitted = try certificate.admit(Fixtures.note(topic: nil), id: Fixtures.apnsID(), environment: nil)
        #expect(admitted.notification.topic == "com.example.cert" && admitted.topic == "com.example.cert")
        let token = Fixtures.tenant("token", topics: ["com.example.cert"])
        #expect(throws: PushError.self) { try token.admit(Fixtures.note(topic: nil), id: Fixtures.apnsID(), environment: nil) }
    }
}
