import Foundation
import Testing

@testable import HeraldCore

/// Channel IDs and the channel management service's answers, read from untrusted bytes, and a
/// broadcast's own rules.
@Suite("Broadcast channels: IDs, answers, broadcast rules")
struct ChannelTests {
    @Test(arguments: ["dHN0LXNyY2gtY2hubA==", "AAAA", "ab+/", "abc="])
    func base64IDsAreTaken(_ text: String) throws {
        #expect(try ChannelID(text).rawValue == text)
    }

    @Test(arguments: [
        ("", APNsReason.missingChannelId), ("abc", .badChannelId), ("a=bc", .badChannelId), ("ab===", .badChannelId),
        ("ab c", .badChannelId), ("ab_-", .badChannelId), (String(repeating: "QUJD", count: 65), .badChannelId),
    ])
    func otherTextIsRefusedWithAppleReason(_ text: String, _ reason: APNsReason) {
        #expect(throws: NotificationValidationError.self) { try ChannelID(text) }
        do {
            _ = try ChannelID(text)
        } catch {
            #expect(error.reason == reason && error.field == "channel_id")
        }
    }

    static func answer(_ body: String, status: Int = 200, channel: String? = nil) -> APNsResponse {
        var response = APNsResponse(status: status, apnsID: nil)
        response.body = Array(body.utf8)
        response.channelID = channel
        return response
    }

    @Test func answersAreReadWithinBounds() throws {
        #expect(try ChannelAnswer.createdChannel(Self.answer("", status: 201, channel: "dHN0LXNyY2gtY2hubA==")).rawValue == "dHN0LXNyY2gtY2hubA==")
        #expect(throws: NotificationValidationError.self) { try ChannelAnswer.createdChannel(Self.answer("", status: 201)) }
        #expect(throws: NotificationValidationError.self) {
            try ChannelAnswer.createdChannel(Self.answer("", status: 201, channel: "not base64!"))
        }
        #expect(try ChannelAnswer.storagePolicy(Self.answer(#"{"message-storage-policy": 0, "push-type": "LiveActivity"}"#)) == .noMessageStored)
        for bad in [#"{"message-storage-policy": 2}"#, #"{"message-storage-policy": "1"}"#, "[]", "{", ""] {
            #expect(throws: NotificationValidationError.self, "\(bad)") { try ChannelAnswer.storagePolicy(Self.answer(bad)) }
        }
        // Not a string, not base64: left out; at most `limit` items are looked at.
        let list = try ChannelAnswer.channels(Self.answer(#"{"channels": ["AAAA", 7, "bad id", "BBBB", "CCCC"]}"#), limit: 4)
        #expect(list.map(\.rawValue) == ["AAAA", "BBBB"])
        // Nesting deeper than the parser takes is not a list, and nothing crashes.
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: NotificationValidationError.self) { try ChannelAnswer.channels(Self.answer(#"{"channels": \#(deep)}"#), limit: 10) }
    }

    @Test func aBroadcastKeepsToItsRules() throws {
        let channel = try ChannelID("AAAA")
        let update = Array(#"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#.utf8)
        var note = Notification(channel: channel, topic: "com.acme.app", payload: update)
        #expect(note.isBroadcast && note.deviceToken == nil && note.path == "/4/broadcasts/apps/com.acme.app")
        #expect(note.priority == .immediate && note.expiration == .immediately && note.pushType == .liveactivity)
        try note.validate()
        note.topic = "com.acme.app.push-type.liveactivity"
        #expect(throws: NotificationValidationError.self) { try note.validate() }
        note.topic = "com.acme.app"
        note.payload = Array(repeating: 0x20, count: 5121)
        #expect(throws: NotificationValidationError.self) { try note.validate() }
        note.payload = Array(#"{"aps":{"event":"start","timestamp":1,"content-state":{}}}"#.utf8)
        #expect(throws: NotificationValidationError.self) { try note.validate() }
        note.payload = Array(#"{"aps":{"event":"end","timestamp":1.5}}"#.utf8)
        try note.validate()
    }
}
