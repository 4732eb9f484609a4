import HeraldCore
import Synchronization

/// Makes apns-ids (version 4 UUIDs) quickly: two words from a seeded SplitMix64 under a lock,
/// formatted by hand. `NotificationID.random()` reads the system generator byte by byte, which
/// shows up at tens of thousands of notifications per second. These ids only need to be unique,
/// not secret.
final class APNsIDGenerator: Sendable {
    private let state = Mutex(SplitMix64())

    func next() -> NotificationID {
        let (high, low) = state.withLock { ($0.next(), $0.next()) }
        return Self.id(high: high, low: low)
    }

    /// The UUID whose 16 bytes are `high` then `low` (big-endian), with the version 4 and
    /// RFC 4122 variant bits set.
    static func id(high: UInt64, low: UInt64) -> NotificationID {
        let high = (high & ~0xF000) | 0x4000
        let low = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        let text = String(unsafeUninitializedCapacity: 36) { buffer in
            var position = 0
            func put(_ word: UInt64, bytes: Range<Int>) {
                for index in bytes {
                    if index == 4 || index == 6 { buffer[position] = UInt8(ascii: "-"); position += 1 }
                    let byte = UInt8(truncatingIfNeeded: word >> UInt64((7 - index) * 8))
                    buffer[position] = hexDigit(byte >> 4)
                    buffer[position + 1] = hexDigit(byte & 0x0F)
                    position += 2
                }
            }
            put(high, bytes: 0..<8)
            buffer[position] = UInt8(ascii: "-")
            position += 1
            for index in 0..<8 {
                if index == 2 { buffer[position] = UInt8(ascii: "-"); position += 1 }
                let byte = UInt8(truncatingIfNeeded: low >> UInt64((7 - index) * 8))
                buffer[position] = hexDigit(byte >> 4)
                buffer[position + 1] = hexDigit(byte & 0x0F)
                position += 2
            }
            return position
        }
        // Canonical by construction (lowercase hex digits and hyphens, 8-4-4-4-12): not parsed again.
        return NotificationID(uncheckedCanonical: text)
    }

    @inline(__always)
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}
