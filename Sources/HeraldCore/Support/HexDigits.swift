/// Hexadecimal digits, one byte of text at a time: the device token, the apns-ids the store
/// keeps as bytes and the API keys' hashes all decode through this one table.
public enum HexDigits {
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
