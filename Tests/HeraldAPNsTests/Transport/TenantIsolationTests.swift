import APNsSandbox
import Foundation
import HeraldCore
import NIOCore
import Synchronization
import Testing

@testable import HeraldAPNs

@Suite("Tenants share nothing")
struct TenantIsolationTests {
    @Test("two tenants on one sandbox: each uses only its own credential and topics")
    func credentialsAndTopics() async throws {
        // Per-connection token update checks: the claimant below signs its own token with alpha's key.
        try await withSandbox(keys: [.alpha, .beta], configure: { $0.tokenUpdateScope = .connection }) { harness in
            let alpha = try harness.transport(for: try harness.tokenTenant(.alpha))
            let beta = try harness.transport(for: try harness.tokenTenant(.beta))
            async let alphaOutcomes = sendLoad(makeNotes(200, topic: "com.example.alpha"), through: alpha, concurrency: 20)
            async let betaOutcomes = sendLoad(makeNotes(200, topic: "com.example.beta"), through: beta, concurrency: 20)
            #expect(await alphaOutcomes.allSatisfy { $0.status == 200 })
            #expect(await betaOutcomes.allSatisfy { $0.status == 200 })

            // Neither tenant admits the other's topics (nothing unadmitted reaches a transport)…
            #expect(throws: PushError.self) { try alpha.tenant.admit(Notes.note(topic: "com.example.beta"), id: Notes.nextID(), environment: nil) }
            #expect(throws: PushError.self) { try beta.tenant.admit(Notes.note(topic: "com.example.alpha"), id: Notes.nextID(), environment: nil) }
            // …and a tenant file that claims another team's topic gets APNs' refusal, not a push.
            let claimant = try harness.transport(for: try harness.tokenTenant(.alpha, topics: ["com.example.beta"]))
            let refused = try await claimant.send(Notes.note(topic: "com.example.beta"))
            #expect(refused.status == 400)
            #expect(refused.reason == .topicDisallowed)

            let record = harness.sandbox.requests
            let alphaConnections = Set(record.filter { $0.topic == "com.example.alpha" }.map(\.connectionID))
            let betaConnections = Set(record.filter { $0.topic == "com.example.beta" && $0.teamID == "TEAMBETA01" }.map(\.connectionID))
            #expect(alphaConnections.isDisjoint(with: betaConnections))
            #expect(record.filter { $0.topic == "com.example.alpha" }.allSatisfy { $0.teamID == "TEAMALPHA1" })
            #expect(record.filter(\.delivered).allSatisfy { ($0.topic == "com.example.alpha") == ($0.teamID == "TEAMALPHA1") })
            await alpha.close()
            await beta.close()
            await claimant.close()
            harness.expectCleanAudit()
        }
    }

    /// One tenant's endpoint stalls (or fails) while its pool is saturated; the other tenant's
    /// notifications all complete meanwhile.
    @Test("a saturated, stalled or failing neighbour does not hold up another tenant", arguments: [NeighbourTrouble.stall, .failing])
    func noisyNeighbour(trouble: NeighbourTrouble) async throws {
        try await withSandbox(keys: [.alpha], configure: { configuration in
            configuration.maxConcurrentStreams = 50  // 2 connections × 50 streams, then a queue of 200, then queueFull
            switch trouble {
            case .stall: configuration.faults = SandboxFaults(addedLatency: 600)
            case .failing: configuration.faults = SandboxFaults(fraction503: 1)
            }
        }) { noisyHarness in
            try await withSandbox(keys: [.beta]) { quietHarness in
                var noisyPool = PoolConfiguration()
                noisyPool.maxQueued = 200
                // Long deadlines: on a slow machine only the behaviour counts, not the clock.
                let noisy = try noisyHarness.transport(for: try noisyHarness.tokenTenant(.alpha, pool: noisyPool)) { $0.requestTimeout = .seconds(900) }
                let quiet = try quietHarness.transport(for: try quietHarness.tokenTenant(.beta)) { $0.requestTimeout = .seconds(600) }

                let noisyNotes = makeNotes(3000, topic: "com.example.alpha")
                let noisyLoad = Task {
                    await sendLoad(noisyNotes, through: noisy, concurrency: 600)
                }
                // The noisy pool fills up first.
                await waitUntil { noisy.poolStatus.reduce(0) { $0 + $1.inFlight + $1.queued } >= 100 }

                let quietOutcomes = await sendLoad(makeNotes(1000, topic: "com.example.beta"), through: quiet, concurrency: 100)
                #expect(quietOutcomes.allSatisfy { $0.status == 200 })
                if trouble == .stall {
                    // Still stalled: the quiet tenant finished while the noisy one's streams hang.
                    #expect(noisy.poolStatus.reduce(0) { $0 + $1.inFlight } > 0)
                    #expect(noisyHarness.sandbox.counters.answered == 0)
                }
                await noisy.close()
                let noisyOutcomes = await noisyLoad.value
                #expect(noisyOutcomes.count == 3000)
                if trouble == .failing {
                    #expect(noisyOutcomes.contains { $0.status == 503 })
                } else {
                    // Saturated: beyond its streams and queue, the neighbour was refused at once.
                    #expect(noisyOutcomes.contains { if case .failure(let error) = $0 { return error.isQueueFull } else { return false } })
                }
                await quiet.close()
                quietHarness.expectCleanAudit()
                noisyHarness.expectCleanAudit()
            }
        }
    }

    enum NeighbourTrouble: Sendable, CustomTestStringConvertible {
        case stall
        case failing
        var testDescription: String { self == .stall ? "stalled endpoint" : "503 on everything" }
    }
}
