import Foundation
import HeraldCore

/// An apns-id's 16 bytes as PostgreSQL's `uuid` (PostgresNIO binds and reads `uuid` as Foundation's
/// `UUID`): the same bytes in the same order, no text between them.
extension UUID {
    init(_ words: UUIDText.Words) {
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &bytes) { raw in
            raw.storeBytes(of: words.high.bigEndian, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: words.low.bigEndian, toByteOffset: 8, as: UInt64.self)
        }
        self.init(uuid: bytes)
    }

    var words: UUIDText.Words {
        withUnsafeBytes(of: uuid) { raw in
            UUIDText.Words(
                high: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                low: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        }
    }
}
