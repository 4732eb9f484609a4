import APNsSandbox
import Foundation
import HeraldCore
import HeraldServer
import Testing

@Suite("API: single sends and devices")
struct SendTests {
    @Test func aSingleSendWaitsForAPNsAndAnswersWithItsAnswer() async throws {
        let world = try await TestWorld.make(recordPayloads: true)
        let acme = world.tenant("acme")
        let token = Tokens.make(0x11, 1)
        let apnsID = "5c1e6a3e-0b7e-4a3c-9d1f-2a9e8c7b6d5f"
        try await LiveServer.with(world.options()) { live async throws in
            let reply = try await live.client().request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: """
                    {"device_token": "\(token)", "topic": "com.acme.app", "push_type": "alert", "priority": 5,
                     "collapse_id": "news", "apns_id": "\(apnsID.uppercased())", "expiration": 0,
                     "payload": {"aps": {"alert": "Hi"}, "k": 1.50}}
                    """)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.json["success"] as? Bool == true)
            #expect(reply.json["status"] as? Int == 200)
            #expect(reply.json["apns_id"] as? String == apnsID)
            #expect(reply.json["reason"] is NSNull)
            #expect(reply.json["environment"] as? String == "development")
            // The development environment's key to Apple's delivery log, as the sandbox answered it.
            let uniqueID = try #require(reply.json["apns_unique_id"] as? String)
            #expect(world.sandbox.requests.filter { $0.apnsID == apnsID }.map(\.uniqueID) == [uniqueID])
        }
        let seen = world.sandbox.requests.filter { $0.apnsID == apnsID }
        #expect(seen.count == 1)
        #expect(seen.first?.deviceToken == token)
        #expect(seen.first?.topic == "com.acme.app")
        #expect(seen.first?.priority == "5")
        #expect(seen.first?.collapseID == "news")
        #expect(seen.first?.expiration == "0")
        #expect(seen.first?.teamID == "ACMETEAM01")
        // The payload goes out byte for byte as the request wrote it.
        #expect(seen.first?.payload.map { String(decoding: $0, as: UTF8.self) } == #"{"aps": {"alert": "Hi"}, "k": 1.50}"#)
        await world.close()
    }

    @Test func typedAPSFieldsBuildThePayload() async throws {
        let world = try await TestWorld.make(recordPayloads: true)
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let reply = try await live.client().request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: """
                    {"device_token": "\(Tokens.make(0x12, 1))", "topic": "com.acme.app",
                     "aps": {"alert": {"title": "Order shipped", "body": "Arrives Tuesday"}, "badge": 3,
                             "sound": "default", "thread-id": "orders", "mutable-content": 1},
                     "custom": {"order": "A-17"}}
                    """)
            #expect(reply.status == 200, "\(reply.text)")
            let id = try #require(reply.json["apns_id"] as? String)
            let payload = try #require(world.sandbox.requests.first { $0.apnsID == id }?.payload)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
            let aps = try #require(object["aps"] as? [String: Any])
            let alert = try #require(aps["alert"] as? [String: Any])
            #expect(alert["title"] as? String == "Order shipped")
            #expect(alert["body"] as? String == "Arrives Tuesday")
            #expect(aps["badge"] as? Int == 3)
            #expect(aps["sound"] as? String == "default")
            #expect(aps["thread-id"] as? String == "orders")
            #expect(aps["mutable-content"] as? Int == 1)
            #expect(object["order"] as? String == "A-17")
        }
        await world.close()
    }

    @Test func apnsRejectionsAreAnsweredWithStatusReasonAndTimestamp() async throws {
        let gone = Tokens.make(0x21, 1)
        let elsewhere = Tokens.make(0x22, 1)
        let world = try await TestWorld.make(devices: [
            .unregistered(gone, since: TestWorld.unregisteredSince), .bound(elsewhere, topic: "com.acme.app.voip"),
        ])
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let unregistered = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(gone)", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#)
            #expect(unregistered.status == 200)
            #expect(unregistered.json["success"] as? Bool == false)
            #expect(unregistered.json["status"] as? Int == 410)
            #expect(unregistered.json["reason"] as? String == "Unregistered")
            #expect((unregistered.json["timestamp"] as? String)?.hasPrefix("2025-01-01T00:00:00") == true)

            let wrongTopic = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(elsewhere)", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#)
            #expect(wrongTopic.json["status"] as? Int == 400)
            #expect(wrongTopic.json["reason"] as? String == "DeviceTokenNotForTopic")

            // The feedback plugin recorded both; the tenant sees them, with APNs' timestamp.
            let invalid = try await client.request(.get, "/v1/devices/invalid", key: acme.apiKey)
            #expect(invalid.status == 200, "\(invalid.text)")
            let devices = try #require(invalid.json["devices"] as? [[String: Any]])
            #expect(Set(devices.compactMap { $0["device_token"] as? String }) == [gone, elsewhere])
            let goneRecord = try #require(devices.first { $0["device_token"] as? String == gone })
            #expect(goneRecord["reason"] as? String == "Unregistered")
            #expect((goneRecord["apns_timestamp"] as? String)?.hasPrefix("2025-01-01T00:00:00") == true)
            #expect(goneRecord["registered_at"] is NSNull)

            // `since` filters by when Herald recorded them.
            let later = try await client.request(.get, "/v1/devices/invalid?since=2100-01-01T00:00:00Z", key: acme.apiKey)
            #expect((later.json["devices"] as? [Any])?.isEmpty == true)

            // Another tenant sees none of them.
            let other = try await client.request(.get, "/v1/devices/invalid", key: world.tenant("globex").apiKey)
            #expect((other.json["devices"] as? [Any])?.isEmpty == true)

            // Sends to the unregistered token are refused until it is registered again.
            let refused = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(gone)", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#)
            #expect(refused.status == 422)
            #expect(refused.errorCode == "token_refused")
            #expect(refused.errorField == "device_token")

            let registered = try await client.request(
                .put, "/v1/devices/\(gone)", key: acme.apiKey, json: #"{"registered_at": "2026-01-01T00:00:00Z"}"#)
            #expect(registered.status == 200, "\(registered.text)")
            #expect(registered.json["records_updated"] as? Int == 1)
            let after = try await client.request(.get, "/v1/devices/invalid", key: acme.apiKey)
            let record = (after.json["devices"] as? [[String: Any]])?.first { $0["device_token"] as? String == gone }
            #expect((record?["registered_at"] as? String)?.hasPrefix("2026-01-01T00:00:00") == true)

            let resumed = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(gone)", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#)
            #expect(resumed.status == 200)
            #expect(resumed.json["status"] as? Int == 410)
        }
        await world.close()
    }

    @Test func healthReadinessAndMetrics() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let health = try await client.request(.get, "/healthz")
            #expect(health.status == 200)
            #expect(health.json["status"] as? String == "ok")
            let ready = try await client.request(.get, "/readyz")
            #expect(ready.status == 200)
            #expect(ready.json["tenants"] as? Int == 2)

            _ = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{"device_token": "\#(Tokens.make(0x31, 1))", "topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#)
            let metrics = try await client.request(.get, "/metrics", key: "test-admin-token")  // the admin token (metrics are not for tenants)
            #expect(metrics.status == 200)
            #expect(metrics.headers[.contentType]?.hasPrefix("text/plain") == true)
            #expect(metrics.text.contains("herald_notifications_total"))
            #expect(metrics.text.contains("tenant=\"acme\""))
        }
        await world.close()
    }
}
