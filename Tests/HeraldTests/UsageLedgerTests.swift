import Foundation
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

/// Usage per tenant and hour: the store's ledger on both backends, and the meter that feeds it.
@Suite("Usage ledger")
struct UsageLedgerTests {
    let h0 = Date(timeIntervalSince1970: 1_764_000_000 - 1_764_000_000.truncatingRemainder(dividingBy: 3600))

    @Test("counts add up per tenant, hour and kind, from any number of writers; hours are pruned by age", arguments: StoreBackend.allCases)
    func ledger(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            let h1 = h0.addingTimeInterval(3600)
            try await store.addUsage([
                UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 5),
                UsageCount(tenant: "acme", hour: h0, kind: .delivered, count: 4),
                UsageCount(tenant: "globex", hour: h0, kind: .accepted, count: 1),
            ])
            // A second writer (another instance) adds to the same rows.
            try await store.addUsage([
                UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 2),
                UsageCount(tenant: "acme", hour: h1, kind: .failedUnregistered, count: 3),
            ])
            try await store.addUsage([])
            let acme = try await store.usage(tenant: "acme", from: h0, to: h1.addingTimeInterval(3600))
            #expect(acme == [
                UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 7),
                UsageCount(tenant: "acme", hour: h0, kind: .delivered, count: 4),
                UsageCount(tenant: "acme", hour: h1, kind: .failedUnregistered, count: 3),
            ])
            #expect(try await store.usage(tenant: "acme", from: h1, to: h1.addingTimeInterval(3600)).count == 1)
            #expect(try await store.usage(tenant: nil, from: h0, to: h1).map(\.tenant) == ["acme", "acme", "globex"])
            #expect(try await store.pruneUsage(before: h1) == 3)
            #expect(try await store.usage(tenant: nil, from: h0, to: h1.addingTimeInterval(3600)).count == 1)
        }
    }

    @Test func theMeterCountsByHourAndHandsOverOnce() async throws {
        let meter = UsageMeter()
        let acme = Fixtures.tenantID("acme")
        meter.add(.accepted, tenant: acme, at: h0.addingTimeInterval(10))
        meter.add(.accepted, tenant: acme, at: h0.addingTimeInterval(3599), count: 2)
        meter.add(.accepted, tenant: acme, at: h0.addingTimeInterval(3600))
        meter.add(.delivered, tenant: acme, at: h0, count: 0)
        let taken = Set(meter.take())
        #expect(taken == [
            UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 3),
            UsageCount(tenant: "acme", hour: h0.addingTimeInterval(3600), kind: .accepted, count: 1),
        ])
        #expect(meter.take().isEmpty)
        // A write that failed puts them back, added to what came meanwhile.
        meter.restore(Array(taken))
        meter.add(.accepted, tenant: acme, at: h0)
        #expect(Set(meter.take()).contains(UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 4)))

        #expect(UsageMeter.kind(status: 200) == .delivered && UsageMeter.kind(status: 410) == .failedUnregistered)
        #expect(UsageMeter.kind(status: 429) == .failedUnavailable && UsageMeter.kind(status: 503) == .failedUnavailable)
        #expect(UsageMeter.kind(status: 400) == .failedRejected && UsageMeter.kind(status: 403) == .failedRejected)
        #expect(UsageMeter.kind(of: .failure(CancellationError())) == nil)
        #expect(UsageMeter.kind(of: .failure(PushError.unknownTenant("x"))) == .failedRefused)
    }

    @Test func aTenantsTallyCountsItsHoursAndLeavesTheMeterOnceNobodyHoldsIt() async throws {
        let meter = UsageMeter()
        let acme = Fixtures.tenantID("acme")
        let held = meter.tally(for: acme)
        #expect(meter.tally(for: acme) === held)
        held.add(.accepted, at: h0.addingTimeInterval(5))
        held.add(.accepted, at: h0.addingTimeInterval(3599), count: 2)
        // A later hour, then two single sends that ended in the hour before it: one answered 410,
        // one cancelled (accepted, with no outcome).
        held.add(.accepted, at: h0.addingTimeInterval(3600))
        held.addSingleSend(.success(PushResult(notificationID: Fixtures.apnsID(), environment: .production, response: APNsResponse(status: 410, apnsID: nil))), at: h0)
        held.addSingleSend(.failure(CancellationError()), at: h0)
        held.add(.delivered, at: h0, count: 0)
        held.addBatchItem(JobItemResult(state: .sent, status: 200, reason: nil, message: nil, apnsID: nil, finishedAt: h0.addingTimeInterval(7200), attempts: 1))
        weak let released: UsageMeter.Tally? = meter.tally(for: Fixtures.tenantID("globex"))
        meter.add(.accepted, tenant: Fixtures.tenantID("globex"), at: h0, count: 4)

        #expect(Set(meter.take()) == [
            UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 5),
            UsageCount(tenant: "acme", hour: h0, kind: .failedUnregistered, count: 1),
            UsageCount(tenant: "acme", hour: h0.addingTimeInterval(3600), kind: .accepted, count: 1),
            UsageCount(tenant: "acme", hour: h0.addingTimeInterval(7200), kind: .delivered, count: 1),
            UsageCount(tenant: "acme", hour: h0.addingTimeInterval(7200), kind: .batchItems, count: 1),
            UsageCount(tenant: "globex", hour: h0, kind: .accepted, count: 4),
        ])
        // globex's tally is held by nobody once its counts are taken: it is gone; acme's stays.
        #expect(released == nil)
        #expect(meter.tally(for: acme) === held)
        #expect(meter.take().isEmpty)
        held.add(.accepted, at: h0)
        #expect(meter.take() == [UsageCount(tenant: "acme", hour: h0, kind: .accepted, count: 1)])

        let off = UsageMeter(enabled: false)
        off.tally(for: acme).add(.accepted, at: h0)
        off.add(.accepted, tenant: acme, at: h0)
        #expect(off.take().isEmpty)
    }

    @Test func theRouterCountsASingleSendOnceAcceptedAndOnceAnsweredAndNothingForAnUnknownTenant() async throws {
        let router = try Fixtures.router(clock: SystemPushClock())
        let tenant = Fixtures.tenant("acme")
        await router.install([tenant])
        _ = try await router.send(tenant: tenant.id, notification: Fixtures.note())
        await #expect(throws: PushError.self) {
            _ = try await router.send(tenant: Fixtures.tenantID("nobody"), notification: Fixtures.note())
        }
        let taken = router.usage.take()
        #expect(taken.map(\.tenant) == ["acme", "acme"])
        #expect(Set(taken.map(\.kind)) == [.accepted, .delivered])
        #expect(taken.allSatisfy { $0.count == 1 })
    }
}
