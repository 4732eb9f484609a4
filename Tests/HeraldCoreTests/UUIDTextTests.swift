import Foundation
import HeraldCore
import Testing

@Suite("UUID text")
struct UUIDTextTests {
    @Test("the format of two words: bytes in order, lowercase, 8-4-4-4-12")
    func formatsWords() {
        #expect(UUIDText.format(UUIDText.Words(high: 0, low: 0)) == "00000000-0000-0000-0000-000000000000")
        #expect(UUIDText.format(UUIDText.Words(high: .max, low: .max)) == "ffffffff-ffff-ffff-ffff-ffffffffffff")
        let words = UUIDText.Words(high: 0x0123_4567_89ab_cdef, low: 0xfedc_ba98_7654_3210)
        #expect(UUIDText.format(words) == "01234567-89ab-cdef-fedc-ba9876543210")
        #expect(
            words.bytes == [
                0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
            ])
        #expect(UUIDText.Words(bytes: words.bytes) == words)
    }

    @Test("random words are version 4 with the RFC 9562 variant, and only those bits are set")
    func randomWords() {
        var zeros = ConstantGenerator(value: 0)
        #expect(UUIDText.format(.random(using: &zeros)) == "00000000-0000-4000-8000-000000000000")
        var ones = ConstantGenerator(value: .max)
        #expect(UUIDText.format(.random(using: &ones)) == "ffffffff-ffff-4fff-bfff-ffffffffffff")
    }

    /// The formatter writes what Foundation's `UUID` writes (lowercased) for the same 16 bytes,
    /// and the parser reads back the same bytes from either text, in either case.
    @Test("format and parse agree with Foundation's UUID for random bytes")
    func matchesFoundation() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let words = UUIDText.Words(high: generator.next(), low: generator.next())
            let bytes = words.bytes
            let foundation = UUID(
                uuid: (
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                    bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                ))
            let text = UUIDText.format(words)
            #expect(text == foundation.uuidString.lowercased())
            #expect(UUIDText.parse(text) == words)
            #expect(UUIDText.parse(foundation.uuidString) == words)
            #expect(try NotificationID(foundation.uuidString).rawValue == text)
            #expect(NotificationID(bytes: bytes).rawValue == text)
        }
    }

    @Test(
        "the parser takes 8-4-4-4-12 hex digits in either case, nothing else",
        arguments: [
            ("123e4567-e89b-12d3-a456-426655440000", true), ("123E4567-E89B-12D3-A456-426655440000", true),
            ("123e4567e89b-12d3-a456-4266554400000", false), ("123e4567-e89b-12d3-a456-42665544000g", false),
            ("123e4567-e89b-12d3-a456-42665544000", false), ("123e4567-e89b-12d3-a456-4266554400000", false),
            ("123e4567-e89b-12d3-a456-42665544000é", false), ("", false), ("123e4567e89b12d3a456426655440000", false),
            ("123e4567_e89b_12d3_a456_426655440000", false), ("123e4567-e89b-12d3-a456+426655440000", false),
            ("------------------------------------", false), ("123e4567-e89b-12d3-a456-4266554400 0", false),
        ])
    func parses(_ text: String, _ isUUID: Bool) {
        #expect(UUIDText.isUUID(text) == isUUID)
        #expect((UUIDText.parse(text) != nil) == isUUID)
        #expect(((try? NotificationID(text)) != nil) == isUUID)
    }

    @Test("an apns-id in lower case is kept as given; one in upper case is lowered")
    func canonicalText() throws {
        let lower = "eabeae54-14a8-11e5-b60b-1697f925ec7b"
        #expect(try NotificationID(lower).rawValue == lower)
        #expect(try NotificationID("EABEAE54-14a8-11E5-B60B-1697F925EC7B").rawValue == lower)
    }

    @Test("an apns-id made from its bytes, from its text or by a generator is the same id with the same bytes")
    func idFromBytesTextAndGenerator() throws {
        var generator = NotificationIDGenerator(seed: 7)
        for _ in 0..<20 {
            let made = generator.nextID()
            let words = made.words
            let fromBytes = NotificationID(bytes: words.bytes)
            let fromText = try NotificationID(made.rawValue)
            let fromUpper = try NotificationID(made.rawValue.uppercased())
            #expect(fromBytes == made && fromText == made && fromUpper == made)
            #expect(fromBytes.rawValue == made.rawValue && fromUpper.rawValue == made.rawValue)
            #expect(fromBytes.words == words && fromText.words == words && fromUpper.words == words)
            #expect(Set([made, fromBytes, fromText, fromUpper]).count == 1)
            #expect(UUIDText.parse(made.rawValue) == words)
            var written = [UInt8](repeating: 0, count: UUIDText.length)
            written.withUnsafeMutableBufferPointer { text in
                if let base = text.baseAddress { made.writeText(to: base) }
            }
            #expect(String(decoding: written, as: UTF8.self) == made.rawValue)
        }
    }

    /// Every byte value at every place of an apns-id: a dash is taken only at the four dash
    /// places, a hex digit of either case only elsewhere; an upper-case digit is lowered in the
    /// canonical text and gives the same words as its lower-case one.
    @Test("each byte at each place of the text is judged alone")
    func everyByteAtEveryPlace() {
        let base = Array("0123abcd-4567-89ef-a1b2-c3d4e5f60789".utf8)
        let words = UUIDText.parse(String(decoding: base, as: UTF8.self))
        #expect(words != nil)
        let dashPlaces: Set<Int> = [8, 13, 18, 23]
        for place in base.indices {
            for value in UInt8.min...UInt8.max {
                var bytes = base
                bytes[place] = value
                let isDash = value == UInt8(ascii: "-")
                let isHex = HexDigits.value(value) != nil
                let expected = dashPlaces.contains(place) ? isDash : isHex
                let canonical = bytes.withUnsafeBytes { APNsUniqueID(header: $0)?.rawValue }
                #expect((canonical != nil) == expected, "byte \(value) at \(place)")
                guard let canonical, expected, !dashPlaces.contains(place) else { continue }
                var lowered = bytes
                if value >= UInt8(ascii: "A"), value <= UInt8(ascii: "F") { lowered[place] = value | 0x20 }
                #expect(canonical == String(decoding: lowered, as: UTF8.self))
                #expect(UUIDText.parse(canonical) == UUIDText.parse(String(decoding: bytes, as: UTF8.self)))
            }
        }
        let upper = Array(String(decoding: base, as: UTF8.self).uppercased().utf8)
        #expect(upper.withUnsafeBytes { APNsUniqueID(header: $0)?.rawValue } == String(decoding: base, as: UTF8.self))
    }

    @Test("the same seed gives the same apns-ids, another seed others")
    func generatorSeeds() {
        var first = NotificationIDGenerator(seed: 42)
        var again = NotificationIDGenerator(seed: 42)
        var other = NotificationIDGenerator(seed: 43)
        let ids = (0..<50).map { _ in first.nextID() }
        #expect(ids == (0..<50).map { _ in again.nextID() })
        #expect(Set(ids).isDisjoint(with: (0..<50).map { _ in other.nextID() }))
    }
}

/// A generator that always gives the same word.
private struct ConstantGenerator: RandomNumberGenerator {
    let value: UInt64
    mutating func next() -> UInt64 { value }
}
