import APNsSandbox
import Foundation
import Herald
import HeraldCore
import HeraldStore
import Testing

/// Batches run by a real ``JobRunner`` through the real transport against the in-process
/// APNsSandbox with faults, checked against the sandbox's own record of what it received.
///
/// Each batch is as large as its fault needs to show (many outages, drops and resends per run)
/// and no larger: in a debug build a batch notification costs about 0.7 ms of CPU, client and
/// sandbox together. Volume is `scripts/bench-batch.sh`'s and the kill tests' business.
enum DeliveryRun {
    /// A tenant of the rig with a quick retry schedule, so that the tests' outages and faults
    /// clear in seconds.
    static func tenant(
        _ rig: SandboxRig, _ id: String, guarantee: DeliveryGuarantee = .atLeastOnce,
        plugins: [PluginConfiguration] = []
    ) throws -> TenantConfiguration {
        var tenant = try rig.tenant(id, plugins: plugins)
        tenant.delivery = DeliveryPolicy(
            guarantee: guarantee, maxRetryDuration: .seconds(3600), initialBackoff: .milliseconds(250),
            maxBackoff: .seconds(2), jitter: 0.5,
            circuit: CircuitPolicy(failureThreshold: 20, probeInterval: .milliseconds(500), maxProbeInterval: .seconds(2)))
        return tenant
    }

    static func runner(_ rig: SandboxRig, concurrency: Int = 100) -> JobRunner {
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = concurrency
        configuration.claimSize = 500
        configuration.rescanInterval = .milliseconds(500)
        return JobRunner(router: rig.router, store: rig.store, configuration: configuration, logger: SandboxRig.quietLogger)
    }

    /// Stores a job of `count` notifications (device tokens from `seed`) for the tenant.
    static func createJob(_ rig: SandboxRig, tenant: TenantID, id: String, count: Int, seed: Int) async throws -> Job {
        let notes = (0..<count).map { rig.note(seed + $0) }
        return try await rig.store.createJob(
            tenant: tenant, id: try JobID(id), environment: nil, notifications: notes, createdAt: Date()
        ).job
    }

