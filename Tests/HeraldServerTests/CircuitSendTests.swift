import APNsSandbox
import Foundation
import HTTPTypes
import HeraldCore
import Testing

/// Single API sends and the tenant+endpoint circuit: a run of transient failures opens it like
/// batch sends do; while open a send is answered at once (503 `circuit_open`, Retry-After) and
/// never reaches APNs; a tenant removed by a reload takes its circuit gauges out of /metrics.
@Suite("API: single sends and the delivery circuit")
struct CircuitSendTests {
    static let admin = "admin-token-for-tests"

    static func send(_ client: APIClient, _ tenant: TestTenant, _ index: Int) async throws -> APIClient.Reply {
        try await client.request(
            .post, "/v1/notifications", key: tenant.apiKey,
            json: #"{"device_token": "\#(Tokens.make(0x5c, index))", "topic": "\#(tenant.topics[0])", "aps": {"alert": "x"}}"#)
    }

    static func circuitLines(_ metrics: String, tenant: String) -> [Substring] {
        metrics.split(separator: "\n").filter {
            $0.hasPrefix("herald_delivery_circuit") && $0.contains("tenant=\"\(tenant)\"")
        }
    }

    @Test func aRunOfTransientFailuresOpensTheCircuitAndThenSingleSendsAreRefusedAtOnce() async throws {
        // Every request answered 503; the probe waits a minute, so the circuit stays open here.
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"],
            extraYAML: """
                delivery:
                  circuit_failure_threshold: 3
                  circuit_probe_interval: 60s
                  circuit_max_probe_interval: 2m
                """)
        let globex = TestTenant.make(id: "globex", teamID: "GLOBEXTM01", keyID: "GLOBEXKEY1", topics: ["com.globex.app"])
        let world = try await TestWorld.make(
            tenants: [acme, globex], devices: [], faults: SandboxFaults(fraction503: 1), recordPayloads: false)
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            for index in 0..<3 {
                let reply = try await Self.send(client, acme, index)
                #expect(reply.json["status"] as? Int == 503, "APNs' own answer: \(reply.text)")
            }
            let requestsWhenOpened = world.sandbox.requests.count
            #expect(requestsWhenOpened >= 3)

            let refused = try await Self.send(client, acme, 3)
            #expect(refused.status == 503, "\(refused.text)")
            #expect(refused.errorCode == "circuit_open")
            let message = refused.error["message"] as? String ?? ""
            #expect(message.contains("circuit") && message.contains("https://127.0.0.1:\(world.sandbox.port)"), "\(message)")
            let retryAfter = try #require(refused.headers[.retryAfter].flatMap { Int($0) })
            #expect((1...60).contains(retryAfter))
            #expect(world.sandbox.requests.count == requestsWhenOpened, "an open circuit sends nothing to APNs")

            // Another tenant on the same endpoint is not held back by acme's circuit.
            let other = try await Self.send(client, globex, 4)
            #expect(other.status != 503 || other.errorCode != "circuit_open", "\(other.text)")
            #expect(world.sandbox.requests.count > requestsWhenOpened)

            // The circuit shows in /admin/tenants and /metrics.
            let tenants = try await client.request(.get, "/admin/tenants", key: Self.admin)
            #expect(tenants.text.contains("\"open\""), "\(tenants.text)")
            var metrics = try await client.request(.get, "/metrics", key: Self.admin).text
            let open = Self.circuitLines(metrics, tenant: "acme")
            #expect(open.contains { $0.hasPrefix("herald_delivery_circuit_state") && ($0.hasSuffix(" 2.0") || $0.hasSuffix(" 2")) }, "\(open)")

            // acme removed by a reload: its circuit gauges leave /metrics.
            try FileManager.default.removeItem(atPath: world.tenantsDirectory + "/acme.yaml")
            let reload = try await client.request(.post, "/admin/reload", key: Self.admin)
            #expect(reload.status == 200, "\(reload.text)")
            #expect(reload.json["removed"] as? [String] == ["acme"])
            metrics = try await client.request(.get, "/metrics", key: Self.admin).text
            #expect(Self.circuitLines(metrics, tenant: "acme").isEmpty, "\(Self.circuitLines(metrics, tenant: "acme"))")
        }
        await world.close()
    }

    /// While the sandbox holds its answers, a batch's items show as in flight in `/metrics`, and
    /// nothing once the job is finished.
    @Test func theJobRunnersLoadShowsInMetricsWhileABatchIsSent() async throws {
        let acme = TestTenant.make(id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"])
        let world = try await TestWorld.make(
            tenants: [acme], devices: [], faults: SandboxFaults(addedLatency: 3), recordPayloads: false)
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let tokens = (0..<20).map { "\"\(Tokens.make(0x6d, $0))\"" }.joined(separator: ", ")
            let batch = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: """
                    {"job_id": "load-1", "notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}},
                     "device_tokens": [\(tokens)]}
                    """)
            #expect(batch.status == 202, "\(batch.text)")
            var during: [String: Double] = [:]
            let clock = ContinuousClock()
            let end = clock.now.advanced(by: .milliseconds(2500))
            while clock.now < end {
                during = PrometheusText.samples(try await client.request(.get, "/metrics", key: Self.admin).text, prefix: "herald_jobs_")
                if during["herald_jobs_items_in_flight"] == 20 { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(during["herald_jobs_items_in_flight"] == 20, "\(during)")
            #expect(during["herald_jobs_active"] == 1, "\(during)")
            // The tenant's items go by callback (its middlewares have hooks, the store is SQLite):
            // one task drives all of the job's sends.
            #expect(during["herald_jobs_send_tasks"] == 1, "one task for the job's 20 sends: \(during)")
            #expect(during["herald_jobs_claimed_items"] == 20, "\(during)")

            _ = try await client.waitForJob("load-1", key: acme.apiKey)
            var after: [String: Double] = [:]
            for _ in 0..<100 {
                after = PrometheusText.samples(try await client.request(.get, "/metrics", key: Self.admin).text, prefix: "herald_jobs_")
                if after["herald_jobs_active"] == 0 { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(after == [
                "herald_jobs_items_in_flight": 0, "herald_jobs_active": 0, "herald_jobs_send_tasks": 0,
                "herald_jobs_claimed_items": 0,
            ])
        }
    }
}
