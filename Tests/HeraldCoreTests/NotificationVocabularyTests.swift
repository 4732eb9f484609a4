import Foundation
import HeraldCore
import Testing

@Suite("Device tokens")
struct DeviceTokenTests {
    static let appleExample = "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0"

    @Test func acceptsAndLowercasesHex() throws {
        let token = try DeviceToken(hex: Self.appleExample.uppercased())
        #expect(token.hex == Self.appleExample)
        #expect(token.description == Self.appleExample)
        #expect(token.bytes.count == 32)
        #expect(token.bytes.prefix(3) == [0x00, 0xfc, 0x13])
        #expect(DeviceToken(bytes: token.bytes) == token)
    }

    @Test(arguments: [2, 64, 100, 160, 200])
    func acceptsAnyEvenLengthUpToTheMaximum(length: Int) throws {
        let hex = String(repeating: "a1", count: length / 2)
        #expect(try DeviceToken(hex: hex).hex == hex)
    }

    @Test func rejectsTooLong() {
        let error = #expect(throws: NotificationValidationError.self) {
            try DeviceToken(hex: String(repeating: "ab", count: 101))
        }
        #expect(error?.reason == .badDeviceToken)
        #expect(error?.field == "device_token")
    }

    @Test func rejectsEmptyAsMissing() {
        let error = #expect(throws: NotificationValidationError.self) { try DeviceToken(hex: "") }
        #expect(error?.reason == .missingDeviceToken)
    }

    @Test func rejectsOddLength() {
        let error = #expect(throws: NotificationValidationError.self) { try DeviceToken(hex: "abc") }
        #expect(error?.reason == .badDeviceToken)
        #expect(error?.message.contains("odd number") == true)
    }

    @Test(arguments: ["zz", "0g", "ab cd", "ab-c", "éé"])
    func rejectsNonHex(hex: String) {
        let error = #expect(throws: NotificationValidationError.self) { try DeviceToken(hex: hex) }
        #expect(error?.reason == .badDeviceToken)
    }

    @Test func redactsForLogs() throws {
        let token = try DeviceToken(hex: Self.appleExample)
        #expect(token.redacted == "00fc13ad…e8f0")
        #expect(try DeviceToken(hex: "abcd").redacted == "abcd")
    }

    @Test func codableRoundTripAndValidation() throws {
        let token = try DeviceToken(hex: Self.appleExample)
        let data = try JSONEncoder().encode([token])
        #expect(String(decoding: data, as: UTF8.self) == "[\"\(Self.appleExample)\"]")
        #expect(try JSONDecoder().decode([DeviceToken].self, from: data) == [token])
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode([DeviceToken].self, from: Data("[\"xyz\"]".utf8))
        }
    }
}

@Suite("apns-id")
struct NotificationIDTests {
    @Test func parsesAndLowercases() throws {
        let id = try NotificationID("EABEAE54-14A8-11E5-B60B-1697F925EC7B")
        #expect(id.rawValue == "eabeae54-14a8-11e5-b60b-1697f925ec7b")
    }

    @Test(arguments: [
        "", "eabeae54-14a8-11e5-b60b-1697f925ec7", "eabeae5414a811e5b60b1697f925ec7b",
        "eabeae54_14a8_11e5_b60b_1697f925ec7b", "gabeae54-14a8-11e5-b60b-1697f925ec7b",
        "eabeae54-14a8-11e5-b60b-1697f925ec7bb",
    ])
    func rejectsMalformed(text: String) {
        let error = #expect(throws: NotificationValidationError.self) { try NotificationID(text) }
        #expect(error?.reason == .badMessageId)
        #expect(error?.field == "apns_id")
    }

    @Test func randomIDsAreVersion4AndParse() throws {
        var seen = Set<NotificationID>()
        for _ in 0..<100 {
            let id = NotificationID.random()
            #expect(try NotificationID(id.rawValue) == id)
            let characters = Array(id.rawValue)
            #expect(characters[14] == "4")
            #expect("89ab".contains(characters[19]))
            seen.insert(id)
        }
        #expect(seen.count == 100)
    }
}

@Suite("apns-expiration")
struct ExpirationTests {
    @Test func parsesHeaderValues() throws {
        #expect(try Expiration(headerValue: "0") == .immediately)
        #expect(try Expiration(headerValue: "1700000000") == .at(1_700_000_000))
        #expect(Expiration.at(1_700_000_000).headerValue == "1700000000")
        #expect(Expiration.immediately.headerValue == "0")
    }

    @Test(arguments: ["", "-1", "soon", "1.5", "99999999999"])
    func rejectsBadValues(text: String) {
        let error = #expect(throws: NotificationValidationError.self) { try Expiration(headerValue: text) }
        #expect(error?.reason == .badExpirationDate)
    }

    @Test func fromDates() {
        #expect(Expiration(date: Date(timeIntervalSince1970: 1_700_000_000.9)) == .at(1_700_000_000))
        #expect(Expiration(date: Date(timeIntervalSince1970: 0)) == .immediately)
        #expect(Expiration(date: Date(timeIntervalSince1970: -5)) == .immediately)
    }
}

@Suite("apns-priority")
struct PriorityTests {
    @Test func acceptsAppleValues() throws {
        #expect(try Priority(value: 10) == .immediate)
        #expect(try Priority(value: 5) == .conserve)
        #expect(try Priority(value: 1) == .low)
        #expect(Priority.immediate.description == "10")
    }

    @Test(arguments: [0, 2, 6, 11, -10])
    func rejectsOthers(value: Int) {
        let error = #expect(throws: NotificationValidationError.self) { try Priority(value: value) }
        #expect(error?.reason == .badPriority)
    }
}

@Suite("apns-push-type")
struct PushTypeTests {
    @Test func suffixesAgreeWithTopics() {
        let expected: [(PushType, String?)] = [
            (.alert, nil), (.background, nil), (.mdm, nil), (.location, ".location-query"), (.voip, ".voip"),
            (.complication, ".complication"), (.fileprovider, ".pushkit.fileprovider"),
            (.liveactivity, ".push-type.liveactivity"), (.pushtotalk, ".voip-ptt"), (.widgets, ".push-type.widgets"),
        ]
        #expect(expected.count == PushType.allCases.count)
        for (type, suffix) in expected {
            #expect(type.requiredTopicSuffix == suffix, "\(type)")
            if let suffix {
                #expect(type.agrees(withTopic: "com.acme.app" + suffix), "\(type)")
                #expect(!type.agrees(withTopic: "com.acme.app"), "\(type)")
            }
        }
    }

    @Test func alertAndBackgroundGoToTheBundleID() {
        for type in [PushType.alert, .background] {
            #expect(type.agrees(withTopic: "com.acme.app"))
            #expect(!type.agrees(withTopic: "com.acme.app.voip"))
            #expect(!type.agrees(withTopic: "com.acme.app.complication"))
            #expect(!type.agrees(withTopic: "com.acme.app.push-type.liveactivity"))
        }
        #expect(PushType.mdm.agrees(withTopic: "com.apple.mgmt.External.1234"))
    }

    @Test func payloadLimits() {
        for type in PushType.allCases {
            #expect(type.maximumPayloadSize == (type == .voip ? 5120 : 4096), "\(type)")
        }
    }
}
