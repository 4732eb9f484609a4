import Foundation
import HeraldCore
import Testing

@Suite("Notification.validate()")
struct NotificationValidationTests {
    static let token = try! DeviceToken(hex: "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")

    /// A JSON object of exactly `size` bytes: {"aps":{},"x":"…"}.
    static func payload(size: Int) -> [UInt8] {
        let frame = Array(#"{"aps":{},"x":""}"#.utf8)
        precondition(size >= frame.count)
        let text = #"{"aps":{},"x":""# + String(repeating: "a", count: size - frame.count) + #""}"#
        let bytes = Array(text.utf8)
        precondition(bytes.count == size)
        return bytes
    }

    static func note(
        topic: String? = "com.acme.app", pushType: PushType = .alert, priority: Priority? = nil,
        collapseID: String? = nil, payload: [UInt8] = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
    ) -> HeraldCore.Notification {
        HeraldCore.Notification(
            deviceToken: token, topic: topic, pushType: pushType, priority: priority, collapseID: collapseID,
            payload: payload)
    }

    static func reason(_ note: HeraldCore.Notification, requireTopic: Bool = true) -> APNsReason? {
        do {
            try note.validate(requireTopic: requireTopic)
            return nil
        } catch {
            return error.reason
        }
    }

    @Test func aPlainAlertIsValid() {
        #expect(Self.reason(Self.note()) == nil)
        #expect(Self.note().path == "/3/device/00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
    }

    @Test func payloadEmpty() {
        #expect(Self.reason(Self.note(payload: [])) == .payloadEmpty)
    }

    @Test func payloadTooLargeAtTheExactBoundary() {
        #expect(Self.reason(Self.note(payload: Self.payload(size: 4096))) == nil)
        #expect(Self.reason(Self.note(payload: Self.payload(size: 4097))) == .payloadTooLarge)
        let voip = "com.acme.app.voip"
        #expect(Self.reason(Self.note(topic: voip, pushType: .voip, payload: Self.payload(size: 5120))) == nil)
        #expect(
            Self.reason(Self.note(topic: voip, pushType: .voip, payload: Self.payload(size: 5121))) == .payloadTooLarge)
        // Other types keep the 4 KB limit even on a suffixed topic.
        #expect(
            Self.reason(
                Self.note(
                    topic: "com.acme.app.complication", pushType: .complication, payload: Self.payload(size: 4097)))
                == .payloadTooLarge)
    }

    @Test func collapseIDAtTheExactBoundary() {
        #expect(Self.reason(Self.note(collapseID: String(repeating: "c", count: 64))) == nil)
        #expect(Self.reason(Self.note(collapseID: String(repeating: "c", count: 65))) == .badCollapseId)
        // Bytes, not characters: 32 two-byte characters are 64 bytes; 33 are 66.
        #expect(Self.reason(Self.note(collapseID: String(repeating: "é", count: 32))) == nil)
        #expect(Self.reason(Self.note(collapseID: String(repeating: "é", count: 33))) == .badCollapseId)
    }

    @Test func badPriorityOnlyForContentAvailableAloneWithPriority10() {
        let silent = Array(#"{"aps":{"content-available":1}}"#.utf8)
        #expect(Self.reason(Self.note(pushType: .background, priority: .immediate, payload: silent)) == .badPriority)
        #expect(Self.reason(Self.note(pushType: .background, priority: .conserve, payload: silent)) == nil)
        #expect(Self.reason(Self.note(pushType: .background, priority: .low, payload: silent)) == nil)
        let withAlert = Array(#"{"aps":{"content-available":1,"alert":"hi"}}"#.utf8)
        #expect(Self.reason(Self.note(priority: .immediate, payload: withAlert)) == nil)
        let customKeys = Array(#"{"aps":{"content-available":1},"order":"A-17"}"#.utf8)
        #expect(
            Self.reason(Self.note(pushType: .background, priority: .immediate, payload: customKeys)) == .badPriority)
    }

    @Test func missingTopic() {
        #expect(Self.reason(Self.note(topic: nil)) == .missingTopic)
        #expect(Self.reason(Self.note(topic: nil), requireTopic: false) == nil)
        #expect(Self.reason(Self.note(topic: "")) == .missingTopic)
    }

    @Test(arguments: [
        "com acme", "com.acme.", ".com.acme", "com..acme", "com...acme", ".", "com/acme", "com.acme.app\n",
        String(repeating: "a", count: 256),
    ])
    func badTopic(topic: String) {
        #expect(Self.reason(Self.note(topic: topic)) == .badTopic)
    }

    @Test func validTopics() throws {
        for topic in [
            "com.acme.app", "com.acme.App-2", "com.acme.app.voip", "com.acme_x.app", String(repeating: "a", count: 255),
        ] {
            try HeraldCore.Notification.validateTopic(topic)
        }
    }

    @Test func errorsNameFieldAndReason() {
        do {
            try Self.note(payload: []).validate()
            Issue.record("expected PayloadEmpty")
        } catch {
            #expect(error.field == "payload")
            #expect(error.description == "payload: the payload is empty (PayloadEmpty)")
        }
    }
}
