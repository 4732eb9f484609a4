/// Hexadecimal digits, one byte of text at a time: the device token, the apns-ids
/// (``UUIDText``) and the API keys' hashes all decode through this one table, and device
/// tokens and apns-ids are written with its lowercase digits.
public enum HexDigits {
    /// The lowercase hex digit of a nibble (0–15).
    @inline(__always)
    public static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") &+ nibble : UInt8(ascii: "a") &+ (nibble &- 10)
    }

    /// The value of one hex digit, either case; nil for any other byte.
    @inline(__always)
    public static func value(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }
}
