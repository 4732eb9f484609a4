import APNsSandbox
import Foundation
import Herald
import HeraldCore
import HeraldStore
import Testing

/// What APNs' device API answers today, through the real transport against the sandbox:
/// `apns-unique-id` in the development environment, and 410 `ExpiredToken` for a Live
/// Activity's token after the activity ended.
@Suite("APNs' device answers: apns-unique-id and ExpiredToken")
struct DeviceAPIAnswerTests {
    static let expiredSince = Date(timeIntervalSince1970: 1_780_000_000.250)

    @Test("a development answer carries the apns-unique-id the sandbox recorded; a production one none")
    func uniqueID() async throws {
        for environment in [APNsEnvironment.development, .production] {
            try await withSandboxRig(configure: { configuration in
                configuration.environment = environment
                configuration.devices = [.bound(Self.token(of: 2), topic: SandboxRig.topics[1])]
            }) { rig in
                let tenant = try rig.tenant("acme")
                await rig.router.install([tenant])
                let accepted = try await rig.router.send(tenant: tenant.id, notification: rig.note(1))
                let refused = try await rig.router.send(tenant: tenant.id, notification: rig.note(2))
                #expect(accepted.isSuccess && refused.status == 400, "\(accepted) \(refused)")

                let records = rig.sandbox.requests
                #expect(records.count == 2)
                for (result, record) in zip([accepted, refused], records) {
                    #expect(result.response.uniqueID?.rawValue == record.uniqueID, "\(environment)")
                    if environment == .development {
                        let uniqueID = try #require(result.response.uniqueID?.rawValue)
                        #expect(UUIDText.isUUID(uniqueID) && uniqueID == uniqueID.lowercased(), "\(uniqueID)")
                        #expect(uniqueID != result.notificationID.rawValue, "its own id, not the apns-id")
                    } else {
                        #expect(result.response.uniqueID == nil)
                    }
                }
                if environment == .development {
                    #expect(accepted.response.uniqueID != refused.response.uniqueID, "one per answer")
                }
            }
        }
    }

    @Test("an apns-unique-id that is not a UUID is dropped; one in capitals is made canonical")
    func uniqueIDHeaderIsChecked() {
        func read(_ text: String) -> String? {
            var text = text
            return text.withUTF8 { APNsUniqueID(header: UnsafeRawBufferPointer($0))?.rawValue }
        }
        #expect(read("5F3C2E1A-7B2D-4C8E-9A61-2F0B3D4E5A6C") == "5f3c2e1a-7b2d-4c8e-9a61-2f0b3d4e5a6c")
        #expect(read("5f3c2e1a-7b2d-4c8e-9a61-2f0b3d4e5a6c") == "5f3c2e1a-7b2d-4c8e-9a61-2f0b3d4e5a6c")
        #expect(read("") == nil)
        #expect(read("not-a-uuid") == nil)
        #expect(read("5f3c2e1a-7b2d-4c8e-9a61-2f0b3d4e5a6cXX") == nil)
        #expect(read("5f3c2e1a77b2d-4c8e-9a61-2f0b3d4e5a6c") == nil)
    }

    @Test("410 ExpiredToken: recorded with its timestamp by feedback, later sends refused locally, nothing retried")
    func expiredTokenOnASingleSend() async throws {
        try await withSandboxRig(configure: { configuration in
            configuration.devices = [.expired(Self.token(of: 7), since: Self.expiredSince)]
        }) { rig in
            let tenant = try rig.tenant("acme", plugins: [Fixtures.plugin("feedback")])
            await rig.router.install([tenant])
            let note = rig.note(7)
            let first = try await rig.router.send(tenant: tenant.id, notification: note)
            #expect(first.status == 410 && first.reason == .expiredToken && first.attempts == 1, "\(first)")
            #expect(first.response.timestamp.map { abs($0.timeIntervalSince(Self.expiredSince)) < 0.001 } == true)

            let device = try #require(note.deviceToken)
            let record = try #require(
                try await rig.store.invalidToken(
                    tenant: tenant.id, token: device, topic: SandboxRig.topics[0], environment: .development))
            #expect(record.reason == .expiredToken && record.isInvalid)
            let listed = try await rig.store.invalidTokens(tenant: tenant.id, limit: 10)
            #expect(listed.map(\.reason) == [.expiredToken])

            do {
                _ = try await rig.router.send(tenant: tenant.id, notification: note)
                Issue.record("a send to an expired token went out")
            } catch let error as PushError {
                #expect(error.code == .tokenRefused && error.reason == .expiredToken, "\(error)")
            }
            #expect(rig.sandbox.requests.count == 1, "one request: no retry, no second send")
        }
    }

    @Test("a batch item answered ExpiredToken fails with that reason after one attempt")
    func expiredTokenInABatch() async throws {
        try await withSandboxRig(configure: { configuration in
            configuration.devices = [.expired(Self.token(of: 3), since: Self.expiredSince)]
        }) { rig in
            let tenant = try DeliveryRun.tenant(rig, "acme")
            await rig.router.install([tenant])
            let (job, progress) = try await DeliveryRun.run(
                rig, tenant: tenant.id, id: "expired", count: 5, seed: 1, timeout: .seconds(120))
            #expect(progress.sent == 4 && progress.failed == 1 && progress.pending == 0, "\(progress)")
            let items = try await DeliveryRun.items(rig, tenant: tenant.id, job: job.id, count: 5)
            let failed = try #require(items.first { $0.notification.deviceToken?.hex == Self.token(of: 3) })
            #expect(failed.result?.reason == "ExpiredToken" && failed.result?.status == 410 && failed.result?.attempts == 1)
            #expect(rig.sandbox.requests.filter { $0.deviceToken == Self.token(of: 3) }.count == 1)
        }
    }

    static func token(of seed: Int) -> String { SandboxRig.deviceToken(seed).hex }
}
