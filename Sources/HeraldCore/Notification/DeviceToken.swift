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
        // One pass over the contiguous bytes; a token already in lowercase (the usual case)
        // keeps its string, with no new allocation.
        var text = hex
        let uppercase: Bool? = text.withUTF8 { bytes in
            var uppercase = false
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): continue
                case UInt8(ascii: "A")...UInt8(ascii: "F"): uppercase = true
                default: return nil
                }
            }
            return uppercase
        }
        guard let uppercase else {
            throw NotificationValidationError(.badDeviceToken, field: "device_token", message: "the device token must be hexadecimal digits only")
        }
        guard uppercase else {
            self.hex = text
            return
        }
        self.hex = text.withUTF8 { bytes in
            String(unsafeUninitializedCapacity: bytes.count) { buffer in
                for (at, byte) in zip(buffer.indices, bytes) {
                    buffer[at] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F") ? byte &+ 32 : byte
                }
                return bytes.count
            }
        }
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
                buffer[at] = HexDigits.digit(byte &>> 4)
                buffer[at &+ 1] = HexDigits.digit(byte & 0x0f)
                at &+= 2
            }
            return at
        }
    }

    /// The raw bytes of the token.
    public var bytes: [UInt8] {
        [UInt8](unsafeUninitializedCapacity: byteCount) { buffer, initialized in
            initialized = copyBytes(to: UnsafeMutableRawBufferPointer(buffer))
        }
    }

    /// The number of raw bytes: half the hex digits.
    public var byteCount: Int { hex.utf8.count / 2 }

    /// Writes the raw bytes to the start of `buffer` (at least ``byteCount`` bytes long; a
    /// shorter one gets what fits) without an array between.
    /// - Returns: the bytes written.
    public func copyBytes(to buffer: UnsafeMutableRawBufferPointer) -> Int {
        var text = hex
        return text.withUTF8 { digits in
            let count = Swift.min(digits.count / 2, buffer.count)
            // `hex` holds checked hex digits only (its initializers validate).
            for index in 0..<count {
                let high = HexDigits.value(digits[2 &* index]) ?? 0
                let low = HexDigits.value(digits[2 &* index &+ 1]) ?? 0
                buffer[index] = high &<< 4 | low
            }
            return count
        }
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
