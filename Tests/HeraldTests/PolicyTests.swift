import Foundation
import Herald
import HeraldCore
import Testing

@Suite("Tenant policy before the wire")
struct PolicyTests {
    func refusal(
        _ note: HeraldCore.Notification, tenant config: TenantConfiguration? = nil, environment: APNsEnvironment? = nil
    ) async throws -> PushError? {
        let transports = ScriptedTransports()
        let router = try Fixtures.router(transports: transports)
        let tenant =
            config
            ?? Fixtures.tenant(
                "policy",
                topics: [
                    "com.example.app", "com.example.app.voip", "com.example.app.complication",
                    "com.example.app.push-type.liveactivity",
                ])
        await router.install([tenant])
        do {
            _ = try await router.send(tenant: tenant.id, notification: note, environment: environment)
            return nil
        } catch let error as PushError {
            #expect(
                transports[tenant.id]?.attempts.isEmpty == true, "a refused notification must not reach the transport")
            return error
        }
    }

    @Test("a topic outside the tenant's topics is TopicDisallowed")
    func topicDisallowed() async throws {
        let error = try await refusal(Fixtures.note(topic: "com.other.app"))
        #expect(error?.code == .topicDisallowed)
        #expect(error?.reason == .topicDisallowed)
        #expect(error?.message == "topic 'com.other.app' is not one of tenant 'policy''s topics")
    }

    @Test(
        "push type and topic must agree",
        arguments: [
            (PushType.voip, "com.example.app"), (.alert, "com.example.app.voip"), (.complication, "com.example.app"),
            (.liveactivity, "com.example.app.voip"), (.background, "com.example.app.push-type.liveactivity"),
        ])
    func pushTypeMismatch(pushType: PushType, topic: String) async throws {
        let error = try await refusal(Fixtures.note(topic: topic, pushType: pushType))
        #expect(error?.code == .pushTypeMismatch)
    }

    @Test(
        "matching push types and topics pass",
        arguments: [
            (PushType.voip, "com.example.app.voip"), (.alert, "com.example.app"),
            (.complication, "com.example.app.complication"),
            (.liveactivity, "com.example.app.push-type.liveactivity"), (.background, "com.example.app"),
        ])
    func pushTypeMatch(pushType: PushType, topic: String) async throws {
        #expect(try await refusal(Fixtures.note(topic: topic, pushType: pushType)) == nil)
    }

    @Test("an environment without an endpoint is refused")
    func environment() async throws {
        let tenant = Fixtures.tenant("policy", development: nil)
        let error = try await refusal(Fixtures.note(), tenant: tenant, environment: .development)
        #expect(error?.code == .environmentUnavailable)
        #expect(error?.message == "tenant 'policy' has no development endpoint")
        #expect(try await refusal(Fixtures.note(), tenant: tenant, environment: .production) == nil)
    }

    @Test("a notification APNs would refuse is refused with APNs' reason")
    func invalid() async throws {
        var empty = Fixtures.note()
        empty.payload = []
        let error = try await refusal(empty)
        #expect(error?.code == .invalidNotification && error?.reason == .payloadEmpty && error?.field == "payload")
        let missing = try await refusal(Fixtures.note(topic: nil))
        #expect(missing?.reason == .missingTopic)
    }

    @Test("an unknown tenant is refused")
    func unknownTenant() async throws {
        let router = try Fixtures.router()
        await #expect(throws: PushError.unknownTenant("nobody")) {
            _ = try await router.send(tenant: Fixtures.tenantID("nobody"), notification: Fixtures.note())
        }
    }
}
