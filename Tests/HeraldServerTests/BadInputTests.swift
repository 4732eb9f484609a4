import Foundation
import HeraldProcess
import HeraldServer
import Testing

/// Every kind of bad input is a 4xx with a code and, when a field is at fault, the field.
@Suite("API: bad input")
struct BadInputTests {
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var body: String
        var status: Int
        var code: String
        var field: String?
        var apnsReason: String? = nil
        var contentType: String? = "application/json"
        var description: String { name }
    }

    static let token = Tokens.make(0x51, 1)
    static let ok = #""device_token": "\#(token)", "topic": "com.acme.app""#

    static let sendCases: [Case] = [
        Case(name: "malformed JSON", body: "{\"device_token\": ", status: 400, code: "malformed_json", field: nil),
        Case(name: "trailing comma", body: #"{\#(ok), "payload": {"aps": {}},}"#, status: 400, code: "malformed_json", field: nil),
        Case(name: "duplicate member", body: #"{\#(ok), "topic": "x", "payload": {}}"#, status: 400, code: "malformed_json", field: nil),
        Case(name: "not an object", body: "[1, 2]", status: 400, code: "invalid_field", field: "(body)"),
        Case(name: "unknown field", body: #"{\#(ok), "colour": "red", "payload": {"aps": {}}}"#, status: 400, code: "unknown_field", field: "colour"),
        Case(
            name: "unknown aps field", body: #"{\#(ok), "aps": {"alert": "x", "colour": "red"}}"#, status: 400, code: "unknown_field",
            field: "aps.colour"),
        Case(
            name: "unknown alert field", body: #"{\#(ok), "aps": {"alert": {"titel": "x"}}}"#, status: 400, code: "unknown_field",
            field: "aps.alert.titel"),
        Case(name: "missing device token", body: #"{"topic": "com.acme.app", "payload": {}}"#, status: 400, code: "missing_field", field: "device_token"),
        Case(
            name: "bad device token", body: #"{"device_token": "xyz1", "topic": "com.acme.app", "payload": {"aps": {}}}"#, status: 400,
            code: "invalid_field", field: "device_token", apnsReason: "BadDeviceToken"),
        Case(
            name: "odd device token", body: #"{"device_token": "abc", "topic": "com.acme.app", "payload": {"aps": {}}}"#, status: 400,
            code: "invalid_field", field: "device_token", apnsReason: "BadDeviceToken"),
        Case(name: "token not a string", body: #"{"device_token": 12, "payload": {}}"#, status: 400, code: "invalid_field", field: "device_token"),
        Case(name: "missing payload", body: "{\(ok)}", status: 400, code: "missing_field", field: "payload"),
        Case(name: "payload not an object", body: #"{\#(ok), "payload": "hi"}"#, status: 400, code: "invalid_field", field: "payload"),
        Case(name: "payload and aps", body: #"{\#(ok), "payload": {}, "aps": {}}"#, status: 400, code: "invalid_field", field: "aps"),
        Case(
            name: "oversized payload",
            body: #"{\#(ok), "payload": {"aps": {"alert": "\#(String(repeating: "a", count: 4100))"}}}"#, status: 400,
            code: "invalid_field", field: "payload", apnsReason: "PayloadTooLarge"),
        Case(
            name: "bad priority", body: #"{\#(ok), "priority": 7, "payload": {"aps": {}}}"#, status: 400, code: "invalid_field",
            field: "priority", apnsReason: "BadPriority"),
        Case(
            name: "priority not a number", body: #"{\#(ok), "priority": "high", "payload": {"aps": {}}}"#, status: 400,
            code: "invalid_field", field: "priority"),
        Case(
            name: "bad apns-id", body: #"{\#(ok), "apns_id": "not-a-uuid", "payload": {"aps": {}}}"#, status: 400, code: "invalid_field",
            field: "apns_id", apnsReason: "BadMessageId"),
        Case(name: "bad push type", body: #"{\#(ok), "push_type": "loud", "payload": {"aps": {}}}"#, status: 400, code: "invalid_field", field: "push_type"),
        Case(name: "negative expiration", body: #"{\#(ok), "expiration": -1, "payload": {"aps": {}}}"#, status: 400, code: "invalid_field", field: "expiration"),
        Case(
            name: "long collapse id", body: #"{\#(ok), "collapse_id": "\#(String(repeating: "c", count: 65))", "payload": {"aps": {}}}"#,
            status: 400, code: "invalid_field", field: "collapse_id", apnsReason: "BadCollapseId"),
        Case(name: "bad environment", body: #"{\#(ok), "environment": "staging", "payload": {"aps": {}}}"#, status: 400, code: "invalid_field", field: "environment"),
        Case(
            name: "missing topic", body: #"{"device_token": "\#(token)", "payload": {"aps": {}}}"#, status: 422, code: "topic_required",
            field: "topic", apnsReason: "MissingTopic"),
        Case(
            name: "bad topic", body: #"{"device_token": "\#(token)", "topic": "com acme", "payload": {"aps": {}}}"#, status: 400,
            code: "invalid_field", field: "topic", apnsReason: "BadTopic"),
        Case(
            name: "another tenant's topic", body: #"{"device_token": "\#(token)", "topic": "com.globex.app", "payload": {"aps": {}}}"#,
            status: 422, code: "topic_disallowed", field: "topic", apnsReason: "TopicDisallowed"),
        Case(
            name: "voip to the bundle topic", body: #"{\#(ok), "push_type": "voip", "payload": {"aps": {}}}"#, status: 422,
            code: "push_type_mismatch", field: "push_type"),
        Case(name: "badge not a number", body: #"{\#(ok), "aps": {"badge": "1"}}"#, status: 400, code: "invalid_field", field: "aps.badge"),
        Case(name: "custom aps", body: #"{\#(ok), "aps": {}, "custom": {"aps": 1}}"#, status: 400, code: "invalid_field", field: "custom.aps"),
        Case(name: "wrong content type", body: #"{\#(ok), "payload": {"aps": {}}}"#, status: 415, code: "unsupported_media_type", field: nil, contentType: "text/plain"),
        Case(name: "no content type", body: #"{\#(ok), "payload": {"aps": {}}}"#, status: 415, code: "unsupported_media_type", field: nil, contentType: nil),
        Case(name: "empty body", body: "", status: 400, code: "malformed_json", field: nil),
    ]

    static func smallLimits(_ options: inout HeraldProcessOptions) {
        options.configuration.api.maxBodyBytes = 8 * 1024
        options.configuration.api.maxBatchBodyBytes = 64 * 1024
        options.configuration.api.maxBatchItems = 50
    }

    @Test func everyBadSendIsAClear4xx() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(configure: Self.smallLimits)) { live async throws in
            let client = live.client()
            for item in Self.sendCases {
                let reply = try await client.request(
                    .post, "/v1/notifications", key: acme.apiKey, body: Array(item.body.utf8), contentType: item.contentType)
                #expect(reply.status == item.status, "\(item): \(reply.text)")
                #expect(reply.errorCode == item.code, "\(item): \(reply.text)")
                #expect(reply.errorField == item.field, "\(item): \(reply.text)")
                if let reason = item.apnsReason {
                    #expect(reply.error["apns_reason"] as? String == reason, "\(item): \(reply.text)")
                }
                #expect(!(reply.error["message"] as? String ?? "").isEmpty, "\(item)")
            }
            // Malformed JSON says where.
            let malformed = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: "{\n  \"a\": tru\n}")
            #expect((malformed.error["message"] as? String)?.contains("line 2, column") == true, "\(malformed.text)")

            // Bodies over the limit: 413, whether announced by Content-Length or not.
            let big = "{\"payload\": \"" + String(repeating: "x", count: 9000) + "\"}"
            let tooLarge = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: big)
            #expect(tooLarge.status == 413)
            #expect(tooLarge.errorCode == "body_too_large")
        }
        // None of it reached APNs.
        #expect(world.sandbox.requests.isEmpty)
        await world.close()
    }

    @Test func badBatchesNameTheIndexAndFieldOfTheFirstBadItems() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(configure: Self.smallLimits)) { live async throws in
            let client = live.client()
            var tokens = (0..<30).map { "\"\(Tokens.make(0x52, $0))\"" }
            tokens[17] = "\"nothex!\""
            tokens[21] = "42"
            let template = #""notification": {"topic": "com.acme.app", "payload": {"aps": {"alert": "x"}}}"#
            let badTokens = try await client.request(
                .post, "/v1/notifications/batch", key: acme.apiKey, json: "{\(template), \"device_tokens\": [\(tokens.joined(separator: ","))]}")
            #expect(badTokens.status == 400)
            #expect(badTokens.errorField == "device_tokens[17]")
            let details = badTokens.error["details"] as? [[String: Any]] ?? []
            #expect(details.compactMap { $0["field"] as? String } == ["device_tokens[17]", "device_tokens[21]"])

            let list = """
                {"notifications": [
                  {"device_token": "\(Tokens.make(0x53, 0))", "topic": "com.acme.app", "payload": {"aps": {}}},
                  {"device_token": "\(Tokens.make(0x53, 1))", "topic": "com.acme.app", "payload": {"aps": {}}},
                  {"device_token": "\(Tokens.make(0x53, 2))", "topic": "com.other.app", "payload": {"aps": {}}},
                  {"device_token": "\(Tokens.make(0x53, 3))", "topic": "com.acme.app", "prio": 5, "payload": {"aps": {}}}
                ]}
                """
            let badList = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: list)
            #expect(badList.status == 422)
            #expect(badList.errorField == "notifications[2].topic")
            let listDetails = badList.error["details"] as? [[String: Any]] ?? []
            #expect(listDetails.compactMap { $0["field"] as? String } == ["notifications[2].topic", "notifications[3].prio"])

            let cases: [(String, Int, String, String?)] = [
                ("{\(template)}", 400, "missing_field", "device_tokens"),
                (#"{"device_tokens": ["\#(Tokens.make(0x54, 0))"]}"#, 400, "missing_field", "notification"),
                ("{\(template), \"device_tokens\": []}", 400, "invalid_field", "device_tokens"),
                (
                    "{\(template), \"device_tokens\": [\((0..<51).map { "\"\(Tokens.make(0x55, $0))\"" }.joined(separator: ","))]}", 400,
                    "invalid_field", "device_tokens"
                ),
                (
                    #"{"notification": {"topic": "com.acme.app", "device_token": "00", "payload": {}}, "device_tokens": ["00"]}"#, 400,
                    "unknown_field", "notification.device_token"
                ),
                (
                    #"{"notification": {"topic": "com.acme.app", "apns_id": "5c1e6a3e-0b7e-4a3c-9d1f-2a9e8c7b6d5f", "payload": {}}, "device_tokens": ["00"]}"#,
                    400, "unknown_field", "notification.apns_id"
                ),
                (
                    #"{"notification": {"topic": "com.acme.app", "push_type": "voip", "payload": {"aps": {}}}, "device_tokens": ["00"]}"#,
                    422, "push_type_mismatch", "notification.push_type"
                ),
                ("{\(template), \"device_tokens\": [\"00\"], \"job_id\": \"bad id!\"}", 400, "invalid_field", "job_id"),
                ("{\(template), \"device_tokens\": [\"00\"], \"speed\": 1}", 400, "unknown_field", "speed"),
                ("{\(template), \"device_tokens\": [\"00\"], \"notifications\": []}", 400, "invalid_field", "notifications"),
                (#"{"notifications": [{"device_token": "00", "environment": "production", "topic": "com.acme.app", "payload": {}}]}"#, 400, "unknown_field", "notifications[0].environment"),
            ]
            for (body, status, code, field) in cases {
                let reply = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
                #expect(reply.status == status, "\(body.prefix(120)): \(reply.text.prefix(300))")
                #expect(reply.errorCode == code, "\(body.prefix(120)): \(reply.text.prefix(300))")
                #expect(reply.errorField == field, "\(body.prefix(120)): \(reply.text.prefix(300))")
            }

            let huge = "{\(template), \"device_tokens\": [\((0..<2000).map { "\"\(Tokens.make(0x56, $0))\"" }.joined(separator: ","))]}"
            let tooLarge = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: huge)
            #expect(tooLarge.status == 413)
        }
        #expect(world.sandbox.requests.isEmpty)
        await world.close()
    }

    @Test func queriesPathsAndMethods() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options()) { live async throws in
            let client = live.client()
            let badSince = try await client.request(.get, "/v1/devices/invalid?since=yesterday", key: acme.apiKey)
            #expect(badSince.status == 400)
            #expect(badSince.errorCode == "invalid_query")
            #expect(badSince.errorField == "since")
            let badLimit = try await client.request(.get, "/v1/jobs/x?limit=0", key: acme.apiKey)
            #expect(badLimit.status == 404)  // the job is looked up first: absent
            let badToken = try await client.request(.put, "/v1/devices/zz", key: acme.apiKey)
            #expect(badToken.status == 400)
            #expect(badToken.errorField == "device_token")
            let badRegistration = try await client.request(
                .put, "/v1/devices/\(Tokens.make(0x57, 1))", key: acme.apiKey, json: #"{"registered_at": "soon"}"#)
            #expect(badRegistration.status == 400)
            #expect(badRegistration.errorField == "registered_at")

            let wrongMethod = try await client.request(.get, "/v1/notifications", key: acme.apiKey)
            #expect(wrongMethod.status == 405)
            #expect(wrongMethod.errorCode == "method_not_allowed")
            #expect(wrongMethod.headers[.allow] == "POST")
            let deleteJob = try await client.request(.delete, "/v1/jobs/abc", key: acme.apiKey)
            #expect(deleteJob.status == 405)
            let nowhere = try await client.request(.get, "/v2/anything", key: acme.apiKey)
            #expect(nowhere.status == 404)
            #expect(nowhere.errorCode == "route_not_found")
        }
        await world.close()
    }
}
