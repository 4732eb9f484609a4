import Foundation
import HTTPTypes
import Testing

@testable import HeraldServer

/// Usage per tenant through the API: counted on the send path, written to the store, summed by
/// hour or day, the same as a batch's report, and still there after a restart.
@Suite("API: usage per tenant")
struct UsageAPITests {
    static let admin = "usage-admin-token"

    /// Reads `path` until `accepted` in its totals reaches `expected` (the counts are written
    /// every few milliseconds here), then returns the answer.
    /// The usage report at `path` once its totals show `expected` accepted and every count in
    /// `also` (each instance adds its counts when it flushes, so a total read too early is short).
    static func usage(
        _ client: APIClient, _ path: String, key: String, accepted expected: Int, also: [String: Int] = [:]
    ) async throws -> [String: Any] {
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: .seconds(30))
        let wanted = also.merging(["accepted": expected]) { kept, _ in kept }
        while true {
            let reply = try await client.request(.get, path, key: key)
            guard reply.status == 200 else { throw HarnessError("usage answered \(reply.status): \(reply.text)") }
            let totals = reply.json["totals"] as? [String: Any]
            if wanted.allSatisfy({ totals?[$0.key] as? Int == $0.value }) { return reply.json }
            guard clock.now < end else { throw HarnessError("the usage did not reach \(wanted): \(reply.text)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    @Test func sendsAndBatchItemsAreCountedLikeTheReportAndKeptAcrossARestart() async throws {
        let world = try await TestWorld.make()
        let (acme, globex) = (world.tenant("acme"), world.tenant("globex"))
        let options = world.options(adminToken: Self.admin) { $0.usageFlushInterval = .milliseconds(50) }
        let tokens = (0..<40).map { Tokens.make(0x91, $0) }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            for index in 0..<3 {
                let sent = try await client.request(
                    .post, "/v1/notifications", key: acme.apiKey,
                    json: #"{"device_token": "\#(Tokens.make(0x90, index))", "topic": "com.acme.app", "payload": {"aps": {}}}"#)
                #expect(sent.status == 200, "\(sent.text)")
            }
            let refused = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x90, 9))", "topic": "com.other.app", "payload": {"aps": {}}}"#)
            #expect(refused.status == 422, "\(refused.text)")
            #expect(
                try await client.request(
                    .post, "/v1/notifications", key: globex.apiKey,
                    json: #"{"device_token": "\#(Tokens.make(0x90, 20))", "topic": "com.globex.app", "payload": {"aps": {}}}"#
                ).status == 200)
            let batch = """
                {"job_id": "usage-batch", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            #expect(try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: batch).status == 202)
            let job = try await client.waitForJob("usage-batch", key: acme.apiKey)
            let counts = try #require(job["counts"] as? [String: Int])
            #expect(counts["sent"] == tokens.count)

            let usage = try await Self.usage(
                client, "/v1/usage", key: acme.apiKey, accepted: 4 + tokens.count,
                also: ["delivered": 3 + (counts["sent"] ?? -1), "batch_items": tokens.count])
            let totals = try #require(usage["totals"] as? [String: Any])
            #expect(totals["delivered"] as? Int == 3 + counts["sent"]!)
            #expect(totals["failed"] as? Int == 1 + counts["failed"]!)
            #expect((totals["failed_by_class"] as? [String: Int])?["refused"] == 1)
            #expect(totals["batch_items"] as? Int == tokens.count)
            #expect(usage["tenant"] as? String == "acme" && usage["granularity"] as? String == "hour")
            let buckets = try #require(usage["buckets"] as? [[String: Any]])
            #expect(!buckets.isEmpty && buckets.allSatisfy { $0["tenant"] as? String == "acme" })

            // The operator's view: every tenant, by day, as CSV.
            let all = try await Self.usage(client, "/admin/usage?granularity=day", key: Self.admin, accepted: 5 + tokens.count)
            #expect(Set((all["buckets"] as? [[String: Any]] ?? []).compactMap { $0["tenant"] as? String }) == ["acme", "globex"])
            let csv = try await client.request(.get, "/admin/usage?tenant=globex&format=csv", key: Self.admin)
            #expect(csv.status == 200 && csv.headers[.contentType]?.hasPrefix("text/csv") == true)
            let lines = csv.text.split(separator: "\n")
            #expect(lines.first?.hasPrefix("start,tenant,accepted,delivered,failed,failed_rejected") == true)
            // One row: a single send is counted, accepted and delivered, in the hour it ended.
            let rows = lines.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false) }
            #expect(rows.count == 1 && rows.allSatisfy { $0.count == 11 && $0[1] == "globex" }, "\(csv.text)")
            let column = { (index: Int) in rows.reduce(0) { $0 + (Int($1.count > index ? $1[index] : "") ?? -100) } }
            #expect(column(2) == 1 && column(3) == 1 && column(4) == 0, "\(csv.text)")

            // Bad queries name the parameter.
            let bad = try await client.request(.get, "/v1/usage?granularity=week", key: acme.apiKey)
            #expect(bad.status == 400 && bad.errorField == "granularity")
            let empty = try await client.request(.get, "/v1/usage?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", key: acme.apiKey)
            #expect(empty.status == 422 && empty.errorField == "from")
            let long = try await client.request(.get, "/v1/usage?from=2025-01-01T00:00:00Z&to=2025-03-01T00:00:00Z", key: acme.apiKey)
            #expect(long.status == 422)
            #expect(try await client.request(.get, "/admin/usage?tenant=NOT_AN_ID", key: Self.admin).status == 400)
        }
        // After a restart the counts are read back from the store.
        try await LiveServer.with(options) { live async throws in
            let usage = try await Self.usage(live.client(), "/v1/usage", key: acme.apiKey, accepted: 4 + tokens.count)
            #expect((usage["totals"] as? [String: Any])?["batch_items"] as? Int == tokens.count)
        }
        await world.close()
    }
}
