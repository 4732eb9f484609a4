import Foundation
import HeraldCore
import Testing

@Suite("APNs reasons and responses")
struct APNsResponseTests {
    /// The table of reasons of Apple's "Handling notification responses from APNs", transcribed:
    /// status, reason (with the reasons Apple added for push types, environment- and
    /// topic-restricted keys and expired Live Activity tokens).
    static let appleTable: [(Int, String)] = [
        (400, "BadCollapseId"), (400, "BadDeviceToken"), (400, "BadExpirationDate"), (400, "BadMessageId"),
        (400, "BadPriority"), (400, "BadTopic"), (400, "DeviceTokenNotForTopic"), (400, "DuplicateHeaders"),
        (400, "IdleTimeout"), (400, "InvalidPushType"), (400, "MissingDeviceToken"), (400, "MissingTopic"),
        (400, "PayloadEmpty"), (400, "TopicDisallowed"), (403, "BadCertificate"), (403, "BadCertificateEnvironment"),
        (403, "ExpiredProviderToken"), (403, "Forbidden"), (403, "InvalidProviderToken"), (403, "MissingProviderToken"),
        (403, "UnrelatedKeyIdInToken"), (403, "BadEnvironmentKeyIdInToken"), (403, "BadEnvironmentKeyInToken"),
        (404, "BadPath"), (405, "MethodNotAllowed"), (410, "ExpiredToken"), (410, "Unregistered"), (413, "PayloadTooLarge"),
        (429, "TooManyProviderTokenUpdates"), (429, "TooManyRequests"), (500, "InternalServerError"),
        (503, "ServiceUnavailable"), (503, "Shutdown"),
    ]

    @Test func everyReasonOfApplesTableRoundTripsWithItsStatus() throws {
        #expect(APNsReason.known.count == Self.appleTable.count)
        #expect(APNsReason.known.map(\.wireValue) == Self.appleTable.map(\.1), "known reasons follow the table's order")
        for (status, wire) in Self.appleTable {
            let reason = APNsReason(wireValue: wire)
            #expect(reason.wireValue == wire)
            #expect(reason.status == status, "\(wire)")
            #expect(reason.metricLabel == wire)
            #expect(reason.description == wire)
            if case .unknown = reason { Issue.record("\(wire) is not a known reason") }
            let json = try JSONEncoder().encode([reason])
            #expect(try JSONDecoder().decode([APNsReason].self, from: json) == [reason])
        }
    }

    @Test func retryAfterIsDeltaSecondsBoundedAndAnythingElseIsIgnored() {
        func parse(_ text: String) -> Duration? {
            Array(text.utf8).withUnsafeBytes { APNsResponse.retryAfter(header: $0) }
        }
        #expect(parse("120") == .seconds(120))
        #expect(parse("0") == .zero)
        #expect(parse("9999999999") == APNsResponse.maximumRetryAfter)
        for bad in ["", "99999999999", "1e3", "-5", " 5", "5.5", "Wed, 21 Oct 2015 07:28:00 GMT", "٣"] {
            #expect(parse(bad) == nil, "\(bad)")
        }
    }

    @Test func unknownReasonsAreKept() {
        let reason = APNsReason(wireValue: "SomethingNew")
        #expect(reason == .unknown("SomethingNew"))
        #expect(reason.wireValue == "SomethingNew")
        #expect(reason.status == nil)
        #expect(reason.metricLabel == "Unknown")
        #expect(APNsReason(wireValue: "badtopic") == .unknown("badtopic"), "reasons are case-sensitive")
    }

    /// The apns-id header is read in either case into canonical form; anything but a UUID is none.
    @Test func apnsIDHeader() {
        func header(_ text: String) -> NotificationID? {
            Array(text.utf8).withUnsafeBytes { APNsResponse.apnsID(header: $0) }
        }
        #expect(header("EABEAE54-14A8-11E5-B60B-1697F925EC7B")?.rawValue == "eabeae54-14a8-11e5-b60b-1697f925ec7b")
        #expect(header("eabeae54-14a8-11e5-b60b-1697f925ec7b") == header("EABEAE54-14a8-11E5-b60b-1697F925EC7B"))
        for bad in ["", "bogus", "eabeae54-14a8-11e5-b60b-1697f925ec7", "eabeae54-14a8-11e5-b60b-1697f925ec7bb",
            "eabeae54x14a8-11e5-b60b-1697f925ec7b", "gabeae54-14a8-11e5-b60b-1697f925ec7b"]
        {
            #expect(header(bad) == nil, "\(bad)")
        }
    }

