import APNsSandbox
import Foundation
import HeraldCore
import Testing

/// Broadcast channels and broadcasts as APNs serves them: the channel management service on a
/// port of its own (create, read, delete, list, each reason Apple documents, the channel limit,
/// channels kept across a restart), and the broadcast route on the device port.
@Suite("APNsSandbox broadcasts and channel management")
struct SandboxBroadcastTests {
    static let app = SandboxHarness.topics[0]
    /// A bundle of the key's whose broadcast capability is off.
    static let disabledApp = "com.example.nobroadcast"

    static func disablingBroadcasts(_ configuration: inout SandboxConfiguration) {
        configuration.tokenKeys[0].topics.append(disabledApp)
        configuration.broadcastDisabledTopics = [disabledApp]
    }
    static let requestID = "0b6f3c1e-2f4a-4c1d-9e8b-7a6d5c4b3a21"

    /// Creates a channel through the management port and returns its ID.
    static func create(_ harness: SandboxHarness, policy: Int = 1) async throws -> String {
        let client = try await harness.connectChannels()
        defer { Task { await client.close() } }
        let request = try await harness.channelCall(
            "POST", "/1/apps/\(app)/channels", body: Array(#"{"message-storage-policy": \#(policy), "push-type": "LiveActivity"}"#.utf8))
        let response = try await client.roundTrip(request)
        #expect(response.status == 201, "\(response.reason ?? "")")
        return try #require(response.header("apns-channel-id"))
    }

    @Test func aChannelIsCreatedReadListedAndDeleted() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connectChannels()

        var create = try await harness.channelCall(
            "POST", "/1/apps/\(Self.app)/channels", body: Array(#"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#.utf8))
        create.extraHeaders.append(("apns-request-id", Self.requestID, .nonIndexable))
        let created = try await client.roundTrip(create)
        #expect(created.status == 201)
        #expect(created.header("apns-request-id") == Self.requestID)
        #expect(created.body.isEmpty)
        let id = try #require(created.header("apns-channel-id"))
        #expect((try? ChannelID(id)) != nil, "the channel ID is base64: \(id)")

        let read = try await client.roundTrip(try await harness.channelCall("GET", "/1/apps/\(Self.app)/channels", channel: id))
        #expect(read.status == 200)
        let configuration = try #require(try JSONSerialization.jsonObject(with: Data(read.body)) as? [String: Any])
        #expect(configuration["message-storage-policy"] as? Int == 0)
        #expect(configuration["push-type"] as? String == "LiveActivity")
        #expect((try? NotificationID(read.header("apns-request-id") ?? "")) != nil, "a request ID is made when none is sent")

        let second = try await Self.create(harness)
        let list = try await client.roundTrip(try await harness.channelCall("GET", "/1/apps/\(Self.app)/all-channels"))
        #expect(list.status == 200)
        let listed = try #require(try JSONSerialization.jsonObject(with: Data(list.body)) as? [String: Any])
        #expect(Set(listed["channels"] as? [String] ?? []) == [id, second])

        let deleted = try await client.roundTrip(try await harness.channelCall("DELETE", "/1/apps/\(Self.app)/channels", channel: id))
        #expect(deleted.status == 204 && deleted.body.isEmpty)
        let gone = try await client.roundTrip(try await harness.channelCall("GET", "/1/apps/\(Self.app)/channels", channel: id))
        #expect(gone.status == 400 && gone.reason == "ChannelNotRegistered")
        #expect(harness.sandbox.channels(bundleID: Self.app).map(\.id) == [second])

        let records = harness.sandbox.requests.filter { $0.kind == .channelManagement }
        #expect(records.count == 6 && records.allSatisfy(\.processed))
        #expect(records.first?.channelID == id && records.first?.status == 201 && records.first?.apnsID == Self.requestID)
        await client.close()
    }

    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var status: Int
        var reason: String
        var method = "GET"
        var path = "/1/apps/\(SandboxBroadcastTests.app)/channels"
        var channel: String? = "known"
        var body = ""
        var change: @Sendable (inout RawRequest) -> Void = { _ in }
        var description: String { name }
    }

    static let managementCases: [Case] = [
        Case(name: "PUT on channels", status: 405, reason: "MethodNotAllowed", method: "PUT"),
        Case(name: "POST on all-channels", status: 405, reason: "MethodNotAllowed", method: "POST", path: "/1/apps/\(app)/all-channels"),
        Case(name: "an unknown path", status: 404, reason: "BadPath", path: "/1/apps/\(app)/channel"),
        Case(name: "no bundle", status: 404, reason: "BadPath", path: "/1/apps//channels"),
        Case(name: "no provider token", status: 403, reason: "MissingProviderToken") { $0.authorization = nil },
        Case(name: "another team's bundle", status: 403, reason: "TopicMismatch", path: "/1/apps/com.other.app/channels"),
        Case(name: "a push-type suffix", status: 400, reason: "TopicDisallowed", path: "/1/apps/\(app).push-type.liveactivity/channels"),
        Case(name: "broadcast not enabled", status: 400, reason: "FeatureNotEnabled", path: "/1/apps/\(disabledApp)/channels"),
        Case(name: "no channel ID", status: 400, reason: "MissingChannelId", channel: nil),
        Case(name: "a channel ID that is not base64", status: 400, reason: "BadChannelId", channel: "not base64!"),
        Case(name: "a channel ID too long", status: 400, reason: "BadChannelId", channel: String(repeating: "QUJD", count: 65)),
        Case(name: "an unknown channel", status: 400, reason: "ChannelNotRegistered", channel: "dW5rbm93bg=="),
        Case(name: "deleting an unknown channel", status: 400, reason: "ChannelNotRegistered", method: "DELETE", channel: "dW5rbm93bg=="),
        Case(name: "a request ID that is not a UUID", status: 400, reason: "BadMessageId") {
            $0.extraHeaders.append(("apns-request-id", "nope", .nonIndexable))
        },
        Case(name: "apns-channel-id twice", status: 400, reason: "DuplicateHeaders") {
            $0.extraHeaders.append(("apns-channel-id", "dW5rbm93bg==", .nonIndexable))
        },
        Case(name: "a creation without a body", status: 400, reason: "PayloadEmpty", method: "POST", channel: nil),
        Case(name: "a creation that is not JSON", status: 400, reason: "BadRequestPayload", method: "POST", channel: nil, body: "{"),
        Case(
            name: "a creation with an unknown key", status: 400, reason: "BadRequestParams", method: "POST", channel: nil,
            body: #"{"message-storage-policy": 1, "push-type": "LiveActivity", "colour": "red"}"#),
        Case(
            name: "a storage policy of 2", status: 400, reason: "BadRequestParams", method: "POST", channel: nil,
            body: #"{"message-storage-policy": 2, "push-type": "LiveActivity"}"#),
        Case(
            name: "a push type other than LiveActivity", status: 400, reason: "BadRequestParams", method: "POST", channel: nil,
            body: #"{"message-storage-policy": 1, "push-type": "alert"}"#),
    ]

    @Test(arguments: managementCases)
    func channelCallsAnswerWithAppleReason(_ testCase: Case) async throws {
        let harness = try await SandboxHarness.start(Self.disablingBroadcasts)
        defer { Task { await harness.stop() } }
        let known = try await Self.create(harness)
        let client = try await harness.connectChannels()
        var request = try await harness.channelCall(
            testCase.method, testCase.path, channel: testCase.channel == "known" ? known : testCase.channel,
            body: Array(testCase.body.utf8))
        testCase.change(&request)
        let response = try await client.roundTrip(request)
        #expect(response.status == testCase.status)
        #expect(response.reason == testCase.reason)
        #expect(response.header("content-type") == "application/json")
        #expect(harness.sandbox.channels(bundleID: Self.app).map(\.id) == [known], "a refused call changes nothing")
        await client.close()
    }

    @Test func theChannelLimitIsPerApp() async throws {
        let harness = try await SandboxHarness.start { $0.channelsPerApp = 2 }
        defer { Task { await harness.stop() } }
        _ = try await Self.create(harness)
        _ = try await Self.create(harness)
        let client = try await harness.connectChannels()
        let third = try await client.roundTrip(
            try await harness.channelCall(
                "POST", "/1/apps/\(Self.app)/channels", body: Array(#"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#.utf8)))
        #expect(third.status == 400 && third.reason == "CannotCreateChannelConfig")
        #expect(harness.sandbox.channels(bundleID: Self.app).count == 2)
        await client.close()
    }

    @Test func aBroadcastIsAcceptedOnAKnownChannelOfTheApp() async throws {
        let harness = try await SandboxHarness.start { $0.environment = .production }
        defer { Task { await harness.stop() } }
        let channel = try await Self.create(harness)
        let client = try await harness.connect()
        var request = try await harness.broadcast(channel: channel)
        request.extraHeaders.append(("apns-request-id", Self.requestID, .nonIndexable))
        let response = try await client.roundTrip(request)
        #expect(response.status == 200 && response.body.isEmpty)
        #expect(response.header("apns-request-id") == Self.requestID)
        #expect((try? NotificationID(response.header("apns-unique-id") ?? "")) != nil, "a broadcast's unique ID, in production too")
        let record = try #require(harness.sandbox.requests.last)
        #expect(record.kind == .broadcast && record.channelID == channel && record.delivered && record.apnsID == Self.requestID)
        #expect(record.topic == Self.app && record.deviceToken == nil)
        // The largest payload Apple allows.
        var largest = try await harness.broadcast(channel: channel)
        let prefix = #"{"aps":{"event":"update","timestamp":1,"content-state":{"s":""#
        let suffix = #""}}}"#
        largest.body = Array((prefix + String(repeating: "x", count: 5120 - prefix.utf8.count - suffix.utf8.count) + suffix).utf8)
        #expect(try await client.roundTrip(largest).status == 200)
        await client.close()
    }

    static let broadcastCases: [Case] = [
        Case(name: "GET", status: 405, reason: "MethodNotAllowed") { $0.method = "GET" },
        Case(name: "no bundle", status: 404, reason: "BadPath") { $0.path = "/4/broadcasts/apps/" },
        Case(name: "no channel ID", status: 400, reason: "MissingChannelId", channel: nil),
        Case(name: "a channel ID that is not base64", status: 400, reason: "BadChannelId", channel: "%%%"),
        Case(name: "an unknown channel", status: 400, reason: "ChannelNotRegistered", channel: "dW5rbm93bg=="),
        Case(name: "no push type", status: 400, reason: "MissingPushType") { $0.pushType = nil },
        Case(name: "push type alert", status: 400, reason: "InvalidPushType") { $0.pushType = "alert" },
        Case(name: "no priority", status: 400, reason: "BadPriority") { $0.priority = nil },
        Case(name: "priority 7", status: 400, reason: "BadPriority") { $0.priority = "7" },
        Case(name: "no expiration", status: 400, reason: "BadExpirationDate") { $0.expiration = nil },
        Case(name: "an expiration on a no-storage channel", status: 400, reason: "BadExpirationDate") {
            $0.expiration = "1900000000"
        },
        Case(name: "a request ID that is not a UUID", status: 400, reason: "BadMessageId") {
            $0.extraHeaders.append(("apns-request-id", "nope", .nonIndexable))
        },
        Case(name: "an empty payload", status: 400, reason: "PayloadEmpty") { $0.body = [] },
        Case(name: "a payload that is not JSON", status: 400, reason: "BadRequestPayload") { $0.body = Array("[1]".utf8) },
        Case(name: "a 5121-byte payload", status: 413, reason: "PayloadTooLarge") {
            $0.body = Array(#"{"aps":{"event":"update","x":""#.utf8) + [UInt8](repeating: 0x78, count: 5121) + Array(#""}}"#.utf8)
        },
        Case(name: "another team's bundle", status: 403, reason: "TopicMismatch") { $0.path = "/4/broadcasts/apps/com.other.app" },
        Case(name: "a push-type suffix", status: 400, reason: "TopicDisallowed") {
            $0.path = "/4/broadcasts/apps/\(SandboxBroadcastTests.app).push-type.liveactivity"
        },
        Case(name: "broadcast not enabled", status: 400, reason: "FeatureNotEnabled") {
            $0.path = "/4/broadcasts/apps/\(SandboxBroadcastTests.disabledApp)"
        },
        Case(name: "no provider token", status: 403, reason: "MissingProviderToken") { $0.authorization = nil },
    ]

    @Test(arguments: broadcastCases)
    func broadcastsAnswerWithAppleReason(_ testCase: Case) async throws {
        let harness = try await SandboxHarness.start(Self.disablingBroadcasts)
        defer { Task { await harness.stop() } }
        let known = try await Self.create(harness, policy: 0)
        let client = try await harness.connect()
        var request = try await harness.broadcast(channel: testCase.channel == "known" ? known : testCase.channel)
        testCase.change(&request)
        let response = try await client.roundTrip(request)
        #expect(response.status == testCase.status)
        #expect(response.reason == testCase.reason)
        #expect(response.header("apns-unique-id") == nil, "no unique ID on a refusal")
        let record = try #require(harness.sandbox.requests.last)
        #expect(record.kind == .broadcast && record.processed && record.reason?.wireValue == testCase.reason)
        await client.close()
    }

    @Test func channelsOutliveARestartWithAStateDirectory() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-state-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let ca = try SandboxCertificateAuthority.generate()
        let first = try await SandboxHarness.start {
            $0.certificateAuthority = ca
            $0.stateDirectory = directory
        }
        let kept = try await Self.create(first, policy: 0)
        let dropped = try await Self.create(first)
        #expect(first.sandbox.deleteChannel(bundleID: Self.app, id: dropped))
        await first.stop()

        let second = try await SandboxHarness.start {
            $0.certificateAuthority = ca
            $0.stateDirectory = directory
        }
        defer { Task { await second.stop() } }
        let channels = second.sandbox.channels(bundleID: Self.app)
        #expect(channels.map(\.id) == [kept] && channels.first?.storagePolicy == 0)
        let client = try await second.connect()
        #expect(try await client.roundTrip(try await second.broadcast(channel: kept)).status == 200)
        await client.close()
    }
}
