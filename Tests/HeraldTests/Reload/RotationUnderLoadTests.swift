import APNsSandbox
import Foundation
import Herald
import HeraldCore
import Synchronization
import Testing

/// Rotating a tenant's key or certificate while it sends 20,000 notifications over several
/// connections: nothing lost, nothing delivered twice, the new credential in use after the swap,
/// the old connections closed.
@Suite("Credential rotation under load", .serialized)
struct RotationUnderLoadTests {
    static let count = 20_000
    static let concurrency = 16

    /// apns-id → the sandbox's records of it.
    static func recordsByID(_ sandbox: APNsSandbox) -> [String: [SandboxRecordedRequest]] {
        Dictionary(grouping: sandbox.requests, by: \.apnsID)
    }

    @Test("token key rotation: none lost, none duplicated, new key ID after the swap, old connections closed")
    func tokenRotation() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme", keyID: "KEYA000001")
            let startup = try await rig.coordinator.reloadAll(trigger: .startup)
            #expect(startup.added == [try TenantID("acme")])
            let id = try TenantID("acme")
            let before = try #require(rig.router.runtime(for: id))

            let load = LoadRun()
            let swapCut = Mutex<Int?>(nil)
            try await load.run(
                rig: rig, tenant: id, count: Self.count, concurrency: Self.concurrency, milestone: Self.count / 4
            ) {
                try rig.writeTokenTenant("acme", keyID: "KEYB000001")
                let report = try await rig.coordinator.reload(tenant: id)
                #expect(report.reloaded == [id])
                #expect(report.revoked.isEmpty)
                // reload returns once the old runtime drained and closed: later requests are all new.
                swapCut.withLock { $0 = rig.sandbox.requests.count }
            }

            let undelivered = load.undelivered
            #expect(undelivered.count == 0, "not delivered: \(undelivered.sample)")
            #expect(load.outcomes.withLock { $0.count } == Self.count)
            let records = Self.recordsByID(rig.sandbox)
            let delivered = records.values.filter { $0.contains { $0.processed && $0.status == 200 } }
            #expect(delivered.count == Self.count)
            #expect(records.values.allSatisfy { $0.filter(\.processed).count == 1 }, "an apns-id was processed twice")

