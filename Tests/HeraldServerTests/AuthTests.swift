import Foundation
import HeraldServer
import Testing

@Suite("API: authentication and tenant isolation")
struct AuthTests {
    static let body = #"{"device_token": "\#(Tokens.make(0x41, 1))", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#

    @Test func tenantRoutesNeedAValidKey() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let none = try await client.request(.post, "/v1/notifications", json: Self.body)
            #expect(none.status == 401)
            #expect(none.errorCode == "unauthorized")
            #expect(none.headers[.wwwAuthenticate] == "Bearer realm=\"herald\"")

            let basic = try await client.request(
                .post, "/v1/notifications", json: Self.body, headers: [.authorization: "Basic dXNlcjpwYXNz"])
            #expect(basic.status == 401)

            let wrong = try await client.request(.post, "/v1/notifications", key: APIKeys.generate(), json: Self.body)
            #expect(wrong.status == 401)
            #expect(wrong.errorCode == "unauthorized")
            // The error never repeats the presented key.
            #expect(!wrong.text.contains("hk_"))

            for path in ["/v1/jobs/anything", "/v1/devices/invalid"] {
                #expect(try await client.request(.get, path).status == 401)
            }
            #expect(try await client.request(.put, "/v1/devices/\(Tokens.make(0x41, 2))").status == 401)
            // Nothing went to APNs.
            #expect(world.sandbox.requests.isEmpty)
        }
        await world.close()
    }

    @Test func aKeyActsOnlyOnItsOwnTenant() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        let globex = world.tenant("globex")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            // globex's key cannot send to acme's topic: it is not globex's.
            let crossSend = try await client.request(.post, "/v1/notifications", key: globex.apiKey, json: Self.body)
            #expect(crossSend.status == 422)
            #expect(crossSend.errorCode == "topic_disallowed")
            #expect(crossSend.errorField == "topic")

            let batch = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: """
                    {"job_id": "acme-job-1", "notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}},
                     "device_tokens": ["\(Tokens.make(0x42, 1))"]}
                    """)
            #expect(batch.status == 202, "\(batch.text)")
            _ = try await client.waitForJob("acme-job-1", key: acme.apiKey)

            // globex asking for acme's job gets exactly what an absent job gets.
            let cross = try await client.request(.get, "/v1/jobs/acme-job-1", key: globex.apiKey)
            let absent = try await client.request(.get, "/v1/jobs/no-such-job", key: globex.apiKey)
            let malformed = try await client.request(.get, "/v1/jobs/not%20an%20id", key: globex.apiKey)
            #expect(cross.status == 404)
            #expect(cross.body == absent.body)
            #expect(malformed.body == absent.body)
            #expect(cross.errorCode == "not_found")

            // globex may use the same job id for its own job: a different job.
            let own = try await client.request(
                .post, "/v1/notifications/batch", key: globex.apiKey,
                json: """
                    {"job_id": "acme-job-1", "notification": {"topic": "com.globex.app", "payload": {"aps": {"alert": "x"}}},
                     "device_tokens": ["\(Tokens.make(0x43, 1))", "\(Tokens.make(0x43, 2))"]}
                    """)
            #expect(own.status == 202)
            #expect(own.json["items"] as? Int == 2)
            let ownJob = try await client.waitForJob("acme-job-1", key: globex.apiKey)
            #expect(ownJob["items"] as? Int == 2)
            let acmeJob = try await client.request(.get, "/v1/jobs/acme-job-1", key: acme.apiKey)
            #expect(acmeJob.json["items"] as? Int == 1)

            // Re-posting a job id returns the existing job, unchanged.
            let again = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: """
                    {"job_id": "acme-job-1", "notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}},
                     "device_tokens": ["\(Tokens.make(0x44, 1))", "\(Tokens.make(0x44, 2))", "\(Tokens.make(0x44, 3))"]}
                    """)
            #expect(again.status == 200)
            #expect(again.json["existing"] as? Bool == true)
            #expect(again.json["items"] as? Int == 1)
        }
        await world.close()
    }

    @Test func adminRoutesNeedTheAdminTokenAndVanishWithoutOne() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: nil)) { live async throws in
            let client = live.client()
            let off = try await client.request(.get, "/admin/tenants", key: "anything")
            #expect(off.status == 404)
            #expect(off.errorCode == "route_not_found")
            #expect(try await client.request(.post, "/admin/reload", key: "anything").status == 404)
        }
        try await LiveServer.with(world.options(adminToken: "s3cret-admin")) { live async throws in
            let client = live.client()
            #expect(try await client.request(.get, "/admin/tenants").status == 401)
            #expect(try await client.request(.get, "/admin/tenants", key: "wrong").status == 401)
            // A tenant key is not an admin token.
            #expect(try await client.request(.get, "/admin/tenants", key: world.tenant("acme").apiKey).status == 401)
            #expect(try await client.request(.get, "/admin/tenants", key: "s3cret-admin").status == 200)
        }
        await world.close()
    }
}
