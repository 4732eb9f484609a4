import Foundation
import Herald
import HeraldCore
import HeraldStore
import Synchronization
import Testing

/// The job runner claims a job's next items while the last claim's are still on the wire
/// (`JobFeed`), and only where that cannot send an item twice.
@Suite("Job runner: claims ahead of the sends")
struct JobFeedTests {
    typealias Bounds = JobRunnerBoundsTests

    /// Runs one job of `count` items through a runner with small claims and returns the
    /// transport's sends under way at each claim after the first, with the transport.
    private func run(count: Int, strict: Bool) async throws -> (inFlightAtClaims: [Int], transport: Bounds.CountingTransport, progress: JobProgress?) {
        let base = try Fixtures.store()
        let store = Bounds.FlakyStore(base)
        store.claimStrictly(strict)
        // Sends slow enough that a claim made when the last item is taken finds the others under way.
        let transport = Bounds.CountingTransport(delay: .milliseconds(20))
        let seen = Mutex<[Int]>([])
        store.observeClaims { _ in seen.withLock { $0.append(transport.inFlight) } }
        let router = try Fixtures.router(transports: transport, store: store, clock: SystemPushClock())
        await router.install([Fixtures.tenant("acme")])
        let id = try JobID("ahead-\(strict)")
        _ = try await store.createJob(
            tenant: Bounds.tenant, id: id, environment: nil, notifications: Bounds.notes(count, seed: 3), createdAt: Date())
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 8
        configuration.claimSize = 40
        configuration.rescanInterval = .seconds(3600)
        let runner = JobRunner(router: router, store: store, configuration: configuration)
        try await Bounds.run(runner, router: router, until: "the job finished") {
            try await base.job(tenant: Bounds.tenant, id: id)?.state == .finished
        }
        #expect(runner.statistics.peakClaimedItemsHeld <= 40 + 8, "one claim not handed out plus one item a send task")
        return (Array(seen.withLock { $0 }.dropFirst()), transport, try await base.progress(tenant: Bounds.tenant, job: id))
    }

    @Test("the next claim is made while the last claim's items are on the wire; every item is sent once")
    func claimsWhileSending() async throws {
        let (atClaims, transport, progress) = try await run(count: 400, strict: true)
        #expect(atClaims.count >= 9, "ten claims of 40 at least: \(atClaims)")
        #expect(atClaims.filter { $0 > 0 }.count >= 5, "claims made while items were on the wire: \(atClaims)")
        #expect(transport.total == 400)
        #expect(transport.byID.count == 400 && transport.byID.values.allSatisfy { $0 == 1 })
        #expect(progress == JobProgress(pending: 0, sent: 400, failed: 0))
    }

    @Test("with a store that may ignore the index hint, a claim waits until no item is on the wire")
    func waitsWithALooseStore() async throws {
        let (atClaims, transport, progress) = try await run(count: 200, strict: false)
        #expect(atClaims.count >= 5)
        #expect(atClaims.allSatisfy { $0 == 0 }, "sends under way at the claims: \(atClaims)")
        #expect(transport.total == 200 && transport.byID.values.allSatisfy { $0 == 1 })
        #expect(progress == JobProgress(pending: 0, sent: 200, failed: 0))
    }
}
