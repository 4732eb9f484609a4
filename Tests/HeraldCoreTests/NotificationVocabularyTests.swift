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
        #expect(token.byteCount == 32)
    }

    @Test("a token's bytes are written into a buffer as far as it holds them")
    func copiesBytesIntoABuffer() throws {
        let token = try DeviceToken(hex: "00FF10a2")
        var room = [UInt8](repeating: 0xee, count: 6)
        #expect(room.withUnsafeMutableBytes { token.copyBytes(to: $0) } == 4)
        #expect(room == [0x00, 0xff, 0x10, 0xa2, 0xee, 0xee])
        var short = [UInt8](repeating: 0xee, count: 2)
        #expect(short.withUnsafeMutableBytes { token.copyBytes(to: $0) } == 2)
        #expect(short == [0x00, 0xff])
    }

    @Test func mixedCaseIsLowercasedAndBytesRoundTrip() throws {
        #expect(try DeviceToken(hex: "00aAbBcCdDeEfF09").hex == "00aabbccddeeff09")
        #expect(try DeviceToken(hex: "00aAbBcCdDeEfF09").bytes == [0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x09])
        for range in [0..<100, 100..<200, 200..<256] {
            let bytes = range.map(UInt8.init)
            #expect(DeviceToken(bytes: bytes).bytes == bytes)
            #expect(try DeviceToken(hex: DeviceToken(bytes: bytes).hex.uppercased()).bytes == bytes)
        }
    }

    /// The characters just outside each accepted range, and bytes of a multi-byte character.
    @Test(arguments: ["0g", "0G", "0@", "0`", "0/", "0:", "é0", "0 ", "\u{0}0"])
    func rejectsNonHexDigits(_ hex: String) {
        let error = #expect(throws: NotificationValidationError.self) { try DeviceToken(hex: hex) }
        #expect(error?.reason == .badDeviceToken)
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

    /// The byte form is formatted from contiguous storage, or from a copy for other collections:
    /// every shape gives the same lowercase hex.
    @Test func fromBytesOfAnyCollection() throws {
        let token = try DeviceToken(hex: Self.appleExample)
        let bytes = token.bytes
        #expect(DeviceToken(bytes: bytes[...]).hex == Self.appleExample)
        let framed = [0xff] + bytes + [0xee]
        #expect(DeviceToken(bytes: framed[1..<(framed.count - 1)]) == token)
        #expect(DeviceToken(bytes: bytes.lazy.map { $0 }) == token)  // not contiguous: the copied path
        #expect(DeviceToken(bytes: (0...255).map(UInt8.init)).hex.count == 512)
        #expect(DeviceToken(bytes: [0x00, 0x09, 0x0a, 0xf0, 0xff]).hex == "00090af0ff")
        #expect(DeviceToken(bytes: [UInt8]()).hex.isEmpty)
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

    /// The 16-byte form: canonical for contiguous bytes, slices and other collections; bytes past
    /// the 16th are ignored, missing ones read as zero (the id is always canonical).
    @Test func fromBytes() throws {
        let bytes: [UInt8] = [0xea, 0xbe, 0xae, 0x54, 0x14, 0xa8, 0x11, 0xe5, 0xb6, 0x0b, 0x16, 0x97, 0xf9, 0x25, 0xec, 0x7b]
        let expected = "eabeae54-14a8-11e5-b60b-1697f925ec7b"
        #expect(NotificationID(bytes: bytes).rawValue == expected)
        let framed = [0x01] + bytes + [0x02, 0x03]
        #expect(NotificationID(bytes: framed[1...]).rawValue == expected)  // a slice, 18 bytes: two ignored
        #expect(NotificationID(bytes: bytes.lazy.map { $0 }).rawValue == expected)  // not contiguous
        #expect(try NotificationID(NotificationID(bytes: bytes).rawValue) == NotificationID(bytes: bytes))
        #expect(NotificationID(bytes: bytes.prefix(5)).rawValue == "eabeae54-1400-0000-0000-000000000000")
        #expect(NotificationID(bytes: [UInt8]()).rawValue == "00000000-0000-0000-0000-000000000000")
        #expect(NotificationID(bytes: bytes).words.bytes == bytes)
    }

    @Test func generatedIDsAreVersion4AndParse() throws {
        var generator = NotificationIDGenerator()
        var seen = Set<NotificationID>()
        for _ in 0..<1000 {
            let id = generator.nextID()
            #expect(try NotificationID(id.rawValue) == id)
            let characters = Array(id.rawValue)
            #expect(characters[14] == "4")
            #expect("89ab".contains(characters[19]))
            seen.insert(id)
        }
        #expect(seen.count == 1000)
    }

    /// The bytes a store keeps are those of the id the same generator would have made.
    @Test func nextWordsAreTheNextIDsBytes() {
        var forBytes = NotificationIDGenerator(seed: 7)
        var forID = NotificationIDGenerator(seed: 7)
        for _ in 0..<100 {
            let bytes = forBytes.nextWords().bytes
            #expect(bytes.count == 16 && bytes[6] >> 4 == 4 && bytes[8] >> 6 == 2)
            #expect(NotificationID(bytes: bytes) == forID.nextID())
        }
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
