import APNsSandbox
import Foundation
import HeraldCore
import HeraldServer
import HeraldStore
import Testing

@Suite("API: batch jobs")
struct BatchTests {
    /// 5,000 notifications: one in twenty to unregistered devices (410), one in twenty to devices
    /// bound to another topic (400 DeviceTokenNotForTopic), the rest answered 200 except the ones
    /// fault injection fails with 500/503 (the tenant does not retry here). Every item's
    /// recorded outcome must be APNs' last answer to it, and the counts must add up.
    /// (Error bodies beyond one connection's 64 KiB receive window are covered by the transport's
    /// `connectionWindowIsReplenished` test.)
    @Test func aBatchOf5000CountsEveryOutcome() async throws {
        let total = 5_000
        let tokens = (0..<total).map { Tokens.make(0x61, $0) }
        var devices: [SandboxDevice] = []
        for index in stride(from: 0, to: total, by: 20) {
            devices.append(.unregistered(tokens[index], since: TestWorld.unregisteredSince))
            devices.append(.bound(tokens[index + 1], topic: "com.acme.app.voip"))
        }
        // The retry plugin is off (one attempt per send), but under the tenant's at-least-once
        // delivery policy the job runner tries every injected 500/503 again: none is an item's
        // final answer. The policy's waits are short: the test checks outcomes, not backoff.
        let acmeTenant = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app", "com.acme.app.voip"],
            extraYAML: """
                plugins:
                  - name: retry
                    options: {max_attempts: 1}
                  - name: metrics
                delivery:
                  initial_backoff: 20ms
                  max_backoff: 100ms

                """)
        let world = try await TestWorld.make(
            tenants: [acmeTenant], devices: devices, faults: SandboxFaults(seed: 7, fraction500: 0.01, fraction503: 0.01),
            recordPayloads: false)
        let acme = world.tenant("acme")
        // Few streams at once: the test checks the batch's outcomes, not its speed.
        let options = world.options { $0.jobs.concurrencyPerTenant = 16 }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let body = """
                {"job_id": "big-batch", "environment": "development",
                 "notification": {"topic": "com.acme.app", "priority": 5, "aps": {"alert": {"title": "Sale", "body": "Today only"}}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            #expect(accepted.json["job_id"] as? String == "big-batch")
            #expect(accepted.json["items"] as? Int == total)
            #expect(accepted.headers[.location] == "/v1/jobs/big-batch")

            let job = try await client.waitForJob("big-batch", key: acme.apiKey, timeout: .seconds(300))
            let counts = try #require(job["counts"] as? [String: Int])
            #expect(counts["pending"] == 0)
            #expect((counts["sent"] ?? 0) + (counts["failed"] ?? 0) == total)

            // APNs' last answer to each device (each token is one item).
            let answers = world.sandbox.requests.filter(\.processed)
            var last: [String: SandboxRecordedRequest] = [:]
            for answer in answers where answer.deviceToken != nil {
                if let seen = last[answer.deviceToken!], seen.sequence > answer.sequence { continue }
                last[answer.deviceToken!] = answer
            }
            #expect(last.count == total, "every item reached APNs")
            struct Outcome: Hashable {
                var status: Int?
                var reason: String?
            }
            var expected: [Outcome: Int] = [:]
            for answer in last.values {
                expected[Outcome(status: answer.status, reason: answer.status == 200 ? nil : answer.reason?.wireValue), default: 0] += 1
            }
            var reported: [Outcome: Int] = [:]
            for outcome in job["outcomes"] as? [[String: Any]] ?? [] {
                reported[Outcome(status: outcome["status"] as? Int, reason: outcome["reason"] as? String)] = outcome["count"] as? Int
            }
            #expect(reported == expected)
            #expect(reported[Outcome(status: 410, reason: "Unregistered")] == total / 20)
            #expect(reported[Outcome(status: 400, reason: "DeviceTokenNotForTopic")] == total / 20)
            #expect(reported[Outcome(status: 500, reason: "InternalServerError")] == nil)
            #expect(reported[Outcome(status: 503, reason: "ServiceUnavailable")] == nil)
            #expect(counts["sent"] == expected[Outcome(status: 200, reason: nil)])

            // Page through the failed items (500, in three pages): each one is APNs' last answer to
            // it, with its apns-id.
            var failedAfter = -1
            var failedSeen = 0
            var pages = 0
            while true {
                pages += 1
                let page = try await client.request(.get, "/v1/jobs/big-batch?failed_after=\(failedAfter)&limit=200", key: acme.apiKey)
                let items = page.json["failed_items"] as? [[String: Any]] ?? []
                for item in items {
                    let token = try #require(item["device_token"] as? String)
                    let answer = try #require(last[token])
                    #expect(item["status"] as? Int == answer.status)
                    #expect(item["reason"] as? String == answer.reason?.wireValue)
                    #expect(item["apns_id"] as? String == answer.apnsID)
                    // The development environment's delivery-log key of that answer.
                    #expect(item["apns_unique_id"] as? String == answer.uniqueID && answer.uniqueID != nil)
                    let index = try #require(item["index"] as? Int)
                    #expect(index > failedAfter)
                    #expect(tokens[index] == token)
                }
                failedSeen += items.count
                guard let next = page.json["next_failed_after"] as? Int else { break }
                failedAfter = next
            }
            #expect(failedSeen == counts["failed"])
            #expect(pages == 3)

            // Each item went out under one apns-id; the ones answered 500/503 went out again.
            let faulted = world.sandbox.requests.filter { $0.status == 500 || $0.status == 503 }.count
            #expect(faulted > 0)
            #expect(world.sandbox.requests.count == total + faulted)
            let idsPerToken = Dictionary(grouping: world.sandbox.requests, by: { $0.deviceToken ?? "" }).mapValues { Set($0.map(\.apnsID)) }
            #expect(idsPerToken.values.allSatisfy { $0.count == 1 })
        }
        await world.close()
    }

    @Test func aListOfDistinctNotificationsIsOneJob() async throws {
        let world = try await TestWorld.make(recordPayloads: true)
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let apnsID = "0f0e0d0c-0b0a-4908-8706-050403020100"
            let body = """
                {"notifications": [
                  {"device_token": "\(Tokens.make(0x62, 0))", "topic": "com.acme.app", "payload": {"aps": {"alert": "one"}}},
                  {"device_token": "\(Tokens.make(0x62, 1))", "topic": "com.acme.app.voip", "push_type": "voip", "apns_id": "\(apnsID)",
                   "payload": {"call": "x"}},
                  {"device_token": "\(Tokens.make(0x62, 2))", "topic": "com.acme.app", "push_type": "background", "priority": 5,
                   "aps": {"content-available": 1}}
                ]}
                """
            let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")
            let id = try #require(accepted.json["job_id"] as? String)
            let job = try await client.waitForJob(id, key: acme.apiKey)
            #expect((job["counts"] as? [String: Int])?["sent"] == 3)
            let voip = try #require(world.sandbox.requests.first { $0.apnsID == apnsID })
            #expect(voip.pushType == "voip")
            #expect(voip.topic == "com.acme.app.voip")
            let background = try #require(world.sandbox.requests.first { $0.deviceToken == Tokens.make(0x62, 2) })
            #expect(background.priority == "5")
            #expect(background.payload.map { String(decoding: $0, as: UTF8.self) } == #"{"aps":{"content-available":1}}"#)
        }
        await world.close()
    }

    /// A client that sends `Expect: 100-continue` (curl does for bodies over 1 MiB) gets the
    /// interim `100 Continue` before it sends the body, not after its own wait (curl's: 1 s).
    @Test func expectContinueIsAnsweredBeforeTheBody() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let body = #"{"job_id": "expect-1", "notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}, "device_tokens": ["\#(Tokens.make(0x63, 0))"]}"#
            let socket = try RawSocket(port: live.port)
            try socket.write(
                "POST /v1/notifications/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(acme.apiKey)\r\n"
                    + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nExpect: 100-continue\r\n\r\n")
            // Nothing of the body is sent until the interim answer came (the read gives up after 60 s).
            var received = String(decoding: await socket.received(), as: UTF8.self)
            #expect(received.hasPrefix("HTTP/1.1 100 Continue\r\n"), "\(received)")
            try socket.write(body)
            while !received.contains("HTTP/1.1 202") {
                let more = await socket.received()
                if more.isEmpty { break }
                received += String(decoding: more, as: UTF8.self)
            }
            #expect(received.contains("HTTP/1.1 202 Accepted"), "\(received)")
            // Without the expectation nothing interim is sent.
            let plain = try RawSocket(port: live.port)
            try plain.write(
                "POST /v1/notifications/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(acme.apiKey)\r\n"
                    + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body)
            let answer = String(decoding: await plain.received(), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 200 OK"), "the same job id again: 200 with the stored job; \(answer)")
            _ = try await live.client().waitForJob("expect-1", key: acme.apiKey)
        }
        await world.close()
    }

    /// SIGTERM-style graceful shutdown in the middle of a job: the sends on the wire finish and
    /// are recorded, the rest stays pending; a new server on the same store completes the job
    /// and no notification reaches APNs twice.
    @Test func gracefulShutdownLeavesNothingHalfDone() async throws {
        let total = 1500
        let world = try await TestWorld.make(faults: SandboxFaults(addedLatency: 0.004))
        let acme = world.tenant("acme")
        let tokens = (0..<total).map { "\"\(Tokens.make(0x63, $0))\"" }.joined(separator: ",")
        let options = world.options { $0.jobs.concurrencyPerTenant = 16 }
        let doneAtShutdown = try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let accepted = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: #"{"job_id": "graceful", "notification": {"topic": "com.acme.app", "payload": {"aps": {}}}, "device_tokens": [\#(tokens)]}"#)
            #expect(accepted.status == 202)
            while true {
                let job = try await client.request(.get, "/v1/jobs/graceful", key: acme.apiKey)
                let counts = job.json["counts"] as? [String: Int] ?? [:]
                let done = (counts["sent"] ?? 0) + (counts["failed"] ?? 0)
                if done >= 200 { return done }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        let store = try SQLitePushStore(path: world.storagePath)
        let tenant = try TenantID("acme")
        let items = try await store.items(tenant: tenant, job: try JobID("graceful"), fromIndex: 0, limit: total)
        let recorded = items.filter { $0.state != .pending }
        #expect(recorded.count >= doneAtShutdown)
        #expect(recorded.count < total, "the shutdown came before the job finished")
        // Everything APNs answered was recorded; nothing was cut off on the wire.
        let answered = Set(world.sandbox.requests.filter(\.processed).map(\.apnsID))
        #expect(answered == Set(recorded.compactMap { $0.notification.id?.rawValue }))
        #expect(world.sandbox.requests.allSatisfy { $0.processed })

        try await LiveServer.with(options) { live async throws in
            let job = try await live.client().waitForJob("graceful", key: acme.apiKey)
            #expect((job["counts"] as? [String: Int])?["sent"] == total)
        }
        let perID = Dictionary(grouping: world.sandbox.requests, by: \.apnsID)
        #expect(perID.count == total)
        #expect(perID.values.allSatisfy { $0.count == 1 }, "no notification went out twice")
        await world.close()
    }
}