    @Test func successResponse() throws {
        let id = try NotificationID("eabeae54-14a8-11e5-b60b-1697f925ec7b")
        let response = APNsResponse(status: 200, apnsID: id, body: [])
        #expect(response.isSuccess)
        #expect(response.apnsID?.rawValue == "eabeae54-14a8-11e5-b60b-1697f925ec7b")
        #expect(response.reason == nil)
        #expect(response.timestamp == nil)
    }

    @Test func errorResponse() throws {
        let response = APNsResponse(
            status: 400, apnsID: try NotificationID("eabeae54-14a8-11e5-b60b-1697f925ec7b"),
            body: Array(#"{"reason":"BadDeviceToken"}"#.utf8))
        #expect(!response.isSuccess)
        #expect(response.reason == .badDeviceToken)
        #expect(response.timestamp == nil)
    }

    @Test func unregisteredCarriesTheTimestampInMilliseconds() throws {
        let body = Array(#"{"reason":"Unregistered","timestamp":1700000000123}"#.utf8)
        let response = APNsResponse(status: 410, apnsID: nil, body: body)
        #expect(response.reason == .unregistered)
        let timestamp = try #require(response.timestamp)
        #expect(abs(timestamp.timeIntervalSince1970 - 1_700_000_000.123) < 0.000_5)
        #expect(response.apnsID == nil)
    }

    @Test func errorBodyEncodesAsAPNsWritesIt() throws {
        let body = APNsErrorBody(reason: .unregistered, timestamp: Date(timeIntervalSince1970: 1_700_000_000.123))
        #expect(
            String(decoding: body.encoded(), as: UTF8.self) == #"{"reason":"Unregistered","timestamp":1700000000123}"#)
        let decoded = try #require(APNsErrorBody.decode(body.encoded()))
        #expect(decoded.reason == .unregistered)
        #expect(decoded.timestamp.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } == 1_700_000_000_123)
        #expect(
            String(decoding: APNsErrorBody(reason: .shutdown).encoded(), as: UTF8.self) == #"{"reason":"Shutdown"}"#)
    }

    @Test func bodiesThatAreNotAPNsJSONGiveNoReason() {
        for body in ["", "not json", "[]", #"{"why":"x"}"#, #"{"reason":5}"#] {
            #expect(APNsErrorBody.decode(Array(body.utf8)) == nil, "\(body)")
            #expect(APNsResponse(status: 500, apnsID: nil, body: Array(body.utf8)).reason == nil)
        }
    }

    /// The rare fields (reason, timestamp, retry-after, channel ID, body) are held apart from the
    /// plain answer's: each reads back what was set, setting one leaves the others, and two
    /// answers are equal, and hash alike, exactly when every field is, however each was built.
    @Test func rareFieldsReadBackAndCompareByValue() throws {
        let id = try NotificationID("eabeae54-14a8-11e5-b60b-1697f925ec7b")
        let unique = try #require(APNsUniqueID("6A1C2B3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D"))
        #expect(unique.rawValue == "6a1c2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
        let when = Date(timeIntervalSince1970: 1_700_000_000)

        let built = APNsResponse(
            status: 410, apnsID: id, reason: .unregistered, timestamp: when, uniqueID: unique, retryAfter: .seconds(5))
        var set = APNsResponse(status: 410, apnsID: id, uniqueID: unique)
        #expect(set != built)
        set.retryAfter = .seconds(5)
        set.reason = .unregistered
        set.timestamp = when
        #expect(set == built && set.hashValue == built.hashValue)
        #expect(set.reason == .unregistered && set.timestamp == when && set.retryAfter == .seconds(5))
        #expect(set.channelID == nil && set.body.isEmpty)

        // A copy changed is changed alone.
        var copy = set
        copy.channelID = "dHN0LTEyMzQ1Njc4OQ=="
        copy.body = Array(#"{"channels":[]}"#.utf8)
        #expect(copy.channelID == "dHN0LTEyMzQ1Njc4OQ==" && copy.body == Array(#"{"channels":[]}"#.utf8))
        #expect(copy.reason == .unregistered && copy.retryAfter == .seconds(5))
        #expect(set.channelID == nil && set.body.isEmpty && set == built)
        #expect(copy != set)

        // Every rare field cleared: equal to the plain answer.
        copy.reason = nil
        copy.timestamp = nil
        copy.retryAfter = nil
        copy.channelID = nil
        copy.body = []
        let plain = APNsResponse(status: 410, apnsID: id, uniqueID: unique)
        #expect(copy == plain && copy.hashValue == plain.hashValue)
        #expect(plain != APNsResponse(status: 410, apnsID: id), "the unique id counts")
        #expect(plain != APNsResponse(status: 410, apnsID: nil, uniqueID: unique), "the apns-id counts")
    }
}
