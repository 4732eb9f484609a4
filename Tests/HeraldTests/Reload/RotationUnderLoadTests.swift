import APNsSandbox
import Foundation
import Herald
import HeraldCore
import Synchronization
import Testing

/// One continuous load of 10,000 notifications on two tenants, during which a token tenant's key
/// rotates (drain), a certificate tenant's certificate rotates (drain), and the token tenant's key
/// is rotated again with `revoke: true`: nothing lost, no notification processed twice, every
/// send that starts after a swap uses the new credential, the old connections closed.
///
/// One run carries all three rotations: a debug build spends about a quarter of a millisecond of
/// CPU a notification (client and sandbox together), and a load for each would triple that.
@Suite("Credential rotation under load", .serialized)
struct RotationUnderLoadTests {
    static let tokenCount = 7_000
    static let certCount = 3_000
    static let tokenWorkers = 32
    static let certWorkers = 16
    /// The sandbox's SETTINGS_MAX_CONCURRENT_STREAMS: 32 workers need all four connections.
    static let streamsPerConnection = 8
    static let keyA = "KEYA000001"
    static let keyB = "KEYB000001"
    static let keyC = "KEYC000001"
    /// How long the sandbox holds answers while the revocation cuts the old connections.
    static let holdSeconds: TimeInterval = 3

    struct Swaps: Sendable {
        /// Load indices at or above these started after the swap returned.
        var tokenBoundary: Int?
        var certBoundary: Int?
        var certConnectionsBefore: Int?
        var revokeBoundary: Int?
        var heldAtRevoke: Int?
    }

