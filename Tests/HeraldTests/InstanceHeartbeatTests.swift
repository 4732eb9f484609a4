import Foundation
import Herald
import HeraldCore
import Synchronization
import Testing

@testable import HeraldStore

/// `InstanceHeartbeat` on the store's registry (both backends), on a manual clock: a silent
/// instance is taken for dead only after the timeout, its leases are released and its row
/// removed; a live one is left alone; a row removed while its instance was only slow comes back.
@Suite("Instance heartbeat")
struct InstanceHeartbeatTests {
    /// A registry that never answers (until its caller gives the call up).
    final class SilentRegistry: InstanceRegistry {
        private let calls = Mutex<(started: Int, givenUp: Int)>((0, 0))
        var started: Int { calls.withLock { $0.started } }
        var givenUp: Int { calls.withLock { $0.givenUp } }

        private func never<T>() async throws -> T {
            calls.withLock { $0.started += 1 }
            defer { calls.withLock { $0.givenUp += 1 } }
            try await Task.sleep(for: .seconds(24 * 3600))
            throw StoreError.corrupt("answered after a day (test)")
        }
        func registerInstance(_ instance: InstanceRecord) async throws { try await never() as Void }
        func heartbeat(instance id: String, at: Date) async throws -> Bool { try await never() }
        func instances() async throws -> [InstanceRecord] { try await never() }
        func removeInstance(id: String) async throws -> Bool { try await never() }
        func releaseLeases(heldBy claimant: String) async throws -> Int { try await never() }
        func leasedItemCounts(now: Date) async throws -> [String: Int] { try await never() }
    }

    /// A store that lost the deregistration's call would hold a graceful stop up for its whole
    /// call timeout: the deregistration gives up after its limit, and the row ends by timeout.
    @Test("a graceful stop's deregistration gives up after its limit when the store does not answer", .timeLimit(.minutes(1)))
    func deregistrationIsBounded() async throws {
        let registry = SilentRegistry()
        var configuration = InstanceHeartbeat.Configuration()
        configuration.deregisterLimit = .milliseconds(50)
        let now = Date()
        let heartbeat = InstanceHeartbeat(
            registry: registry,
            instance: InstanceRecord(id: "i", claimant: "herald/i", host: "h", pid: 1, startedAt: now, lastHeartbeat: now),
            runner: nil, configuration: configuration, clock: SystemPushClock())
        await heartbeat.deregister()
        // Returned while the release of leases still waited; the call is cancelled as it returns.
        #expect(registry.started == 1)
        for _ in 0..<3000 where registry.givenUp == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(registry.givenUp == 1, "the release of leases was given up, not answered")
    }

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
