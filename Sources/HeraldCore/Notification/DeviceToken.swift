/// A device token: the hexadecimal bytes that APNs gave the app when it registered.
///
/// Tokens have no fixed length (Apple has grown them before), so any non-empty, even-length
/// string of hex digits up to ``maximumHexLength`` is accepted. The canonical form is lowercase.
///
/// ```swift
/// let token = try DeviceToken(hex: "00FC13ADff785122b4ad28809a3420982341241421348097878e577c991de8f0")
/// token.hex // "00fc13ad…"
/// ```
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible, Codable {
    /// The longest token accepted (in hex digits). Generous on purpose: APNs decides what is valid.
    public static let maximumHexLength = 200

    /// The lowercase hexadecimal form, as it goes into `:path`.
    public let hex: String

    public init(hex: String) throws(NotificationValidationError) {
        guard !hex.isEmpty else {
            throw NotificationValidationError(.missingDeviceToken, field: "device_token", message: "the device token is empty")
        }
        guard hex.utf8.count <= Self.maximumHexLength else {
            throw NotificationValidationError(.badDeviceToken, field: "device_token", message: "the device token is longer than \(Self.maximumHexLength) hex digits")
        }
        guard hex.utf8.count % 2 == 0 else {
            throw NotificationValidationError(.badDeviceToken, field: "device_token", message: "the device token has an odd number of hex digits")
        }
        var lower = [UInt8]()
        lower.reserveCapacity(hex.utf8.count)
        for byte in hex.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"):
                lower.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"):
                lower.append(byte + 32)
            default:
                throw NotificationValidationError(.badDeviceToken, field: "device_token", message: "the device token must be hexadecimal digits only")
            }
        }
        self.hex = String(decoding: lower, as: UTF8.self)
    }

    /// A token from its raw bytes.
    /// (Formatted by a non-generic loop over contiguous bytes, straight into the string's
    /// storage: the batch path decodes a token per item.)
    public init(bytes: some Collection<UInt8>) {
        self.hex = bytes.withContiguousStorageIfAvailable(Self.lowercaseHex) ?? Array(bytes).withUnsafeBufferPointer(Self.lowercaseHex)
    }

    private static func lowercaseHex(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { buffer in
            var at = 0
            for byte in bytes {
                buffer[at] = hexDigit(byte &>> 4)
                buffer[at &+ 1] = hexDigit(byte & 0x0f)
                at &+= 2
            }
            return at
        }
    }

    /// The lowercase hex digit of a nibble (0–15).
    @inline(__always)
    static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") &+ nibble : UInt8(ascii: "a") &+ (nibble &- 10)
    }

    /// The raw bytes of the token.
    public var bytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8? = nil
        for byte in hex.utf8 {
            let nibble = byte <= UInt8(ascii: "9") ? byte - UInt8(ascii: "0") : byte - UInt8(ascii: "a") + 10
            if let h = high {
                out.append(h << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        return out
    }

    public var description: String { hex }

    /// A shortened form for logs: enough to correlate, not the whole token.
    public var redacted: String {
        hex.count <= 12 ? hex : String(hex.prefix(8)) + "…" + String(hex.suffix(4))
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        do {
            try self.init(hex: raw)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}
