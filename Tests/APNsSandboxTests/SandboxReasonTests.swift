import APNsSandbox
import Foundation
import HeraldCore
import NIOHPACK
import Testing

/// Every request rule of Apple's table, each answered with its exact status and JSON body.
@Suite("APNsSandbox request reasons")
struct SandboxReasonTests {
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var status: Int
        var reason: String
        var change: @Sendable (inout RawRequest) -> Void
        var description: String { name }
    }

    static let boundDevice = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0"
    static let goneDevice = "dead0000dead0000dead0000dead0000"

    static let cases: [Case] = [
        Case(name: "GET", status: 405, reason: "MethodNotAllowed") { $0.method = "GET" },
        Case(name: "other path", status: 404, reason: "BadPath") { $0.path = "/3/notification/abcd" },
        Case(name: "path without version", status: 404, reason: "BadPath") { $0.path = "/device/abcd" },
        Case(name: "no device token", status: 400, reason: "MissingDeviceToken") { $0.path = "/3/device/" },
        Case(name: "non-hex device token", status: 400, reason: "BadDeviceToken") { $0.path = "/3/device/zz11" },
        Case(name: "odd device token", status: 400, reason: "BadDeviceToken") { $0.path = "/3/device/abc" },
        Case(name: "too long device token", status: 400, reason: "BadDeviceToken") {
            $0.path = "/3/device/" + String(repeating: "ab", count: 101)
        },
        Case(name: "no topic", status: 400, reason: "MissingTopic") { $0.topic = nil },
        Case(name: "malformed topic", status: 400, reason: "BadTopic") { $0.topic = "com example app" },
        Case(name: "topic of another team", status: 400, reason: "TopicDisallowed") { $0.topic = "com.other.app" },
        Case(name: "voip push to the app topic", status: 400, reason: "DeviceTokenNotForTopic") {
            $0.pushType = "voip"
        },
        Case(name: "unknown push type", status: 400, reason: "InvalidPushType") { $0.pushType = "banner" },
        Case(name: "device bound to another topic", status: 400, reason: "DeviceTokenNotForTopic") {
            $0.path = "/3/device/" + boundDevice
        },
        Case(name: "priority 7", status: 400, reason: "BadPriority") { $0.priority = "7" },
        Case(name: "priority 10 for a background push", status: 400, reason: "BadPriority") {
            $0.priority = "10"
            $0.pushType = "background"
            $0.body = Array(#"{"aps":{"content-available":1}}"#.utf8)
        },
        Case(name: "expiration not a number", status: 400, reason: "BadExpirationDate") {
            $0.expiration = "tomorrow"
        },
        Case(name: "negative expiration", status: 400, reason: "BadExpirationDate") { $0.expiration = "-1" },
        Case(name: "apns-id not a UUID", status: 400, reason: "BadMessageId") { $0.apnsID = "not-a-uuid" },
        Case(name: "collapse id of 65 bytes", status: 400, reason: "BadCollapseId") {
            $0.collapseID = String(repeating: "c", count: 65)
        },
        Case(name: "apns-topic twice", status: 400, reason: "DuplicateHeaders") {
            $0.extraHeaders = [("apns-topic", "com.example.app", .indexable)]
        },
        Case(name: "empty body", status: 400, reason: "PayloadEmpty") { $0.body = [] },
        Case(name: "4097-byte alert", status: 413, reason: "PayloadTooLarge") { $0.body = payload(size: 4097) },
        Case(name: "5121-byte voip", status: 413, reason: "PayloadTooLarge") {
            $0.topic = "com.example.app.voip"
            $0.pushType = "voip"
            $0.body = payload(size: 5121)
        },
        Case(name: "garbage JSON", status: 400, reason: "BadPayload") { $0.body = Array("{\"aps\":".utf8) },
        Case(name: "JSON that is not an object", status: 400, reason: "BadPayload") { $0.body = Array("[1,2]".utf8) },
        Case(name: "no authorization", status: 403, reason: "MissingProviderToken") { $0.authorization = nil },
        Case(name: "bearer without token", status: 403, reason: "MissingProviderToken") {
            $0.authorization = "bearer "
        },
        Case(name: "basic auth", status: 403, reason: "InvalidProviderToken") {
            $0.authorization = "basic dXNlcjpwYXNz"
        },
        Case(name: "not a JWT", status: 403, reason: "InvalidProviderToken") {
            $0.authorization = "bearer abc.def"
        },
    ]

    /// A JSON alert payload of exactly `size` bytes.
    static func payload(size: Int) -> [UInt8] {
        let prefix = #"{"aps":{"alert":""#
        let suffix = #""}}"#
        return Array((prefix + String(repeating: "x", count: size - prefix.utf8.count - suffix.utf8.count) + suffix).utf8)
    }

    @Test(arguments: cases)
    func answersWithAppleReason(_ testCase: Case) async throws {
        let harness = try await SandboxHarness.start {
            $0.devices = [
                .bound(Self.boundDevice, topic: "com.example.app.voip"),
                .unregistered(Self.goneDevice, since: Date(timeIntervalSince1970: 1_700_000_000.123)),
            ]
        }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.apnsID = "5e2c3a71-7a4e-4b36-9d0a-3f3c2d1e0f00"
        testCase.change(&request)
        let response = try await client.roundTrip(request)
        #expect(response.status == testCase.status)
        #expect(response.reason == testCase.reason)
        #expect(response.header("content-type") == "application/json")
        let id = try #require(response.apnsID)
        #expect((try? NotificationID(id)) != nil)
        if testCase.reason != "BadMessageId" {
            #expect(id == "5e2c3a71-7a4e-4b36-9d0a-3f3c2d1e0f00")
        }
        let record = try #require(harness.sandbox.requests.last)
        #expect(record.processed)
        #expect(record.status == testCase.status)
        #expect(record.reason?.wireValue == testCase.reason)
        await client.close()
    }

    @Test func largestPayloadsAreAccepted() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var alert = try await harness.validRequest()
        alert.body = Self.payload(size: 4096)
        #expect(try await client.roundTrip(alert).status == 200)
        var voip = alert
        voip.topic = "com.example.app.voip"
        voip.pushType = "voip"
        voip.body = Self.payload(size: 5120)
        #expect(try await client.roundTrip(voip).status == 200)
        await client.close()
    }

    @Test func unregisteredDeviceGets410WithTimestampInMilliseconds() async throws {
        let harness = try await SandboxHarness.start {
            $0.devices = [.unregistered(Self.goneDevice, since: Date(timeIntervalSince1970: 1_700_000_000.123))]
        }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let response = try await client.roundTrip(try await harness.validRequest(device: Self.goneDevice))
        #expect(response.status == 410)
        #expect(response.reason == "Unregistered")
        #expect(response.timestamp == 1_700_000_000_123)
        await client.close()
    }

    @Test func deviceBoundToItsTopicIsAccepted() async throws {
        let harness = try await SandboxHarness.start {
            $0.devices = [.bound(Self.boundDevice, topic: "com.example.app")]
        }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        #expect(try await client.roundTrip(try await harness.validRequest(device: Self.boundDevice)).status == 200)
        await client.close()
    }

    @Test func burstToOneDeviceGetsTooManyRequests() async throws {
        let harness = try await SandboxHarness.start { $0.deviceRequestsPerSecond = 2 }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        var statuses: [Int?] = []
        for _ in 0..<3 { statuses.append(try await client.roundTrip(request).status) }
        #expect(statuses == [200, 200, 429])
        #expect(try await client.roundTrip(try await harness.validRequest(device: "abcd1234")).status == 200)
        // The manual clock moves to the next second: the device may be pushed again.
        harness.clock.advance(by: 1)
        let later = try await client.roundTrip(request)
        #expect(later.status == 200)
        await client.close()
    }

    @Test func oversizedBodyIsAnsweredBeforeItEnds() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        let stream = client.newStreamID()
        try client.sendHeaders(stream: stream, request.headerList, endStream: false)
        client.sendData(stream: stream, Array(repeating: UInt8(ascii: " "), count: 3000), endStream: false)
        client.sendData(stream: stream, Array(repeating: UInt8(ascii: " "), count: 3000), endStream: false)
        let response = try await client.response(stream: stream)
        #expect(response.status == 413)
        #expect(response.reason == "PayloadTooLarge")
        // The connection still serves.
        #expect(try await client.roundTrip(request).status == 200)
        await client.close()
    }
}
