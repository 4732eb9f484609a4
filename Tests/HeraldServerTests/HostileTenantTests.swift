import Foundation
import HTTPTypes
import HeraldTestSupport
@testable import HeraldServer
import Hummingbird
import Synchronization
import Testing

/// What a hostile tenant (or anyone who reaches the port) tries against the API edge: inputs
/// that could trap the process, header values that break the wire, a sound that could turn into
/// a critical alert, floods, idle and trickling sockets, and answers that leak internals.
@Suite("API: a hostile tenant")
struct HostileTenantTests {
    static let device = Tokens.make(0x61, 1)
    static let target = #""device_token": "\#(device)", "topic": "com.acme.app""#
    static let requestID = HTTPField.Name("x-request-id")!

    @Test func malformedOrOutOfRangeRegisteredAtIsRefusedWithoutATrap() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let path = "/v1/devices/\(Self.device)"
            let future = ISODates.format(Date().addingTimeInterval(86_400))
            // Malformed, of the wrong kind, or beyond any date: 400.
            let malformed = [
                "1e16", "1e300", "-1", "\"0x1p70\"", "\"1e16\"", "\"NaN\"", "\"inf\"", "99999999999999999999999999", "true", "{}",
                "null", "\"+10000-01-01T00:00:00Z\"",
            ]
            for value in malformed {
                let reply = try await client.request(.put, path, key: acme.apiKey, json: #"{"registered_at": \#(value)}"#)
                #expect(reply.status == 400, "\(value): \(reply.text)")
                #expect(reply.errorCode == "invalid_field", "\(value): \(reply.text)")
                #expect(reply.errorField == "registered_at", "\(value): \(reply.text)")
            }
            // Well formed but outside 2000 ... now + 5 minutes (a future date would lift a
            // feedback refusal forever): 422.
            for value in ["\"\(future)\"", "\"1999-12-31T23:59:59Z\"", "0.5", "253402300799"] {
                let reply = try await client.request(.put, path, key: acme.apiKey, json: #"{"registered_at": \#(value)}"#)
                #expect(reply.status == 422, "\(value): \(reply.text)")
                #expect(reply.errorCode == "invalid_field", "\(value): \(reply.text)")
                #expect(reply.errorField == "registered_at", "\(value): \(reply.text)")
            }
            // Still serving, and a sane date is taken.
            let fine = try await client.request(.put, path, key: acme.apiKey, json: #"{"registered_at": "2025-06-01T00:00:00Z"}"#)
            #expect(fine.status == 200, "\(fine.text)")
            let seconds = try await client.request(.put, path, key: acme.apiKey, json: #"{"registered_at": 1748736000}"#)
            #expect(seconds.status == 200, "\(seconds.text)")
        }
        await world.close()
    }

    @Test func hostileQueriesNestingAndNumbersAre4xx() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(configure: BadInputTests.smallLimits)) { live async throws in
            let client = live.client()
            for query in ["limit=99999999999999999999999", "limit=-1", "limit=1e300", "limit=0x10", "limit=NaN", "since=0x1p70", "since=nan"] {
                let reply = try await client.request(.get, "/v1/devices/invalid?\(query)", key: acme.apiKey)
                #expect(reply.status == 400, "\(query): \(reply.text)")
                #expect(reply.errorCode == "invalid_query", "\(query): \(reply.text)")
            }
            let farSince = try await client.request(.get, "/v1/devices/invalid?since=99999999999", key: acme.apiKey)
            #expect(farSince.status == 200, "\(farSince.text)")

            // A job exists, so its query parameters are read.
            let batch = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: #"{"notification": {"topic": "com.acme.app", "payload": {"aps": {}}}, "device_tokens": ["\#(Self.device)"]}"#)
            let job = try #require(batch.json["job_id"] as? String, "\(batch.text)")
            for query in ["failed_after=99999999999999999999", "failed_after=-2", "limit=18446744073709551616", "limit=1001"] {
                let reply = try await client.request(.get, "/v1/jobs/\(job)?\(query)", key: acme.apiKey)
                #expect(reply.status == 400, "\(query): \(reply.text)")
                #expect(reply.errorCode == "invalid_query", "\(query): \(reply.text)")
            }
            let largest = try await client.request(.get, "/v1/jobs/\(job)?failed_after=\(Int.max)", key: acme.apiKey)
            #expect(largest.status == 200, "\(largest.text)")

            let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
            let nested = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: #"{"payload": \#(deep)}"#)
            #expect(nested.status == 400)
            #expect(nested.errorCode == "malformed_json")

            let numbers: [(String, String)] = [
                (#"{\#(Self.target), "aps": {"alert": "x"}, "custom": {"n": 1e400}}"#, "custom.n"),
                (#"{\#(Self.target), "aps": {"alert": "x"}, "custom": {"list": [1, -1e999]}}"#, "custom.list[1]"),
                (#"{\#(Self.target), "aps": {"badge": 1e300}}"#, "aps.badge"),
                (#"{\#(Self.target), "aps": {"badge": 99999999999999999999}}"#, "aps.badge"),
                (#"{\#(Self.target), "expiration": 1e16, "payload": {"aps": {}}}"#, "expiration"),
                (#"{\#(Self.target), "priority": 1e300, "payload": {"aps": {}}}"#, "priority"),
                (#"{\#(Self.target), "aps": {"relevance-score": 1e999}}"#, "aps.relevance-score"),
                (#"{\#(Self.target), "aps": {"stale-date": -1}}"#, "aps.stale-date"),
                (#"{\#(Self.target), "aps": {"input-push-token": 2}}"#, "aps.input-push-token"),
                (#"{\#(Self.target), "aps": {"content-changed": 1e400}}"#, "aps.content-changed"),
                (#"{\#(Self.target), "aps": {"input-push-channel": ""}}"#, "aps.input-push-channel"),
            ]
            for (body, field) in numbers {
                let reply = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: body)
                #expect(reply.status == 400, "\(body): \(reply.text)")
                #expect(reply.errorField == field, "\(body): \(reply.text)")
            }
            let health = try await client.request(.get, "/healthz")
            #expect(health.status == 200)
        }
        await world.close()
    }

    @Test func headerBoundFieldsAreRefusedAtTheEdgeOnSendsAndEveryBatchItem() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            for collapse in [#""a\r\nb""#, #""x\u0000y""#, #"" padded""#, #""tab\t""#, #""\u007f""#] {
                let single = try await client.request(
                    .post, "/v1/notifications", key: acme.apiKey, json: #"{\#(Self.target), "collapse_id": \#(collapse), "payload": {"aps": {}}}"#)
                #expect(single.status == 400, "\(collapse): \(single.text)")
                #expect(single.errorField == "collapse_id", "\(collapse): \(single.text)")
                #expect(single.error["apns_reason"] as? String == "BadCollapseId", "\(single.text)")
            }
            let list = """
                {"notifications": [
                  {"device_token": "\(Tokens.make(0x62, 0))", "topic": "com.acme.app", "payload": {"aps": {}}},
                  {"device_token": "\(Tokens.make(0x62, 1))", "topic": "com.acme.app", "collapse_id": "a\\r\\nb", "payload": {"aps": {}}},
                  {"device_token": "\(Tokens.make(0x62, 2))", "topic": "com.acme.app", "apns_id": "not-a-uuid", "payload": {"aps": {}}},
                  {"device_token": "\(Tokens.make(0x62, 3))", "topic": "com.acme.app\\r\\nx: y", "payload": {"aps": {}}}
                ]}
                """
            let badList = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: list)
            #expect(badList.status == 400, "\(badList.text)")
            let fields = (badList.error["details"] as? [[String: Any]] ?? []).compactMap { $0["field"] as? String }
            #expect(fields == ["notifications[1].collapse_id", "notifications[2].apns_id", "notifications[3].topic"], "\(badList.text)")

            let template = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey,
                json: #"{"notification": {"topic": "com.acme.app", "collapse_id": "a\r\nb", "payload": {"aps": {}}}, "device_tokens": ["\#(Self.device)"]}"#)
            #expect(template.status == 400, "\(template.text)")
            #expect(template.errorField == "notification.collapse_id", "\(template.text)")
        }
        // Nothing was tried on the wire, and no job was stored.
        #expect(world.sandbox.requests.isEmpty)
        await world.close()
    }

    @Test func aSoundObjectIsACriticalAlertOnlyWithCriticalOne() async throws {
        let world = try await TestWorld.make(recordPayloads: true)
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let cases: [(String, [String: Any])] = [
                (#"{"name": "default"}"#, [:]),
                (#"{"name": "ping.caf", "critical": 0}"#, [:]),
                (#"{"name": "alarm.caf", "critical": 1, "volume": 0.5}"#, ["critical": 1, "name": "alarm.caf", "volume": 0.5]),
                (#"{"name": "alarm.caf", "critical": true}"#, ["critical": 1, "name": "alarm.caf", "volume": 1.0]),
            ]
            for (sound, expected) in cases {
                let reply = try await client.request(
                    .post, "/v1/notifications", key: acme.apiKey, json: #"{\#(Self.target), "aps": {"alert": "x", "sound": \#(sound)}}"#)
                #expect(reply.status == 200, "\(sound): \(reply.text)")
                let id = try #require(reply.json["apns_id"] as? String)
                let recorded = try #require(world.sandbox.requests.last { $0.apnsID == id }?.payload)
                let payload = try #require(try JSONSerialization.jsonObject(with: Data(recorded)) as? [String: Any])
                let aps = try #require(payload["aps"] as? [String: Any])
                if expected.isEmpty {
                    #expect(aps["sound"] is String, "\(sound) was sent as \(String(describing: aps["sound"]))")
                } else {
                    let sent = try #require(aps["sound"] as? [String: Any], "\(sound)")
                    #expect(sent["critical"] as? Int == 1)
                    #expect(sent["name"] as? String == expected["name"] as? String)
                    #expect(sent["volume"] as? Double == expected["volume"] as? Double)
                }
            }
            let volumeOnly = try await client.request(
                .post, "/v1/notifications", key: acme.apiKey,
                json: #"{\#(Self.target), "aps": {"sound": {"name": "default", "volume": 0.3}}}"#)
            #expect(volumeOnly.status == 400)
            #expect(volumeOnly.errorField == "aps.sound.volume")
        }
        await world.close()
    }

    @Test func everyAnswerCarriesARequestIDAndFailuresHideInternals() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        // APNs is gone: sends fail on the socket. The tenant's endpoint is a port held closed for
        // the test (the sandbox's port, once freed, could go to another test's server).
        let closed = try LocalProxy.ClosedPort()
        try world.writeTenantFile(acme, apnsPort: closed.port)
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let generated = try await client.request(.get, "/healthz")
            let id = try #require(generated.headers[Self.requestID])
            #expect(id.count == 32 && id.allSatisfy(\.isHexDigit))

            let mine = try await client.request(.get, "/nowhere", headers: [Self.requestID: "trace-42:a.b_c"])
            #expect(mine.status == 404)
            #expect(mine.headers[Self.requestID] == "trace-42:a.b_c")
            for bad in [String(repeating: "a", count: 129), "two words", "semi;colon"] {
                let replaced = try await client.request(.get, "/healthz", headers: [Self.requestID: bad])
                let answer = try #require(replaced.headers[Self.requestID])
                #expect(answer != bad && answer.count == 32)
            }

            let failed = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: #"{\#(Self.target), "payload": {"aps": {}}}"#)
            #expect(failed.status == 502 || failed.status == 504, "\(failed.text)")
            #expect(failed.headers[Self.requestID]?.count == 32)
            let message = (failed.error["message"] as? String ?? "").lowercased()
            #expect(!message.isEmpty)
            for leak in ["127.0.0.1", "\(closed.port)", "refused", "errno", "tls", "ssl", "/tmp", "connect("] {
                #expect(!failed.text.lowercased().contains(leak), "the answer leaks '\(leak)': \(failed.text)")
            }
        }
        await world.close()
    }

    @Test func metricsNeedTheAdminToken() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: "admin-secret")) { live async throws in
            let client = live.client()
            #expect(try await client.request(.get, "/metrics").status == 401)
            #expect(try await client.request(.get, "/metrics", key: acme.apiKey).status == 401)
            let scraped = try await client.request(.get, "/metrics", key: "admin-secret")
            #expect(scraped.status == 200)
            #expect(scraped.headers[.contentType]?.hasPrefix("text/plain") == true)
        }
        try await LiveServer.with(world.options(adminToken: nil)) { live async throws in
            #expect(try await live.client().request(.get, "/metrics").status == 404)
        }
        await world.close()
    }

    @Test func eachAPIKeyHasItsOwnRequestRate() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        let globex = world.tenant("globex")
        let options = world.options { options in
            // A refill so slow that no token comes back during the test, however loaded the machine.
            options.configuration.http.rateLimit = .init(requestsPerSecond: 0.001, burst: 3)
        }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            for _ in 0..<3 {
                #expect(try await client.request(.get, "/v1/devices/invalid", key: acme.apiKey).status == 200)
            }
            let limited = try await client.request(.get, "/v1/devices/invalid", key: acme.apiKey)
            #expect(limited.status == 429)
            #expect(limited.errorCode == "api_rate_limited")
            let retryAfter = Int(limited.headers[.retryAfter] ?? "") ?? 0
            #expect(retryAfter >= 1)
            // A send is refused before it is read or sent.
            let send = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: #"{\#(Self.target), "payload": {"aps": {}}}"#)
            #expect(send.status == 429)
            // Another tenant's key, and the open routes, are not affected.
            #expect(try await client.request(.get, "/v1/devices/invalid", key: globex.apiKey).status == 200)
            #expect(try await client.request(.get, "/healthz").status == 200)
            // A wrong key is refused as before, not counted against anyone.
            #expect(try await client.request(.get, "/v1/devices/invalid", key: "hk_wrong").status == 401)
        }
        #expect(world.sandbox.requests.isEmpty)
        await world.close()
    }

    @Test func idleAndTricklingSocketsAreClosed() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        // Short enough for a test, long enough that a loaded machine still writes what each socket
        // sends (and the final health check) before the server gives up on it.
        let options = world.options { options in
            options.configuration.http.idleTimeout = 2
            options.configuration.http.bodyTimeout = 2
        }
        try await LiveServer.with(options) { live async throws in
            // Connected, nothing sent.
            let silent = try RawSocket(port: live.port)
            // Half a request head.
            let halfHead = try RawSocket(port: live.port)
            try halfHead.write("POST /v1/notifications HTTP/1.1\r\nHost: x\r\nContent-Ty")
            // A whole head, then a body that stops.
            let trickle = try RawSocket(port: live.port)
            try trickle.write(
                "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(acme.apiKey)\r\n"
                    + "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"device_token\": ")
            // Each is closed by the server (the read gives up after 60 s if not).
            #expect(await silent.closed() != nil, "an idle connection stayed open")
            #expect(await halfHead.closed() != nil, "a half-sent head kept its connection")
            #expect(await trickle.closed() != nil, "a stalled body kept its connection")
            // The server still answers.
            #expect(try await live.client().request(.get, "/healthz").status == 200)
        }
        await world.close()
    }

    @Test func connectionsBeyondTheCapWaitUntilABusyOneCloses() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        let options = world.options { options in
            options.configuration.http.maxConnections = 2
        }
        try await LiveServer.with(options) { live async throws in
            // Two connections each in the middle of a request (a head, then a body still arriving):
            // busy, so nothing closes them to make room.
            let busyHead =
                "POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(acme.apiKey)\r\n"
                + "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"device_token\": "
            // Each is busy once the server has read its head: only then is the next opened (an
            // idle first connection could be closed to make room for the second).
            let connections = live.server.api.connections
            let first = try RawSocket(port: live.port)
            try first.write(busyHead)
            try await ClusterTests.eventually("the first connection is busy") { connections.busyCount == 1 }
            let second = try RawSocket(port: live.port)
            try second.write(busyHead)
            try await ClusterTests.eventually("both connections are busy") { connections.busyCount == 2 }
            // At the cap the listener stops accepting: a third connection reaches the kernel's
            // backlog and is not taken while both are busy.
            let gate = live.server.api.gate
            try await ClusterTests.eventually("the listener stopped accepting at the cap") { gate.isPaused }
            let third = try RawSocket(port: live.port)
            try third.write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(gate.acceptedCount == 2, "a connection over the cap was accepted")
            // Closing one frees a slot; the third is then taken and served.
            first.hangUp()
            let reply = String(decoding: await third.received(), as: UTF8.self)
            #expect(reply.hasPrefix("HTTP/1.1 200"), "the waiting connection got: \(reply.prefix(80))")
            #expect(gate.acceptedCount == 3)
            second.hangUp()
        }
        await world.close()
    }

    @Test func idleConnectionsGiveWayToCallersWithRequests() async throws {
        let world = try await TestWorld.make()
        let options = world.options { options in
            // Four connections at most; idle ones are closed from the fourth on (the reaper keeps one
            // slot of headroom), long before the 60 s idle timeout.
            options.configuration.http.maxConnections = 4
        }
        try await LiveServer.with(options) { live async throws in
            // A caller holds many sockets and sends nothing on them (more than the cap).
            let connections = live.server.api.connections
            var idle: [RawSocket] = []
            for _ in 0..<8 { idle.append(try RawSocket(port: live.port)) }
            // Every one of them has reached the server: each is open or was closed to make room.
            try await ClusterTests.eventually("the idle sockets were all accepted") {
                connections.openCount + connections.reapedCount >= idle.count
            }
            // Another caller still gets answers, one connection after another.
            for _ in 0..<5 {
                #expect(try await live.client().request(.get, "/healthz").status == 200)
            }
            // The idle sockets were the ones closed (the oldest first), not the working caller's.
            var closed = 0
            for socket in idle.prefix(4) where await socket.closed() != nil { closed += 1 }
            #expect(closed == 4, "the oldest idle sockets were not closed to make room")
            for socket in idle { socket.hangUp() }
        }
        await world.close()
    }
}

/// Dates as the API writes them.
enum ISODates {
    static func format(_ date: Date) -> String { Date.ISO8601FormatStyle().format(date) }
}