    @Test(
        "10,000 notifications while a token key rotates, a certificate rotates and a key is revoked: none lost, none duplicated, new credentials after each swap, old connections closed"
    )
    func rotationsUnderLoad() async throws {
        try await withReloadRig(
            keyIDs: [Self.keyA, Self.keyB, Self.keyC],
            configure: { $0.maxConcurrentStreams = Self.streamsPerConnection }
        ) { rig in
            let acme = try TenantID("acme")
            let certco = try TenantID("certco")
            try rig.writeTokenTenant("acme", keyID: Self.keyA)
            try rig.writeCertificateTenant("certco", certificate: try rig.issueCertificate())
            let startup = try await rig.coordinator.reloadAll(trigger: .startup)
            #expect(Set(startup.added) == [acme, certco])
            let tokenBefore = try #require(rig.router.runtime(for: acme))
            let certBefore = try #require(rig.router.runtime(for: certco))
            // The second certificate also allows a topic the first one does not.
            let secondCertificate = try rig.issueCertificate(
                topics: ReloadRig.certTopics + [ReloadRig.secondCertOnlyTopic])

            let tokenLoad = LoadRun()
            let certLoad = LoadRun()
            let swaps = Mutex(Swaps())
            // The token tenant pauses before its last 2,500 until the certificate tenant is done:
            // the revocation then holds every answer without stalling the other tenant.
            tokenLoad.hold(from: 4_500)

            let tokenRotation = LoadMilestone(at: 1_000) {
                try rig.writeTokenTenant("acme", keyID: Self.keyB)
                let report = try await rig.coordinator.reload(tenant: acme)
                #expect(report.reloaded == [acme])
                #expect(report.revoked.isEmpty)
                // reload returns once the old runtime drained and closed.
                swaps.withLock { $0.tokenBoundary = tokenLoad.issued }
            }
            let revocation = LoadMilestone(at: 0) {
                let certDone = await eventually(timeout: .seconds(300)) {
                    certLoad.completed.load(ordering: .acquiring) == Self.certCount
                }
                try #require(certDone, "the certificate tenant's load did not finish")
                let old = try #require(rig.router.runtime(for: acme))
                #expect(old.credentialIdentity != tokenBefore.credentialIdentity)
                // Hold every answer from now on, let the token workers go on, and wait until each
                // has a send in flight and every answer given so far has reached its caller: the
                // old connections then carry only unanswered streams.
                rig.sandbox.setFaults(SandboxFaults(addedLatency: Self.holdSeconds))
                tokenLoad.release()
                let held = await eventually(timeout: .seconds(120)) {
                    old.transport.status.inFlight + old.transport.status.queued == Self.tokenWorkers
                        && rig.sandbox.counters.answered
                            == tokenLoad.completed.load(ordering: .acquiring)
                            + certLoad.completed.load(ordering: .acquiring)
                }
                try #require(held, "the token workers' sends were not all held")
                // Let the last of them reach the sandbox (not needed for correctness: answers stay
                // held until the revocation returned, so a late one is cut too, or never written).
                try await Task.sleep(for: .milliseconds(200))
                try rig.writeTokenTenant("acme", keyID: Self.keyC)
                let report = try await rig.coordinator.reload(tenant: acme, revoke: true)
                rig.sandbox.setFaults(.none)
                #expect(report.revoked == [acme])
                #expect(report.reloaded == [acme])
                #expect(old.isRevoked)
                swaps.withLock {
                    $0.revokeBoundary = tokenLoad.issued
                    $0.heldAtRevoke = Self.tokenWorkers
                }
            }
            let certRotation = LoadMilestone(at: 1_000) {
                let connectionsBefore = rig.sandbox.connectionCount
                try rig.writeCertificateTenant(
                    "certco", certificate: secondCertificate,
                    topics: ReloadRig.certTopics + [ReloadRig.secondCertOnlyTopic])
                let report = try await rig.coordinator.reload(tenant: certco)
                #expect(report.reloaded == [certco])
                swaps.withLock {
                    $0.certBoundary = certLoad.issued
                    $0.certConnectionsBefore = connectionsBefore
                }
            }

            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await tokenLoad.run(
                        rig: rig, tenant: acme, count: Self.tokenCount, concurrency: Self.tokenWorkers,
                        milestones: [tokenRotation, revocation])
                }
                group.addTask {
                    try await certLoad.run(
                        rig: rig, tenant: certco, count: Self.certCount, concurrency: Self.certWorkers,
                        seedBase: 1_000_000, topic: ReloadRig.certTopics[0], milestones: [certRotation])
                }
                try await group.waitForAll()
            }
            let swapped = swaps.withLock { $0 }
            let tokenBoundary = try #require(swapped.tokenBoundary)
            let certBoundary = try #require(swapped.certBoundary)
            let certConnectionsBefore = try #require(swapped.certConnectionsBefore)
            let revokeBoundary = try #require(swapped.revokeBoundary)

            // Every caller got one 200, for every notification.
            for (name, load, count) in [
                ("token", tokenLoad, Self.tokenCount), ("certificate", certLoad, Self.certCount),
            ] {
                let undelivered = load.undelivered
                #expect(undelivered.count == 0, "\(name) tenant, not delivered: \(undelivered.sample)")
                let outcomes = load.outcomes.withLock { $0 }
                #expect(outcomes.count == count)
                #expect(Set(outcomes.map(\.apnsID)).count == count, "\(name) tenant: an outcome twice")
            }

            let requests = rig.sandbox.requests
            let records = Dictionary(grouping: requests, by: \.apnsID)
            // The sandbox processed each notification exactly once, and answered it 200.
            let processedTwice = records.filter { $0.value.filter(\.processed).count > 1 }
            #expect(processedTwice.isEmpty, "processed more than once: \(processedTwice.keys.prefix(3))")
            #expect(records.values.filter { $0.contains(where: \.delivered) }.count == Self.tokenCount + Self.certCount)
            #expect(requests.allSatisfy { $0.status != 429 }, "TooManyProviderTokenUpdates after a rotation")

