import APNsSandbox
import Foundation
import HeraldCore
import HeraldServer
import HeraldStore
import Testing

@Suite("API: cancelling a batch job")
struct CancelJobTests {
    /// A batch slowed down by the sandbox (each answer held 40 ms, 8 sends at once: ~200 a
    /// second, so 2,000 tokens would take ~10 s) is cancelled once some of it went out. From the
    /// cancel on, only the sends already on the wire reach APNs; every item is accounted for as
    /// sent, failed or cancelled, and the job stays cancelled.
    @Test func aCancelStopsTheSendsAndReportsTheRestAsCancelled() async throws {
        let total = 2_000
        let tokens = (0..<total).map { Tokens.make(0x63, $0) }
        let world = try await TestWorld.make(faults: SandboxFaults(addedLatency: 0.04))
        let acme = world.tenant("acme")
        let globex = world.tenant("globex")
        let concurrency = 8
        let options = world.options { $0.jobs.concurrencyPerTenant = concurrency }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let body = """
                {"job_id": "to-cancel", "environment": "development",
                 "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")

            // Some of it went out.
            var sentBefore = 0
            for _ in 0..<600 where sentBefore < 40 {
                let job = try await client.request(.get, "/v1/jobs/to-cancel", key: acme.apiKey)
                sentBefore = (job.json["counts"] as? [String: Int])?["sent"] ?? 0
                if sentBefore < 40 { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(sentBefore >= 40, "the batch did not get going")

            // Another tenant's cancel finds no such job, and changes nothing.
            let foreign = try await client.request(.post, "/v1/jobs/to-cancel/cancel", key: globex.apiKey)
            #expect(foreign.status == 404, "\(foreign.text)")

            let cancelled = try await client.request(.post, "/v1/jobs/to-cancel/cancel", key: acme.apiKey)
            let requestsAtCancel = world.sandbox.requests.count
            #expect(cancelled.status == 200, "\(cancelled.text)")
            #expect(cancelled.json["state"] as? String == "cancelled")
            let firstCounts = try #require(cancelled.json["counts"] as? [String: Int])
            #expect(firstCounts["pending"] == 0 && firstCounts["retrying"] == 0)
            #expect((firstCounts["cancelled"] ?? 0) > total / 2, "\(firstCounts)")

            // The sends on the wire at the cancel end (the tenant's permits come back), then
            // nothing more goes out.
            for _ in 0..<400 where live.server.runner.permitsHeld(by: try TenantID(acme.id)) > 0 {
                try await Task.sleep(for: .milliseconds(25))
            }
            #expect(live.server.runner.permitsHeld(by: try TenantID(acme.id)) == 0)
            let requestsAfter = world.sandbox.requests.count
            // At most what was on the wire, and what the driving task had started before it saw
            // the cancel (each bounded by the tenant's permits).
            #expect(requestsAfter - requestsAtCancel <= 2 * concurrency, "\(requestsAtCancel) → \(requestsAfter)")
            // Once the job's run has returned, none of its senders is left to send.
            let job = try JobID("to-cancel")
            for _ in 0..<1_200 where live.server.runner.isRunning(job, of: try TenantID(acme.id)) {
                try await Task.sleep(for: .milliseconds(25))
            }
            #expect(!live.server.runner.isRunning(job, of: try TenantID(acme.id)), "the cancelled job's run did not end")
            #expect(world.sandbox.requests.count == requestsAfter, "sent after the cancel settled")

            // Every item is accounted for: what reached APNs has its outcome, the rest is cancelled.
            let report = try await client.request(.get, "/v1/jobs/to-cancel", key: acme.apiKey)
            #expect(report.json["state"] as? String == "cancelled")
            #expect(report.json["updated_at"] as? String == cancelled.json["updated_at"] as? String, "the cancel's time as stored")
            let counts = try #require(report.json["counts"] as? [String: Int])
            let sent = counts["sent"] ?? -1
            let failed = counts["failed"] ?? -1
            let unsent = counts["cancelled"] ?? -1
            #expect(sent + failed + unsent == total, "\(counts)")
            #expect(sent + failed == world.sandbox.requests.filter(\.processed).count, "\(counts)")
            #expect(counts["pending"] == 0 && counts["retrying"] == 0)
            let outcomes = report.json["outcomes"] as? [[String: Any]] ?? []
            #expect(outcomes.contains { $0["state"] as? String == "cancelled" && $0["count"] as? Int == unsent })
            // No device got it twice.
            let devices = world.sandbox.requests.compactMap(\.deviceToken)
            #expect(Set(devices).count == devices.count)

            // A repeat answers the same; the job stays cancelled.
            let again = try await client.request(.post, "/v1/jobs/to-cancel/cancel", key: acme.apiKey)
            #expect(again.status == 200 && again.json["state"] as? String == "cancelled", "\(again.text)")
            #expect((again.json["counts"] as? [String: Int])?["cancelled"] == unsent)
            let missing = try await client.request(.post, "/v1/jobs/no-such-job/cancel", key: acme.apiKey)
            #expect(missing.status == 404)
        }
        await world.close()
    }

    /// The operator stops a tenant's runaway batch through the admin API: the same cancel, behind
    /// the admin token.
    @Test func theOperatorCancelsATenantsJob() async throws {
        let tokens = (0..<1_000).map { Tokens.make(0x65, $0) }
        let world = try await TestWorld.make(faults: SandboxFaults(addedLatency: 0.04))
        let acme = world.tenant("acme")
        let options = world.options { $0.jobs.concurrencyPerTenant = 8 }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let body = """
                {"job_id": "runaway", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            // Not with the tenant's key, nor without a token.
            let asTenant = try await client.request(.post, "/admin/tenants/acme/jobs/runaway/cancel", key: acme.apiKey)
            #expect(asTenant.status == 401, "\(asTenant.text)")
            let missing = try await client.request(.post, "/admin/tenants/acme/jobs/no-such-job/cancel", key: "test-admin-token")
            #expect(missing.status == 404, "\(missing.text)")
            let elsewhere = try await client.request(.post, "/admin/tenants/globex/jobs/runaway/cancel", key: "test-admin-token")
            #expect(elsewhere.status == 404, "another tenant's id finds no such job: \(elsewhere.text)")

            let cancelled = try await client.request(.post, "/admin/tenants/acme/jobs/runaway/cancel", key: "test-admin-token")
            #expect(cancelled.status == 200, "\(cancelled.text)")
            #expect(cancelled.json["state"] as? String == "cancelled")
            for _ in 0..<400 where live.server.runner.permitsHeld(by: try TenantID(acme.id)) > 0 {
                try await Task.sleep(for: .milliseconds(25))
            }
            // The tenant sees it cancelled, every item accounted for.
            let report = try await client.request(.get, "/v1/jobs/runaway", key: acme.apiKey)
            #expect(report.json["state"] as? String == "cancelled")
            let counts = try #require(report.json["counts"] as? [String: Int])
            #expect((counts["sent"] ?? -1) + (counts["failed"] ?? -1) + (counts["cancelled"] ?? -1) == tokens.count, "\(counts)")
            #expect((counts["cancelled"] ?? 0) > tokens.count / 2, "\(counts)")
            #expect(world.sandbox.requests.count == (counts["sent"] ?? -1) + (counts["failed"] ?? -1))
        }
        await world.close()
    }

    /// A finished job cannot be cancelled (409), and stays finished.
    @Test func aFinishedJobIsNotCancelled() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let body = """
                {"job_id": "small", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": ["\(Tokens.make(0x64, 1))", "\(Tokens.make(0x64, 2))"]}
                """
            let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            _ = try await client.waitForJob("small", key: acme.apiKey)
            let refused = try await client.request(.post, "/v1/jobs/small/cancel", key: acme.apiKey)
            #expect(refused.status == 409, "\(refused.text)")
            #expect((refused.json["error"] as? [String: Any])?["code"] as? String == "conflict")
            let job = try await client.request(.get, "/v1/jobs/small", key: acme.apiKey)
            #expect(job.json["state"] as? String == "finished")
            #expect((job.json["counts"] as? [String: Int])?["cancelled"] == 0)
            #expect((job.json["counts"] as? [String: Int])?["sent"] == 2)
        }
        await world.close()
    }
}
