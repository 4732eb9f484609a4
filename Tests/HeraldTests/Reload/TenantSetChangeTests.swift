import APNsSandbox
import Foundation
import Herald
import HeraldCore
import Synchronization
import Testing

/// Adding and removing tenants, and changes that keep the credential, while others send.
@Suite("Adding, removing and editing tenants")
struct TenantSetChangeTests {
    @Test("add and remove tenants while another sends: its connections are untouched")
    func addAndRemoveWhileSending() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("steady", connections: 3)
            try rig.writeTokenTenant("leaving", connections: 2)
            try await rig.coordinator.reloadAll(trigger: .startup)
            let steady = try TenantID("steady")
            let leaving = try TenantID("leaving")
            let arriving = try TenantID("arriving")
            // Warm up: every connection of both tenants open.
            let warm = LoadRun()
            try await warm.run(rig: rig, tenant: steady, count: 300, concurrency: 12, seedBase: 1_000_000)
            #expect(try await rig.router.send(tenant: leaving, notification: rig.note(1)).status == 200)
            let steadyRuntime = try #require(rig.router.runtime(for: steady))
            let leavingRuntime = try #require(rig.router.runtime(for: leaving))
            let accepted = rig.sandbox.connectionCount
            let warmIDs = Set(warm.outcomes.withLock { $0.map(\.apnsID) })
            let steadyConnections = Set(rig.sandbox.requests.filter { warmIDs.contains($0.apnsID) }.map(\.connectionID))

            let load = LoadRun()
            let observed = Mutex<ReloadReport?>(nil)
            try await load.run(rig: rig, tenant: steady, count: 1_500, concurrency: 12, milestone: 500) {
                try FileManager.default.removeItem(atPath: rig.path("leaving.yaml"))
                try rig.writeTokenTenant("arriving", connections: 2)
                let report = try await rig.coordinator.reloadAll(trigger: .watcher)
                observed.withLock { $0 = report }
                // The leaving tenant takes no sends any more; the new one does.
                await #expect(throws: PushError.self) {
                    try await rig.router.send(tenant: leaving, notification: rig.note(2))
                }
                #expect(try await rig.router.send(tenant: arriving, notification: rig.note(3)).status == 200)
            }

            let report = try #require(observed.withLock { $0 })
            #expect(report.added == [arriving])
            #expect(report.removed == [leaving])
            #expect(report.unchanged == [steady])
            let undelivered = load.undelivered
            #expect(undelivered.count == 0, "not delivered: \(undelivered.sample)")
            // The steady tenant kept its runtime and its connections: its requests after the
            // change went only to connections it had before.
            #expect(rig.router.runtime(for: steady) === steadyRuntime)
            #expect(!steadyRuntime.isClosed)
            #expect(leavingRuntime.isClosed)
            let loadIDs = Set(load.outcomes.withLock { $0.map(\.apnsID) })
            let steadyAfter = Set(rig.sandbox.requests.filter { loadIDs.contains($0.apnsID) }.map(\.connectionID))
            #expect(steadyAfter.isSubset(of: steadyConnections), "the steady tenant opened new connections")
            // Only the arriving tenant's connections were accepted since.
            #expect(rig.sandbox.connectionCount - accepted <= 2)
            let leavingError = await #expect(throws: PushError.self) {
                try await rig.router.send(tenant: leaving, notification: rig.note(4))
            }
            #expect(leavingError?.code == .unknownTenant)
            #expect(rig.coordinator.status(of: leaving) == nil)
        }
    }

    @Test("API keys change at the swap; observers see every reload")
    func apiKeysAtSwap() async throws {
        try await withReloadRig { rig in
            let first = String(repeating: "a", count: 64)
            let second = String(repeating: "b", count: 64)
            try rig.writeTokenTenant("acme", extra: "api_keys:\n  - {name: backend, sha256: \(first)}\n")
            let seen = Mutex<[ReloadReport]>([])
            rig.coordinator.onChange { report in seen.withLock { $0.append(report) } }
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            #expect(rig.router.runtime(for: id)?.configuration.apiKeys.map(\.sha256Hex) == [first])
            let generation = rig.coordinator.generation

            try rig.writeTokenTenant("acme", extra: "api_keys:\n  - {name: backend, sha256: \(second)}\n")
            try await rig.coordinator.reload(tenant: id)
            #expect(rig.router.runtime(for: id)?.configuration.apiKeys.map(\.sha256Hex) == [second])
            #expect(rig.coordinator.generation == generation + 1)
            let reports = seen.withLock { $0 }
            #expect(reports.count == 2)
            #expect(reports.last?.reloaded == [id])
        }
    }

    @Test("a change that keeps the key keeps its token: no TooManyProviderTokenUpdates; back to an old key too")
    func sameKeyKeepsToken() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1)).status == 200)
            let identity = rig.router.runtime(for: id)?.credentialIdentity

            // Plugins change, the key stays: a new runtime, the same credential and token.
            try rig.writeTokenTenant(
                "acme", extra: "plugins:\n  - name: rate-limit\n    options: {per_second: 100000}\n")
            #expect(try await rig.coordinator.reload(tenant: id).reloaded == [id])
            #expect(rig.router.runtime(for: id)?.credentialIdentity == identity)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(2)).status == 200)

            // To the new key and back within minutes: each key keeps the token it had.
            try rig.writeTokenTenant("acme", keyID: "KEYB000001")
            try await rig.coordinator.reload(tenant: id)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(3)).status == 200)
            try rig.writeTokenTenant("acme", keyID: "KEYA000001")
            try await rig.coordinator.reload(tenant: id)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(4)).status == 200)

            let statuses = rig.sandbox.requests.map { $0.status }
            #expect(
                statuses.allSatisfy { $0 == 200 },
                "\(rig.sandbox.requests.map { ($0.keyID ?? "-", $0.reason?.wireValue ?? "") })")
            // Two distinct tokens were ever seen, one per key.
            #expect(rig.sandbox.counters.tokenVerifications == 2)
        }
    }

    @Test("revoke asks for a new credential: with the same one nothing changes")
    func revokeNeedsNewCredential() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            let running = try #require(rig.router.runtime(for: id))
            let unchanged = await #expect(throws: ReloadError.self) {
                try await rig.coordinator.reload(tenant: id, revoke: true)
            }
            #expect(unchanged?.isCredentialUnchanged == true)
            // A change that keeps the key: also refused with revoke.
            try rig.writeTokenTenant("acme", connections: 2)
            let sameKey = await #expect(throws: ReloadError.self) {
                try await rig.coordinator.reload(tenant: id, revoke: true)
            }
            #expect(sameKey?.isCredentialUnchanged == true)
            #expect(rig.router.runtime(for: id) === running)
            #expect(!running.isClosed)
            // reloadAll(revoke:) revokes only what rotated: here it is an ordinary swap.
            let report = try await rig.coordinator.reloadAll(revoke: true)
            #expect(report.reloaded == [id])
            #expect(report.revoked.isEmpty)
        }
    }

    @Test("unknown tenants are reported as such")
    func unknownTenant() async throws {
        try await withReloadRig { rig in
            try await rig.coordinator.reloadAll(trigger: .startup)
            let error = await #expect(throws: ReloadError.self) {
                try await rig.coordinator.reload(tenant: try TenantID("nobody"))
            }
            #expect(error?.isUnknownTenant == true)
        }
    }
}
