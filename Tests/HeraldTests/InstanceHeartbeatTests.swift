import Foundation
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

/// `InstanceHeartbeat` on the store's registry (both backends), on a manual clock: a silent
/// instance is taken for dead only after the timeout, its leases are released and its row
/// removed; a live one is left alone; a row removed while its instance was only slow comes back.
@Suite("Instance heartbeat")
struct InstanceHeartbeatTests {
    @Test("a silent instance is taken for dead after the timeout: its leases released, its row removed", arguments: StoreBackend.allCases)
    func reapsDeadInstances(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            let clock = ManualPushClock()
            let configuration = InstanceHeartbeat.Configuration(interval: .seconds(5), timeout: .seconds(30))
            func heartbeat(_ id: String) -> InstanceHeartbeat {
                InstanceHeartbeat(
                    registry: store,
                    instance: InstanceRecord(
                        id: id, claimant: "herald/\(id)", host: "h", pid: 1, startedAt: clock.date, lastHeartbeat: clock.date),
                    runner: nil, configuration: configuration, clock: clock)
            }
            let alive = heartbeat("alive")
            let silent = heartbeat("silent")
            try await alive.register()
            try await silent.register()

            let tenant = Fixtures.tenantID("acme")
            let job = try JobID("held")
            _ = try await store.createJob(
                tenant: tenant, id: job, environment: nil, notifications: (0..<3).map { _ in Fixtures.note() },
                createdAt: clock.date)
            #expect(
                try await store.claimPendingItems(
                    tenant: tenant, job: job, limit: 3, claimant: "herald/silent", now: clock.date,
                    leaseUntil: clock.date.addingTimeInterval(3600)
                ).count == 3)

            // 25 s of silence: not dead yet.
            clock.advance(by: .seconds(25))
            #expect(await alive.beat().isEmpty)
            #expect(try await store.instances().count == 2)
            // 31 s: dead. Its leases are released although they run for another hour.
            clock.advance(by: .seconds(6))
            #expect(await alive.beat() == ["silent"])
            #expect(try await store.instances().map(\.id) == ["alive"])
            #expect(try await store.leasedItemCounts(now: clock.date).isEmpty)
            #expect(
                try await store.claimPendingItems(
                    tenant: tenant, job: job, limit: 3, claimant: "herald/alive", now: clock.date,
                    leaseUntil: clock.date.addingTimeInterval(60)
                ).count == 3)

            // The silent one was only slow: its next beat registers it again.
            #expect(await silent.beat().isEmpty)
            #expect(Set(try await store.instances().map(\.id)) == ["alive", "silent"])

            // A graceful stop: leases released, row removed.
            await alive.deregister()
            #expect(try await store.leasedItemCounts(now: clock.date).isEmpty)
            #expect(try await store.instances().map(\.id) == ["silent"])
        }
    }
}
