/// An `apns-id`: a canonical UUID, 32 lowercase hex digits in the form 8-4-4-4-12.
public struct NotificationID: Hashable, Sendable, CustomStringConvertible, Codable {
    public let rawValue: String

    /// Parses an apns-id. Uppercase digits are accepted and lowered; any other form is `BadMessageId`.
    public init(_ string: String) throws(NotificationValidationError) {
        // Already canonical (lower case): kept as is, no copy.
        if Self.isLowercaseCanonical(string.utf8) {
            self.rawValue = string
            return
        }
        let bytes = Array(string.utf8)
        guard bytes.count == 36 else {
            throw NotificationValidationError(.badMessageId, field: "apns_id", message: "apns-id must be a UUID in the form 8-4-4-4-12")
        }
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (index, byte) in bytes.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else {
                    throw NotificationValidationError(.badMessageId, field: "apns_id", message: "apns-id must be a UUID in the form 8-4-4-4-12")
                }
                out.append(byte)
                continue
            }
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): out.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): out.append(byte + 32)
            default:
                throw NotificationValidationError(.badMessageId, field: "apns_id", message: "apns-id must be hexadecimal digits and hyphens")
            }
        }
        self.rawValue = String(decoding: out, as: UTF8.self)
    }

    private static func isLowercaseCanonical(_ utf8: String.UTF8View) -> Bool {
        guard utf8.count == 36 else { return false }
        var index = 0
        for byte in utf8 {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): break
                default: return false
                }
            }
            index += 1
        }
        return true
    }

    /// A new random (version 4) apns-id.
    public static func random() -> NotificationID {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    /// A new random (version 4) apns-id from the given generator (two of its words: the system
    /// generator reads the kernel once per word).
    public static func random(using generator: inout some RandomNumberGenerator) -> NotificationID {
        NotificationID(bytes: randomBytes(using: &generator))
    }

    /// The 16 bytes of a new random (version 4) apns-id, for a caller that stores the bytes
    /// (``random(using:)`` is the same bytes in canonical form).
    public static func randomBytes(using generator: inout some RandomNumberGenerator) -> [UInt8] {
        let words = (generator.next(), generator.next())
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: words.0 >> UInt64(8 * i))
            bytes[8 + i] = UInt8(truncatingIfNeeded: words.1 >> UInt64(8 * i))
        }
        bytes[6] = (bytes[6] & 0x0f) | 0x40
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        return bytes
    }

    /// The apns-id of 16 bytes, in canonical form (lowercase, 8-4-4-4-12). Bytes beyond the
    /// 16th are ignored; fewer give a shorter (non-canonical) id, so callers pass exactly 16.
    /// (Formatted by a non-generic loop over contiguous bytes, straight into the string's
    /// storage: the batch path makes one per item, and the generic form, called across the
    /// module boundary unspecialized, costs more.)
    public init(bytes: some Collection<UInt8>) {
        let string = bytes.withContiguousStorageIfAvailable(Self.canonical) ?? Array(bytes).withUnsafeBufferPointer(Self.canonical)
        self.init(uncheckedCanonical: string)
    }

    /// The canonical form of the first 16 bytes (fewer give a shorter string).
    private static func canonical(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        let count = Swift.min(bytes.count, 16)
        // Two digits a byte and at most four hyphens; the closure returns what it wrote.
        return String(unsafeUninitializedCapacity: 36) { buffer in
            var at = 0
            for i in 0..<count {
                if i == 4 || i == 6 || i == 8 || i == 10 {
                    buffer[at] = UInt8(ascii: "-")
                    at &+= 1
                }
                let byte = bytes[i]
                buffer[at] = DeviceToken.hexDigit(byte &>> 4)
                buffer[at &+ 1] = DeviceToken.hexDigit(byte & 0x0f)
                at &+= 2
            }
            return at
        }
    }

    /// An apns-id the caller made in canonical form itself (36 lowercase hex digits and hyphens,
    /// 8-4-4-4-12), taken without checking: for generators on the send path. Input from
    /// anywhere else goes through ``init(_:)``.
    public init(uncheckedCanonical: String) { self.rawValue = uncheckedCanonical }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        do { try self.init(raw) } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// Makes many apns-ids quickly, for the items of a batch: a SplitMix64 sequence seeded once from
/// the system generator (one kernel read per batch instead of two per id). The ids only need to
/// be unique, not secret: distinct within one generator, and unlikely to meet another's (64
/// random bits of seed).
public struct NotificationIDGenerator: RandomNumberGenerator, Sendable {
    private var random = SplitMix64()

    public init() {}

    public mutating func next() -> UInt64 { random.next() }

    /// The next apns-id.
    public mutating func nextID() -> NotificationID { NotificationID.random(using: &self) }

    /// The next apns-id's 16 bytes (a store that keeps the bytes need not format and parse it).
    public mutating func nextBytes() -> [UInt8] { NotificationID.randomBytes(using: &self) }
}
