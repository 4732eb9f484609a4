import Foundation
import HeraldCore
import Testing

/// Values from callers and from APNs that must be refused (or dropped), never trapped on or
/// passed to the wire.
@Suite("Hostile values")
struct HostileValueTests {
    static let token = DeviceToken(bytes: [UInt8](repeating: 0xab, count: 32))

    @Test(arguments: ["a\r\nb", "x\u{0}y", " lead", "trail\t", "del\u{7F}", "\n"])
    func aCollapseIDThatCannotBeAHeaderIsBadCollapseId(_ collapseID: String) {
        let note = Notification(deviceToken: Self.token, topic: "com.acme.app", collapseID: collapseID, payload: Array(#"{"aps":{}}"#.utf8))
        #expect(throws: NotificationValidationError.self) { try note.validate() }
        do {
            try note.validate()
        } catch {
            #expect(error.reason == .badCollapseId)
            #expect(error.field == "collapse_id")
        }
    }

    @Test func headerValuesKeepInnerSpacesAndTabs() {
        #expect(Notification.headerValueProblem("news of the day") == nil)
        #expect(Notification.headerValueProblem("a\tb") == nil)
        #expect(Notification.headerValueProblem("ünïcode") == nil)
        #expect(Notification.headerValueProblem("") == nil)
        #expect(Notification.headerValueProblem("a\rb") == "must not contain control characters")
        #expect(Notification.headerValueProblem(" a") == "must not start or end with whitespace")
    }

    @Test func anAPNsTimestampOutOfRangeIsDropped() {
        for raw in ["1e300", "-5", "1e16", "253402300800000"] {
            let body = APNsErrorBody.decode(Array(#"{"reason": "Unregistered", "timestamp": \#(raw)}"#.utf8))
            #expect(body?.reason == .unregistered, "\(raw)")
            #expect(body?.timestamp == nil, "\(raw)")
            // Encoding what was decoded cannot trap either.
            _ = body?.encoded()
        }
        let fine = APNsErrorBody.decode(Array(#"{"reason": "Unregistered", "timestamp": 1735689600000}"#.utf8))
        #expect(fine?.timestamp == Date(timeIntervalSince1970: 1_735_689_600))
    }
}
