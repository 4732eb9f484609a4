import Foundation
import Herald
import HeraldCore
import Testing

@testable import HeraldStore

/// The rest of the store contract `herald serve` relies on (webhook outbox, retention, instance
/// registry, lease renewal), on both backends: on PostgreSQL, `herald serve` opens no SQLite file.
@Suite("Server store contract")
struct ServerStoreContractTests {
    let acme = Fixtures.tenantID("acme")
    let other = Fixtures.tenantID("other")
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    private func webhook(_ tenant: TenantID, due: Date, url: String = "https://hooks.example.com/a") -> OutboxWebhook {
        OutboxWebhook(
            tenant: tenant,
            request: WebhookRequest(
                url: url, headers: ["content-type": "application/json", "x-sig": "abc"], body: Array("{\"a\":1}".utf8),
                timeout: .seconds(7), allowPrivateAddresses: true),
            maxAttempts: 5, backoff: .milliseconds(1500), nextAttemptAt: due)
    }

    @Test("webhook outbox: due deliveries are claimed once, oldest first; rescheduled ones wait; counts per tenant", arguments: StoreBackend.allCases)
    func outbox(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            try await store.enqueueWebhooks([
                webhook(acme, due: t0.addingTimeInterval(2), url: "https://hooks.example.com/second"),
                webhook(acme, due: t0.addingTimeInterval(1), url: "https://hooks.example.com/first"),
                webhook(other, due: t0.addingTimeInterval(100)),
            ])
            #expect(try await store.outboxCounts() == [acme: 2, other: 1])

            let now = t0.addingTimeInterval(10)
            let first = try await store.claimDueWebhooks(now: now, claimUntil: now.addingTimeInterval(60), limit: 1)
            #expect(first.map(\.request.url) == ["https://hooks.example.com/first"])
            let delivery = try #require(first.first)
            #expect(delivery.tenant == acme && delivery.request.headers["x-sig"] == "abc")
            #expect(delivery.request.body == Array("{\"a\":1}".utf8) && delivery.request.timeout == .seconds(7))
            #expect(delivery.request.allowPrivateAddresses && delivery.maxAttempts == 5 && delivery.attempt == 0)
            #expect(delivery.backoff == .milliseconds(1500) && delivery.nextAttemptAt == t0.addingTimeInterval(1))
            // A claimed delivery is not handed out again while its claim lasts; the other due one is.
            let second = try await store.claimDueWebhooks(now: now, claimUntil: now.addingTimeInterval(60), limit: 10)
            #expect(second.map(\.request.url) == ["https://hooks.example.com/second"])
            #expect(try await store.claimDueWebhooks(now: now, claimUntil: now, limit: 10).isEmpty)

            // A failed attempt: unclaimed, due later, with its attempt and backoff.
            try await store.rescheduleWebhook(
                id: delivery.id, attempt: 1, backoff: .seconds(3), nextAttemptAt: now.addingTimeInterval(30))
            #expect(try await store.claimDueWebhooks(now: now.addingTimeInterval(29), claimUntil: now, limit: 10).isEmpty)
            let again = try await store.claimDueWebhooks(
                now: now.addingTimeInterval(30), claimUntil: now.addingTimeInterval(90), limit: 10)
            #expect(again.map(\.id) == [delivery.id] && again.first?.attempt == 1 && again.first?.backoff == .seconds(3))

            // Claims end: the second one's claim (until now+60) has passed at now+61.
            #expect(
                try await store.claimDueWebhooks(now: now.addingTimeInterval(61), claimUntil: now.addingTimeInterval(120), limit: 10)
                    .map(\.request.url) == ["https://hooks.example.com/second"])
            #expect(try await store.releaseWebhookClaims() == 2)
            try await store.removeWebhook(id: delivery.id)
            #expect(try await store.outboxCounts() == [acme: 1, other: 1])
        }
    }

    @Test(
        "a job's end is told once: the mark and its outbox row in one write, only for a final job; untold ends are listed oldest first",
        arguments: StoreBackend.allCases)
    func jobEndLedger(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            let (finished, cancelled, running, quiet) = (
                try JobID("end-finished"), try JobID("end-cancelled"), try JobID("end-running"), try JobID("end-quiet")
            )
            for id in [finished, cancelled, running, quiet] {
                _ = try await store.createJob(tenant: acme, id: id, environment: nil, notifications: [Fixtures.note()], createdAt: t0)
            }
            try await store.updateJob(tenant: acme, id: running, state: .running, at: t0.addingTimeInterval(1))
            try await store.updateJob(tenant: acme, id: quiet, state: .finished, at: t0.addingTimeInterval(2))
            try await store.updateJob(tenant: acme, id: cancelled, state: .cancelled, at: t0.addingTimeInterval(3))
            try await store.updateJob(tenant: acme, id: finished, state: .finished, at: t0.addingTimeInterval(4))

            // Untold: the final jobs, oldest change first, before the cutoff only.
            #expect(try await store.untoldJobEnds(endedBefore: t0.addingTimeInterval(10), limit: 10).map(\.id) == [quiet, cancelled, finished])
            #expect(try await store.untoldJobEnds(endedBefore: t0.addingTimeInterval(4), limit: 10).map(\.id) == [quiet, cancelled])
            #expect(try await store.untoldJobEnds(endedBefore: t0.addingTimeInterval(10), limit: 1).map(\.id) == [quiet])
            #expect(try await store.untoldJobEnds(endedBefore: t0.addingTimeInterval(10), limit: 0).isEmpty)

            // A job that is not final, another tenant's id, or an absent job: nothing written.
            let event = webhook(acme, due: t0)
            #expect(try await store.recordJobEnd(tenant: acme, job: running, webhook: event, at: t0) == false)
            #expect(try await store.recordJobEnd(tenant: other, job: finished, webhook: event, at: t0) == false)
            #expect(try await store.recordJobEnd(tenant: acme, job: try JobID("absent"), webhook: event, at: t0) == false)
            #expect(try await store.outboxCounts().isEmpty)

            // Told with its event: the row is stored with the mark; told again: nothing more.
            #expect(try await store.recordJobEnd(tenant: acme, job: finished, webhook: event, at: t0.addingTimeInterval(5)))
            #expect(try await store.outboxCounts() == [acme: 1])
            #expect(try await store.recordJobEnd(tenant: acme, job: finished, webhook: event, at: t0.addingTimeInterval(6)) == false)
            #expect(try await store.outboxCounts() == [acme: 1])
            // Told with nothing to send (a tenant without a webhook): marked, no row.
            #expect(try await store.recordJobEnd(tenant: acme, job: quiet, webhook: nil, at: t0.addingTimeInterval(5)))
            #expect(try await store.outboxCounts() == [acme: 1])
            #expect(try await store.untoldJobEnds(endedBefore: t0.addingTimeInterval(10), limit: 10).map(\.id) == [cancelled])

            // Told at once by two instances: once.
            async let first = store.recordJobEnd(tenant: acme, job: cancelled, webhook: event, at: t0.addingTimeInterval(7))
            async let second = store.recordJobEnd(tenant: acme, job: cancelled, webhook: event, at: t0.addingTimeInterval(7))
            let told = try await [first, second]
            #expect(told.filter { $0 }.count == 1, "\(told)")
            #expect(try await store.outboxCounts() == [acme: 2])
            #expect(try await store.untoldJobEnds(endedBefore: t0.addingTimeInterval(10), limit: 10).isEmpty)
        }
    }

    @Test("retention deletes finished jobs older than the cutoff with their items, in bounded steps", arguments: StoreBackend.allCases)
    func retention(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            let old = try JobID("old-finished")
            let running = try JobID("old-running")
            let recent = try JobID("recent-finished")
            for id in [old, running, recent] {
                _ = try await store.createJob(
                    tenant: acme, id: id, environment: nil, notifications: (0..<5).map { _ in Fixtures.note() }, createdAt: t0)
            }
            try await store.updateJob(tenant: acme, id: old, state: .finished, at: t0.addingTimeInterval(10))
            try await store.updateJob(tenant: acme, id: running, state: .running, at: t0.addingTimeInterval(10))
            try await store.updateJob(tenant: acme, id: recent, state: .cancelled, at: t0.addingTimeInterval(1000))

            let partial = try await store.deleteExpiredJobs(before: t0.addingTimeInterval(500), itemsPerTransaction: 2, maxItems: 3)
            #expect(!partial.complete && partial.jobs == 0 && partial.items >= 3)
            let rest = try await store.deleteExpiredJobs(before: t0.addingTimeInterval(500))
            #expect(rest.complete && rest.jobs == 1 && partial.items + rest.items == 5)
            #expect(try await store.job(tenant: acme, id: old) == nil)
            #expect(try await store.items(tenant: acme, job: old, fromIndex: 0, limit: 10).isEmpty)
            #expect(try await store.job(tenant: acme, id: running) != nil)
            #expect(try await store.job(tenant: acme, id: recent) != nil)
            try await store.compact()
        }
    }

    @Test("instance registry: rows, heartbeats, leases held, renewed and released per claimant", arguments: StoreBackend.allCases)
    func instances(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            let a = InstanceRecord(id: "aaaa1111", claimant: "herald/aaaa1111", host: "host-a", pid: 101, startedAt: t0, lastHeartbeat: t0)
            let b = InstanceRecord(
                id: "bbbb2222", claimant: "herald/bbbb2222", host: "host-b", pid: 202, startedAt: t0.addingTimeInterval(1),
                lastHeartbeat: t0.addingTimeInterval(1))
            try await store.registerInstance(b)
            try await store.registerInstance(a)
            #expect(try await store.instances() == [a, b])
            #expect(try await store.heartbeat(instance: a.id, at: t0.addingTimeInterval(20)))
            // A heartbeat never goes back.
            #expect(try await store.heartbeat(instance: a.id, at: t0.addingTimeInterval(5)))
            #expect(try await store.instances().first?.lastHeartbeat == t0.addingTimeInterval(20))
            #expect(try await store.heartbeat(instance: "gone", at: t0) == false)

            let job = try JobID("shared-job")
            _ = try await store.createJob(
                tenant: acme, id: job, environment: nil, notifications: (0..<6).map { _ in Fixtures.note() }, createdAt: t0)
            let lease = t0.addingTimeInterval(60)
            #expect(
                try await store.claimPendingItems(tenant: acme, job: job, limit: 4, claimant: a.claimant, now: t0, leaseUntil: lease)
                    .count == 4)
            #expect(
                try await store.claimPendingItems(tenant: acme, job: job, limit: 4, claimant: b.claimant, now: t0, leaseUntil: lease)
                    .map(\.index) == [4, 5])
            _ = try await store.recordAndReadBack(
                tenant: acme, job: job, index: 0,
                result: JobItemResult(state: .sent, status: 200, reason: nil, apnsID: nil, finishedAt: t0))
            #expect(try await store.leasedItemCounts(now: t0) == [a.claimant: 3, b.claimant: 2])

            // Renewal extends only the claimant's own leases of that job; an ended lease is not counted.
            #expect(try await store.renewLeases(tenant: acme, job: job, claimant: a.claimant, leaseUntil: t0.addingTimeInterval(120)) == 3)
            #expect(try await store.renewLeases(tenant: other, job: job, claimant: a.claimant, leaseUntil: t0.addingTimeInterval(120)) == 0)
            #expect(try await store.leasedItemCounts(now: t0.addingTimeInterval(90)) == [a.claimant: 3])
            #expect(
                try await store.claimPendingItems(
                    tenant: acme, job: job, limit: 10, claimant: "herald/cccc", now: t0.addingTimeInterval(90),
                    leaseUntil: t0.addingTimeInterval(200)
                ).map(\.index) == [4, 5])

            // A dead instance's leases are released at once, whatever their end.
            #expect(try await store.releaseLeases(heldBy: a.claimant) == 3)
            #expect(try await store.leasedItemCounts(now: t0.addingTimeInterval(90)) == ["herald/cccc": 2])
            #expect(
                try await store.claimPendingItems(
                    tenant: acme, job: job, limit: 10, claimant: b.claimant, now: t0.addingTimeInterval(90),
                    leaseUntil: t0.addingTimeInterval(200)
                ).map(\.index) == [1, 2, 3])
            #expect(try await store.removeInstance(id: a.id))
            #expect(try await store.removeInstance(id: a.id) == false)
            #expect(try await store.instances().map(\.id) == [b.id])
        }
    }
}
