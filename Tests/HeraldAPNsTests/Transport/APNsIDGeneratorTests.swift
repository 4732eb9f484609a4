import HeraldCore
import Testing

@testable import HeraldAPNs

@Suite("apns-id generation")
struct APNsIDGeneratorTests {
    @Test("ids are canonical version 4 UUIDs with the RFC 4122 variant")
    func canonical() throws {
        let zero = APNsIDGenerator.id(high: 0, low: 0)
        #expect(zero.rawValue == "00000000-0000-4000-8000-000000000000")
        let ones = APNsIDGenerator.id(high: .max, low: .max)
        #expect(ones.rawValue == "ffffffff-ffff-4fff-bfff-ffffffffffff")
        let mixed = APNsIDGenerator.id(high: 0x0123_4567_89ab_cdef, low: 0xfedc_ba98_7654_3210)
        #expect(mixed.rawValue == "01234567-89ab-4def-bedc-ba9876543210")
        #expect(try NotificationID(mixed.rawValue) == mixed)
    }

    @Test("ids do not repeat")
    func unique() {
        let generator = APNsIDGenerator()
        let ids = (0..<20_000).map { _ in generator.next().rawValue }
        #expect(Set(ids).count == ids.count)
        #expect(ids.allSatisfy { Array($0.utf8)[14] == UInt8(ascii: "4") })
        #expect(ids.allSatisfy { "89ab".utf8.contains(Array($0.utf8)[19]) })
        // Not parsed when made (canonical by construction): each still parses as itself.
        #expect(ids.allSatisfy { (try? NotificationID($0))?.rawValue == $0 })
    }
}