            let requests = rig.sandbox.requests
            let cut = try #require(swapCut.withLock { $0 })
            let oldKey = requests.filter { $0.keyID == "KEYA000001" }
            let newKey = requests.filter { $0.keyID == "KEYB000001" }
            #expect(!oldKey.isEmpty && !newKey.isEmpty)
            #expect(
                requests[cut...].allSatisfy { $0.keyID == "KEYB000001" }, "a request with the old key after the swap")
            #expect(requests.allSatisfy { $0.status != 429 }, "TooManyProviderTokenUpdates after the rotation")
            let oldConnections = Set(oldKey.map(\.connectionID))
            #expect(oldConnections.isDisjoint(with: Set(newKey.map(\.connectionID))))
            #expect(oldConnections.count > 1, "the load should have used several connections")
            #expect(await rig.waitForClosedConnections(atLeast: oldConnections.count))
            #expect(before.isClosed)
            #expect(rig.router.runtime(for: id)?.credentialIdentity != before.credentialIdentity)
        }
    }

    @Test("certificate rotation: none lost, none duplicated, new certificate after the swap, old connections closed")
    func certificateRotation() async throws {
        try await withReloadRig { rig in
            try rig.writeCertificateTenant("certco", certificate: try rig.issueCertificate())
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("certco")
            let before = try #require(rig.router.runtime(for: id))
            // The second certificate also allows a topic the first one does not.
            let second = try rig.issueCertificate(topics: ReloadRig.certTopics + [ReloadRig.secondCertOnlyTopic])

            let load = LoadRun()
            let swap = Mutex<(cut: Int, connections: Int)?>(nil)
            try await load.run(
                rig: rig, tenant: id, count: Self.count, concurrency: Self.concurrency, topic: ReloadRig.certTopics[0],
                milestone: Self.count / 4
            ) {
                let connectionsBefore = rig.sandbox.connectionCount
                try rig.writeCertificateTenant(
                    "certco", certificate: second, topics: ReloadRig.certTopics + [ReloadRig.secondCertOnlyTopic])
                let report = try await rig.coordinator.reload(tenant: id)
                #expect(report.reloaded == [id])
                swap.withLock { $0 = (rig.sandbox.requests.count, connectionsBefore) }
            }

            let undelivered = load.undelivered
            #expect(undelivered.count == 0, "not delivered: \(undelivered.sample)")
            let records = Self.recordsByID(rig.sandbox)
            #expect(records.values.filter { $0.contains { $0.status == 200 } }.count == Self.count)
            #expect(records.values.allSatisfy { $0.filter(\.processed).count == 1 }, "an apns-id was processed twice")

            let requests = rig.sandbox.requests
            let (cut, connectionsBefore) = try #require(swap.withLock { $0 })
            // Connections are numbered in order of acceptance: after the swap, only new ones carry requests.
            let oldConnections = Set(requests[..<cut].map(\.connectionID)).filter { $0 <= connectionsBefore }
            #expect(requests[cut...].allSatisfy { !oldConnections.contains($0.connectionID) })
            #expect(oldConnections.count > 1)
            #expect(await rig.waitForClosedConnections(atLeast: oldConnections.count))
            // Only the new certificate allows this topic, and the sandbox accepts it.
            let proof = try await rig.router.send(
                tenant: id, notification: rig.note(1, topic: ReloadRig.secondCertOnlyTopic))
            #expect(proof.status == 200)
            #expect(before.isClosed)
            #expect(rig.router.runtime(for: id)?.credentialIdentity != before.credentialIdentity)
        }
    }

    @Test("revoke: old connections closed at once, unanswered sends resent once on the new key, none lost")
    func tokenRotationWithRevoke() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme", keyID: "KEYA000001")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            let concurrency = 32

            let load = LoadRun()
            let swapCut = Mutex<Int?>(nil)
            try await load.run(rig: rig, tenant: id, count: Self.count, concurrency: concurrency, milestone: Self.count / 4) {
                // Hold every answer on the old connections, and wait until all the workers' streams
                // are held: the revocation then cuts streams that have no answer.
                let old = try #require(rig.router.runtime(for: id))
                rig.sandbox.setFaults(SandboxFaults(addedLatency: 60))
                // Held: every worker's send is in flight and every answered request was received.
                for _ in 0..<2000
                where old.inFlight < concurrency || rig.sandbox.counters.answered != load.completed.load(ordering: .acquiring) {
                    try await Task.sleep(for: .milliseconds(5))
                }
                // The held streams keep their delay; everything after this is answered at once.
                rig.sandbox.setFaults(.none)
                try rig.writeTokenTenant("acme", keyID: "KEYB000001")
                let report = try await rig.coordinator.reload(tenant: id, revoke: true)
                #expect(report.revoked == [id])
                swapCut.withLock { $0 = rig.sandbox.requests.count }
            }
            let undelivered = load.undelivered
            #expect(undelivered.count == 0, "not delivered: \(undelivered.sample)")
            let records = Self.recordsByID(rig.sandbox)
            #expect(records.values.filter { $0.contains { $0.status == 200 } }.count == Self.count)

            // Cut streams: sent on an old connection, no answer, resent once with the new key. (The
            // sandbox records no key ID for a stream cut before its answer: tell them by connection.)
            let requests = rig.sandbox.requests
            let oldConnections = Set(requests.filter { $0.keyID == "KEYA000001" }.map(\.connectionID))
            var cutAndResent = 0
            var duplicates = 0
            var sentTwiceOnOneKey = 0
            for (_, mine) in records {
                let old = mine.filter { oldConnections.contains($0.connectionID) }
                let new = mine.filter { $0.keyID == "KEYB000001" }
                if old.count > 1 || new.count > 1 { sentTwiceOnOneKey += 1 }
                if !old.isEmpty, !new.isEmpty {
                    if old[0].processed {
                        // The documented window: APNs processed it, the answer was cut with the connection.
                        duplicates += 1
                    } else {
                        cutAndResent += 1
                    }
                }
            }
            #expect(sentTwiceOnOneKey == 0, "notifications sent more than once with one key")
            print("revoke: \(cutAndResent) cut-off streams resent on the new key, \(duplicates) answered-but-cut (duplicate window)")
            // Every worker's stream was held when the connections were cut.
            #expect(cutAndResent > 0, "the revocation should have cut streams in flight")
            #expect(cutAndResent <= concurrency)
            // No answer was on its way at the cut (all were held), so nothing was delivered twice.
            #expect(duplicates == 0)
            #expect(records.values.allSatisfy { $0.filter(\.processed).count == 1 }, "an apns-id was processed twice")

            // After the reload returned, every answered request carried the new key (the sandbox may
            // still be recording the cut streams of the closed connections).
            let cut = try #require(swapCut.withLock { $0 })
            #expect(requests[cut...].allSatisfy { $0.keyID == "KEYB000001" || !$0.processed })
            #expect(await rig.waitForClosedConnections(atLeast: oldConnections.count))
        }
    }
}
