import Foundation
import HeraldServer
import Testing

@Suite("API: listing a tenant's jobs")
struct JobListTests {
    /// Five batches of one tenant, one of another: the tenant's list has its five, newest first,
    /// paged without a job lost or repeated, filtered by state; bad queries name their field.
    @Test func jobsAreListedNewestFirstPagedAndFiltered() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        let globex = world.tenant("globex")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            var posted: [String] = []
            for n in 0..<5 {
                let body = """
                    {"job_id": "list-\(n)", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                     "device_tokens": ["\(Tokens.make(0x71, n))"]}
                    """
                let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
                #expect(accepted.status == 202, "\(accepted.text)")
                _ = try await client.waitForJob("list-\(n)", key: acme.apiKey)
                posted.append("list-\(n)")
                try await Task.sleep(for: .milliseconds(3))  // distinct creation times: the order is known
            }
            let theirs = """
                {"job_id": "globex-job", "notification": {"topic": "com.globex.app", "aps": {"alert": "hi"}},
                 "device_tokens": ["\(Tokens.make(0x72, 1))"]}
                """
            #expect(try await client.request(.post, "/v1/notifications/batch", key: globex.apiKey, json: theirs).status == 202)

            let all = try await client.request(.get, "/v1/jobs", key: acme.apiKey)
            #expect(all.status == 200, "\(all.text)")
            let entries = all.json["jobs"] as? [[String: Any]] ?? []
            #expect(entries.compactMap { $0["job_id"] as? String } == Array(posted.reversed()))
            #expect(entries.allSatisfy { $0["state"] as? String == "finished" && $0["items"] as? Int == 1 })
            #expect(all.json["next_before"] is NSNull, "one page: \(all.text)")

            // Two at a time: every job once, in order, and the last page says so.
            var paged: [String] = []
            var before: String? = nil
            var pages = 0
            repeat {
                let path = "/v1/jobs?limit=2" + (before.map { "&before=\($0)" } ?? "")
                let page = try await client.request(.get, path, key: acme.apiKey)
                #expect(page.status == 200, "\(page.text)")
                paged += (page.json["jobs"] as? [[String: Any]] ?? []).compactMap { $0["job_id"] as? String }
                before = page.json["next_before"] as? String
                pages += 1
            } while before != nil && pages < 10
            #expect(paged == Array(posted.reversed()))
            #expect(pages == 3)

            let running = try await client.request(.get, "/v1/jobs?state=running,accepted", key: acme.apiKey)
            #expect((running.json["jobs"] as? [[String: Any]])?.isEmpty == true, "\(running.text)")
            let finished = try await client.request(.get, "/v1/jobs?state=finished,finished&limit=1", key: acme.apiKey)
            #expect((finished.json["jobs"] as? [[String: Any]])?.first?["job_id"] as? String == "list-4")
            let other = try await client.request(.get, "/v1/jobs", key: globex.apiKey)
            #expect((other.json["jobs"] as? [[String: Any]])?.compactMap { $0["job_id"] as? String } == ["globex-job"])

            for (query, field) in [
                ("state=done", "state"), ("state=finished,,running", "state"), ("state=", "state"), ("state=running,", "state"),
                ("before=abc", "before"), ("before=12.", "before"), ("before=.list-1", "before"), ("before=1234567890123456.x", "before"),
                ("before=-5.list-1", "before"), ("limit=0", "limit"), ("limit=101", "limit"),
            ] {
                let reply = try await client.request(.get, "/v1/jobs?\(query)", key: acme.apiKey)
                #expect(reply.status == 400, "\(query): \(reply.text)")
                #expect(reply.errorCode == "invalid_query" && reply.errorField == field, "\(query): \(reply.text)")
            }
            #expect(try await client.request(.get, "/v1/jobs", key: "not-a-key").status == 401)

            // The operator's view of the same list, behind the admin token.
            let admin = try await client.request(.get, "/admin/tenants/acme/jobs?limit=2", key: "test-admin-token")
            #expect(admin.status == 200, "\(admin.text)")
            #expect((admin.json["jobs"] as? [[String: Any]])?.compactMap { $0["job_id"] as? String } == ["list-4", "list-3"])
            #expect(admin.json["next_before"] as? String != nil)
            #expect(try await client.request(.get, "/admin/tenants/acme/jobs", key: acme.apiKey).status == 401)
            let unknown = try await client.request(.get, "/admin/tenants/nobody/jobs", key: "test-admin-token")
            #expect(unknown.status == 200 && (unknown.json["jobs"] as? [[String: Any]])?.isEmpty == true, "\(unknown.text)")
            let badID = try await client.request(.get, "/admin/tenants/Not%20An%20Id/jobs", key: "test-admin-token")
            #expect(badID.status == 404, "\(badID.text)")
            let badQuery = try await client.request(.get, "/admin/tenants/acme/jobs?state=x", key: "test-admin-token")
            #expect(badQuery.status == 400 && badQuery.errorField == "state", "\(badQuery.text)")
        }
        await world.close()
    }
}