    /// Waits (generously, without asserting on time) until the job is finished.
    static func waitFinished(_ rig: SandboxRig, tenant: TenantID, job: JobID, timeout: Duration) async throws -> JobProgress {
        let deadline = PushInstant.now.advanced(by: timeout)
        while PushInstant.now < deadline {
            if try await rig.store.job(tenant: tenant, id: job)?.state == .finished { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        return try #require(try await rig.store.progress(tenant: tenant, job: job))
    }

    /// Stores a job, runs a job runner until the job finished (or the timeout), and stops it.
    static func run(
        _ rig: SandboxRig, tenant: TenantID, id: String, count: Int, seed: Int, concurrency: Int = 100,
        timeout: Duration = .seconds(1800)
    ) async throws -> (job: Job, progress: JobProgress) {
        let job = try await createJob(rig, tenant: tenant, id: id, count: count, seed: seed)
        let runner = runner(rig, concurrency: concurrency)
        async let running: Void = runner.run()
        let progress = try await waitFinished(rig, tenant: tenant, job: job.id, timeout: timeout)
        runner.stop()
        await running
        return (job, progress)
    }

    /// The job's items, in index order.
    static func items(_ rig: SandboxRig, tenant: TenantID, job: JobID, count: Int) async throws -> [JobItem] {
        try await rig.store.items(tenant: tenant, job: job, fromIndex: 0, limit: count)
    }

    /// The sandbox's record by device token.
    static func byDevice(_ rig: SandboxRig) -> [String: [SandboxRecordedRequest]] {
        Dictionary(grouping: rig.sandbox.requests.filter { $0.deviceToken != nil }, by: { $0.deviceToken ?? "" })
    }

    /// The apns-id stored with each device token's item.
    static func storedIDs(_ rig: SandboxRig, tenant: TenantID, job: JobID, count: Int) async throws -> [String: String] {
        let items = try await items(rig, tenant: tenant, job: job, count: count)
        return Dictionary(
            items.map { ($0.notification.deviceToken?.hex ?? "", $0.notification.id?.rawValue ?? "") }, uniquingKeysWith: { a, _ in a })
    }
}

@Suite("Delivery: a 5,000-token batch across an outage that outlasts the circuit's probes", .serialized)
struct DeliveryOutageTests {
    @Test func everyDeviceGetsItExactlyOnce() async throws {
        try await withSandboxRig { rig in
            let tenant = try DeliveryRun.tenant(rig, "acme")
            await rig.router.install([tenant])
            let count = 5_000
            let job = try await DeliveryRun.createJob(rig, tenant: tenant.id, id: "outage", count: count, seed: 1_000_000)
            let runner = DeliveryRun.runner(rig)
            async let running: Void = runner.run()
            // The outage begins once the batch is under way and ends once the circuit opened and
            // two of its probes failed (it opened three times), with items waiting for their
            // retries: the circuit held the sends back, the probes' backoff grew, the retries wait.
            while rig.sandbox.requests.count < 1_000 { try await Task.sleep(for: .milliseconds(20)) }
            rig.sandbox.setFaults(SandboxFaults(outages: [SandboxOutage(start: Date(), duration: 3600)]))
            let ended = PushInstant.now.advanced(by: .seconds(600))
            func openings() -> Int { rig.router.circuits.statuses(now: .now).map(\.openings).max() ?? 0 }
            func outageDidItsPart() async throws -> Bool {
                guard openings() >= 3 else { return false }
                return try await rig.store.progress(tenant: tenant.id, job: job.id).map { $0.retrying > 0 } == true
            }
            while PushInstant.now < ended, try await !outageDidItsPart() {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(openings() >= 3, "the circuit reopened after failed probes")
            rig.sandbox.setFaults(.none)
            let progress = try await DeliveryRun.waitFinished(rig, tenant: tenant.id, job: job.id, timeout: .seconds(1800))
            runner.stop()
            await running

            #expect(progress.sent == count && progress.failed == 0 && progress.pending == 0, "\(progress)")
            let records = rig.sandbox.requests
            #expect(records.contains { $0.status == 503 && $0.reason == .serviceUnavailable }, "the outage was hit")
            let devices = DeliveryRun.byDevice(rig)
            let delivered = devices.mapValues { $0.filter { $0.status == 200 }.count }
            #expect(delivered.count == count)
            #expect(delivered.values.allSatisfy { $0 == 1 }, "devices delivered twice: \(delivered.values.filter { $0 > 1 }.count)")
            print("outage: \(records.count) requests, \(records.filter { $0.status == 503 }.count) answered 503, circuit openings \(rig.router.circuits.statuses(now: .now).map(\.openings))")
        }
    }
}

@Suite("Delivery: 2,500 tokens with 20% 500/503", .serialized)
struct DeliveryServerErrorTests {
    @Test func allDeliveredOnceWithTheirOwnApnsID() async throws {
        try await withSandboxRig(configure: { $0.faults = SandboxFaults(seed: 7, fraction500: 0.1, fraction503: 0.1) }) { rig in
            let tenant = try DeliveryRun.tenant(rig, "acme")
            await rig.router.install([tenant])
            let count = 2_500
            let (job, progress) = try await DeliveryRun.run(
                rig, tenant: tenant.id, id: "errors", count: count, seed: 2_000_000)

            #expect(progress.sent == count && progress.failed == 0, "\(progress)")
            let ids = try await DeliveryRun.storedIDs(rig, tenant: tenant.id, job: job.id, count: count)
            let devices = DeliveryRun.byDevice(rig)
            #expect(devices.count == count)
            #expect(devices.values.allSatisfy { $0.filter { $0.status == 200 }.count == 1 })
            #expect(devices.allSatisfy { token, requests in requests.allSatisfy { $0.apnsID == ids[token] } }, "every resend carried the item's apns-id")
            let resent = devices.values.filter { $0.count > 1 }.count
            #expect(resent > 0, "the faults forced resends")
            // Every request the sandbox got for a device is an attempt its item recorded: the
            // runner's policy made the resends, none hidden inside the pipeline's retry.
            let items = try await DeliveryRun.items(rig, tenant: tenant.id, job: job.id, count: count)
            let miscounted = items.filter { (devices[$0.notification.deviceToken?.hex ?? ""]?.count ?? 0) != ($0.result?.attempts ?? -1) }
            #expect(miscounted.count == 0, "items whose recorded attempts differ from their requests, first: \(miscounted.first.map { "\($0.index)" } ?? "-")")
            print("20% 5xx: \(rig.sandbox.requests.count) requests for \(count) items; \(resent) items resent")
        }
    }
}

@Suite("Delivery: 5,000 tokens with an abrupt drop every 700 requests", .serialized)
struct DeliveryDropTests {
    @Test func atLeastOnceDeliversEveryDeviceWithBoundedDuplicates() async throws {
        try await withSandboxRig(configure: { $0.faults = SandboxFaults(dropAfter: 700) }) { rig in
            let tenant = try DeliveryRun.tenant(rig, "acme", guarantee: .atLeastOnce)
            await rig.router.install([tenant])
            let count = 5_000
            let concurrency = 100
            let (_, progress) = try await DeliveryRun.run(
                rig, tenant: tenant.id, id: "drops", count: count, seed: 3_000_000, concurrency: concurrency)

            #expect(progress.sent == count && progress.failed == 0 && progress.unknown == 0, "\(progress)")
            let devices = DeliveryRun.byDevice(rig)
            let delivered = devices.mapValues { $0.filter { $0.status == 200 }.count }
            #expect(delivered.count == count && delivered.values.allSatisfy { $0 >= 1 })
            let duplicates = delivered.values.filter { $0 > 1 }.count
            // Each drop can leave at most the streams then in flight (≤ the tenant's concurrency) answered-but-lost.
            let drops = max(1, rig.sandbox.connectionCount - 1)
            #expect(duplicates <= drops * concurrency, "duplicates \(duplicates), drops \(drops)")
            print("drops, at-least-once: \(drops) drops, \(duplicates) devices got it twice")
        }
    }

    @Test func atMostOnceNeverDuplicatesAndReportsTheUnknown() async throws {
        try await withSandboxRig(configure: { $0.faults = SandboxFaults(dropAfter: 700) }) { rig in
            let tenant = try DeliveryRun.tenant(rig, "acme", guarantee: .atMostOnce)
            await rig.router.install([tenant])
            let count = 5_000
            let (job, progress) = try await DeliveryRun.run(
                rig, tenant: tenant.id, id: "drops-amo", count: count, seed: 4_000_000)

            #expect(progress.pending == 0 && progress.failed == 0 && progress.sent + progress.unknown == count, "\(progress)")
            #expect(progress.unknown > 0, "drops left outcomes unknown")
            let devices = DeliveryRun.byDevice(rig)
            #expect(devices.values.allSatisfy { $0.filter(\.processed).count <= 1 }, "no device's notification was processed twice")
            let outcomes = try await rig.store.outcomes(tenant: tenant.id, job: job.id)
            #expect(outcomes.contains { $0.state == .unknown && $0.reason == DeliveryReason.unknown && $0.count == progress.unknown })
            print("drops, at-most-once: \(progress.unknown) unknown, \(progress.sent) sent")
        }
    }
}

@Suite("Delivery: local refusals and the circuit", .serialized)
struct DeliveryLocalTests {
    @Test func theRateLimitDefersNeverFails() async throws {
        try await withSandboxRig { rig in
            let limit = PluginConfiguration(
                name: "rate-limit", options: .object([("per_second", .int(500)), ("burst", .int(1))]),
                location: SourceLocation(file: "tenants/acme.yaml", line: 1, column: 1))
            let tenant = try DeliveryRun.tenant(rig, "acme", plugins: [limit])
            await rig.router.install([tenant])
            let count = 1_000
            let job = try await DeliveryRun.createJob(rig, tenant: tenant.id, id: "limited", count: count, seed: 5_000_000)
            let runner = DeliveryRun.runner(rig)
            let start = PushInstant.now
            async let running: Void = runner.run()
            let progress = try await DeliveryRun.waitFinished(rig, tenant: tenant.id, job: job.id, timeout: .seconds(600))
            let elapsed = PushInstant.now - start
            runner.stop()
            await running

            #expect(progress.sent == count && progress.failed == 0, "\(progress)")
            #expect(DeliveryRun.byDevice(rig).values.allSatisfy { $0.count == 1 }, "each sent once")
            // 1,000 at 500 a second cannot take less than about 2 seconds (a lower bound only).
            #expect(elapsed >= .seconds(1.9), "\(elapsed)")
            print("rate limit 500/s, 1,000 tokens: \(elapsed)")
        }
    }

    @Test func oneTenantsDeadEndpointDoesNotSlowAnother() async throws {
        try await withSandboxRig { rig in
            var down = try DeliveryRun.tenant(rig, "down")
            let closed = APNsEndpoint(host: "127.0.0.1", port: 1)  // nothing listens: connection refused
            down.endpoints.production = closed
            down.endpoints.development = closed
            down.delivery.circuit = CircuitPolicy(failureThreshold: 5, probeInterval: .seconds(1), maxProbeInterval: .seconds(4))
            let up = try DeliveryRun.tenant(rig, "up")
            await rig.router.install([down, up])
            let downJob = try await DeliveryRun.createJob(rig, tenant: down.id, id: "down", count: 2_000, seed: 6_000_000)
            let upJob = try await DeliveryRun.createJob(rig, tenant: up.id, id: "up", count: 5_000, seed: 7_000_000)
            let runner = DeliveryRun.runner(rig)
            async let running: Void = runner.run()
            let upProgress = try await DeliveryRun.waitFinished(rig, tenant: up.id, job: upJob.id, timeout: .seconds(900))
            let downProgress = try #require(try await rig.store.progress(tenant: down.id, job: downJob.id))
            let statuses = rig.router.circuits.statuses(now: .now)
            runner.stop()
            await running

            #expect(upProgress.sent == 5_000 && upProgress.failed == 0, "\(upProgress)")
            #expect(downProgress.sent == 0 && downProgress.failed == 0 && downProgress.pending == 2_000, "\(downProgress)")
            #expect(downProgress.retrying > 0)
            let downCircuit = statuses.first { $0.key == DeliveryCircuits.Key(tenant: down.id, endpoint: closed.url) }
            #expect(downCircuit.map { $0.state != "closed" && $0.openings >= 1 } == true, "\(statuses)")
            #expect(statuses.allSatisfy { $0.key.tenant != up.id || $0.state == "closed" })
            // The circuit held the dead endpoint's sends back: far fewer attempts than items × retries.
            // Every item the runner took up waits with its reason (items not taken up yet, when the
            // other job finished first on a fast machine, have neither attempts nor an error).
            let items = try await rig.store.items(tenant: down.id, job: downJob.id, fromIndex: 0, limit: 2_000)
            #expect(items.contains { $0.attempts > 0 })
            #expect(items.allSatisfy { $0.attempts == 0 || $0.lastError != nil })
            print("circuit: up finished; down attempts \(items.reduce(0) { $0 + $1.attempts }) for 2,000 items, \(statuses)")
        }
    }

    @Test func anExpiredItemIsNotSent() async throws {
        try await withSandboxRig { rig in
            let tenant = try DeliveryRun.tenant(rig, "acme")
            await rig.router.install([tenant])
            var expired = rig.note(8_000_000)
            expired.expiration = .at(UInt32(Date().timeIntervalSince1970 - 60))
            let fresh = rig.note(8_000_001)
            let job = try await rig.store.createJob(
                tenant: tenant.id, id: try JobID("expiry"), environment: nil, notifications: [expired, fresh], createdAt: Date()
            ).job
            let runner = DeliveryRun.runner(rig)
            async let running: Void = runner.run()
            let progress = try await DeliveryRun.waitFinished(rig, tenant: tenant.id, job: job.id, timeout: .seconds(120))
            runner.stop()
            await running
            #expect(progress.sent == 1 && progress.failed == 1)
            let failed = try await rig.store.failedItems(tenant: tenant.id, job: job.id, afterIndex: -1, limit: 10)
            #expect(failed.map(\.index) == [0] && failed.first?.result?.reason == DeliveryReason.expired)
            #expect(rig.sandbox.requests.count == 1)
        }
    }
}
