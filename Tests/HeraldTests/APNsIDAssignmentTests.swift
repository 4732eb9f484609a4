import APNsSandbox
import Foundation
import Herald
import HeraldCore
import Synchronization
import Testing

/// Records, for every attempt it sees, the apns-id of the notification and the one its logger
/// names.
private struct IDProbe: PushMiddleware {
    let seen: Mutex<[String]>.Box

    func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
        seen.append("\(notification.id.rawValue) \(context.logger[metadataKey: "herald.apns-id"] ?? "none")")
        return .proceed
    }
}

private struct IDProbeFactory: PluginFactory {
    let seen: Mutex<[String]>.Box
    let name = "id-probe"

    func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware {
        _ = try PluginOptions(options, allowed: [])
        return IDProbe(seen: seen)
    }
}

@Suite("apns-id: assigned once, the same at every layer")
struct APNsIDAssignmentTests {
    private func router(_ seen: Mutex<[String]>.Box, transport: ScriptedTransport) async throws -> Router {
        var registry = PluginRegistry.standard()
        registry.register(IDProbeFactory(seen: seen))
        let router = try Fixtures.router(transports: ScriptedTransports { _ in transport }, registry: registry)
        let probe = Fixtures.plugin("id-probe")
        let retry = Fixtures.plugin("retry", .obj(["initial_backoff_ms": .int(1), "max_backoff_ms": .int(1)]))
        #expect(await router.install([Fixtures.tenant("ids", plugins: [retry, probe])]).failures.isEmpty)
        return router
    }

    @Test(
        "a send without an apns-id gets one from the router: its plugins, its logger, every attempt and the result carry it"
    )
    func assignedOnceBySending() async throws {
        let seen = Mutex<[String]>.Box()
        let transport = ScriptedTransport([.respond(status: 503, reason: .serviceUnavailable)])
        let router = try await router(seen, transport: transport)
        let tenant = Fixtures.tenantID("ids")

        let result = try await router.send(tenant: tenant, notification: Fixtures.note())
        let id = result.notificationID
        #expect(result.isSuccess && result.attempts == 2)
        #expect(try NotificationID(id.rawValue) == id)
        #expect(transport.attempts.map(\.notification.id) == [id, id])
        #expect(seen.values == ["\(id) \(id)", "\(id) \(id)"])

        // The callback form gives its send an apns-id in the same way; each send its own.
        let started = await withCheckedContinuation {
            (done: CheckedContinuation<Result<PushResult, any Error>, Never>) in
            router.startSend(tenant: tenant, notification: Fixtures.note(), retries: false) {
                done.resume(returning: $0)
            }
        }
        let other = try started.get().notificationID
        #expect(other != id)
        #expect(transport.attempts.last?.notification.id == other)
        #expect(seen.values.last == "\(other) \(other)")
    }

    @Test("a caller's apns-id is kept as given, by both forms")
    func callerGiven() async throws {
        let seen = Mutex<[String]>.Box()
        let transport = ScriptedTransport()
        let router = try await router(seen, transport: transport)
        let tenant = Fixtures.tenantID("ids")
        var note = Fixtures.note()
        note.id = try NotificationID("5E2C3A71-7A4E-4B36-9D0A-3F3C2D1E0F00")
        let given = try #require(note.id)
        #expect(given.rawValue == "5e2c3a71-7a4e-4b36-9d0a-3f3c2d1e0f00")

        #expect(try await router.send(tenant: tenant, notification: note).notificationID == given)
        let started = await withCheckedContinuation {
            (done: CheckedContinuation<Result<PushResult, any Error>, Never>) in
            router.startSend(tenant: tenant, notification: note, retries: false) {
                done.resume(returning: $0)
            }
        }
        #expect(try started.get().notificationID == given)
        #expect(transport.attempts.map(\.notification.id) == [given, given])
        #expect(seen.values == ["\(given) \(given)", "\(given) \(given)"])
    }

    @Test(
        "a send cut off by a credential revocation is resent on the tenant's new runtime with its apns-id, under its generation")
    func resentWithTheSameID() async throws {
        let old = HoldingTransport(holds: true)
        let new = HoldingTransport(holds: false)
        let router = try Fixtures.router(transports: TransportSequence([old, new]), clock: SystemPushClock())
        let tenant = Fixtures.tenant("rv")
        #expect(await router.install([tenant]).failures.isEmpty)

        let sending = Task {
            try await router.send(tenant: tenant.id, notification: Fixtures.note())
        }
        // Once the send is held on the old credential: swap the runtime and revoke the old one.
        while old.started.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        let replaced = router.exchange(try router.makeRuntime(for: tenant))
        await replaced?.revoke()

        let result = try await sending.value
        #expect(result.status == 200)
        #expect(old.started == [result.notificationID] && new.started == [result.notificationID])
        #expect(result.attempts == 2)
        let generations = old.generations + new.generations
        #expect(generations.count == 2 && generations[0] != generations[1])
        #expect(router.runtime(for: tenant.id)?.credentialGeneration == generations[1])
    }

    @Test("against APNsSandbox: the apns-id APNs gets is the router's, or the caller's, and comes back in the result")
    func onTheWire() async throws {
        try await withSandboxRig { rig in
            await rig.router.install([try rig.tenant("wire")])
            let tenant = Fixtures.tenantID("wire")
            let made = try await rig.router.send(tenant: tenant, notification: rig.note(1))
            var note = rig.note(2)
            note.id = Fixtures.apnsID()
            let given = try await rig.router.send(tenant: tenant, notification: note)
            #expect(given.notificationID == note.id)

            let requests = rig.sandbox.requests
            #expect(requests.map(\.apnsID) == [made.notificationID.rawValue, given.notificationID.rawValue])
            #expect(requests.allSatisfy { $0.apnsIDFromRequest }, "Herald sends an apns-id with every request")
            #expect([made.response.apnsID, given.response.apnsID] == [made.notificationID, given.notificationID])
        }
    }
}