            // Token rotation (drain): sends that started after the swap used key B or C; the
            // key A connections carried nothing else and closed.
            let tokenOutcomes = tokenLoad.outcomes.withLock { $0 }
            func processedRecord(_ outcome: LoadRun.Outcome) -> SandboxRecordedRequest? {
                records[outcome.apnsID]?.first(where: \.processed)
            }
            let afterTokenSwap = tokenOutcomes.filter { $0.index >= tokenBoundary }
            #expect(!afterTokenSwap.isEmpty)
            #expect(
                afterTokenSwap.allSatisfy { processedRecord($0)?.keyID != Self.keyA },
                "a send that started after the swap used the old key")
            let keyAConnections = Set(requests.filter { $0.keyID == Self.keyA }.map(\.connectionID))
            let keyBConnections = Set(requests.filter { $0.keyID == Self.keyB }.map(\.connectionID))
            let keyCConnections = Set(requests.filter { $0.keyID == Self.keyC }.map(\.connectionID))
            #expect(keyAConnections.count > 1, "the load should have used several connections")
            #expect(keyAConnections.isDisjoint(with: keyBConnections))
            #expect(keyBConnections.isDisjoint(with: keyCConnections))
            #expect(tokenBefore.isClosed && !tokenBefore.isRevoked)

            // Certificate rotation (drain): sends that started after the swap went over the new
            // certificate's connections (numbered after the swap began).
            let certRecords = requests.filter { $0.authKind == .certificate }
            let oldCertConnections = Set(
                certRecords.map(\.connectionID).filter { $0 <= certConnectionsBefore })
            let afterCertSwap = certLoad.outcomes.withLock { $0 }.filter { $0.index >= certBoundary }
            #expect(!afterCertSwap.isEmpty)
            #expect(
                afterCertSwap.allSatisfy { (processedRecord($0)?.connectionID ?? 0) > certConnectionsBefore },
                "a send that started after the certificate swap used an old connection")
            #expect(oldCertConnections.count > 1, "the load should have used several connections")
            #expect(certBefore.isClosed)
            #expect(rig.router.runtime(for: certco)?.credentialIdentity != certBefore.credentialIdentity)

            // Revocation: the streams held on key B's connections were cut without an answer and
            // resent once with key C; nothing answered on them was sent again.
            var cutAndResent = 0
            var answeredThenResent = 0
            var cutNotResent = 0
            for outcome in tokenOutcomes {
                let mine = records[outcome.apnsID] ?? []
                let onB = mine.filter { keyBConnections.contains($0.connectionID) }
                let onC = mine.filter { $0.keyID == Self.keyC }
                #expect(onB.count <= 1 && onC.count <= 1, "\(outcome.apnsID) sent twice with one key")
                guard let first = onB.first else { continue }
                if first.processed {
                    if !onC.isEmpty { answeredThenResent += 1 }
                } else if onC.contains(where: \.delivered) {
                    cutAndResent += 1
                } else {
                    cutNotResent += 1
                }
            }
            print(
                "rotation under load: \(keyAConnections.count) key A, \(keyBConnections.count) key B, "
                    + "\(keyCConnections.count) key C, \(oldCertConnections.count) old certificate connections; "
                    + "revocation cut \(cutAndResent) streams, resent once with the new key")
            #expect(cutAndResent > 0, "the revocation should have cut streams in flight")
            #expect(cutAndResent <= Self.tokenWorkers)
            #expect(cutNotResent == 0)
            // All answers were held when the connections were cut: none was lost with them.
            #expect(answeredThenResent == 0)
            let afterRevoke = tokenOutcomes.filter { $0.index >= revokeBoundary }
            #expect(!afterRevoke.isEmpty)
            #expect(
                afterRevoke.allSatisfy { processedRecord($0)?.keyID == Self.keyC },
                "a send that started after the revocation did not use the new key")
            #expect(rig.router.runtime(for: acme)?.credentialIdentity?.contains(Self.keyC) ?? false)

            // Every old connection closed: key A's and the old certificate's drained, key B's cut.
            let oldConnections = keyAConnections.count + keyBConnections.count + oldCertConnections.count
            #expect(await rig.waitForClosedConnections(atLeast: oldConnections))

            // Only the new certificate allows this topic, and the sandbox accepts it.
            let proof = try await rig.router.send(
                tenant: certco, notification: rig.note(1, topic: ReloadRig.secondCertOnlyTopic))
            #expect(proof.status == 200)
        }
    }
}
