/// An `apns-id`: a canonical UUID, 32 lowercase hex digits in the form 8-4-4-4-12.
///
/// Held as its 16 bytes; its text is made when asked for (``rawValue``), except that text it
/// was parsed from is kept. An id a generator or a store made is written into a request's
/// header straight from its bytes (``writeText(to:)``), so a send that never shows its id as
/// text formats none.
public struct NotificationID: Hashable, Sendable, CustomStringConvertible, Codable {
    /// The 16 bytes: the id's identity (two ids are equal when their bytes, and so their
    /// canonical text, are).
    public let words: UUIDText.Words
    /// The canonical text this id was parsed from, kept so that it is not formatted again.
    private let parsedText: String?

    /// Parses an apns-id (``UUIDText/parse(_:)``). Uppercase digits are accepted and lowered;
    /// any other form is `BadMessageId`.
    public init(_ string: String) throws(NotificationValidationError) {
        var text = string
        var lowercase = true
        guard let words = text.withUTF8({ UUIDText.parse($0, lowercase: &lowercase) }) else {
            throw NotificationValidationError(
                .badMessageId, field: "apns_id",
                message: "apns-id must be a UUID: hexadecimal digits in the form 8-4-4-4-12")
        }
        self.words = words
        // Already canonical (lower case, the usual case): kept as is, no copy.
        self.parsedText = lowercase ? text : nil
    }

    /// The apns-id of 16 bytes (``UUIDText/Words/init(bytes:)``: callers pass exactly 16).
    public init(bytes: some Collection<UInt8>) {
        self.init(words: UUIDText.Words(bytes: bytes))
    }

    /// The apns-id of these 16 bytes.
    public init(words: UUIDText.Words) {
        self.words = words
        self.parsedText = nil
    }

    /// The canonical text (formatted now unless this id was parsed from it).
    public var rawValue: String { parsedText ?? UUIDText.format(words) }

    /// Writes the canonical text, ``UUIDText/length`` bytes, to `text`.
    public func writeText(to text: UnsafeMutablePointer<UInt8>) {
        UUIDText.write(words, to: text)
    }

    public var description: String { rawValue }

    public static func == (left: NotificationID, right: NotificationID) -> Bool { left.words == right.words }

    public func hash(into hasher: inout Hasher) { hasher.combine(words) }

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

/// The one maker of apns-ids: random version 4 UUIDs from a SplitMix64 sequence seeded once
/// from the system generator (one kernel read per generator instead of two per id), formatted
/// by ``UUIDText``. The ids only need to be unique, not secret: distinct within one generator,
/// and unlikely to meet another's (64 random bits of seed).
///
/// A value type: its owner keeps it where its ids are made. The router holds one behind a
/// `Mutex` for every single send; a store makes one per batch it inserts; the sandbox one per
/// connection.
///
/// ```swift
/// var ids = NotificationIDGenerator()
/// note.id = ids.nextID()
/// ```
public struct NotificationIDGenerator: Sendable {
    private var random: SplitMix64

    /// Seeded from the system generator.
    public init() { random = SplitMix64() }

    /// The same seed gives the same ids (for tests).
    public init(seed: UInt64) { random = SplitMix64(seed: seed) }

    /// The next apns-id.
    public mutating func nextID() -> NotificationID {
        NotificationID(words: nextWords())
    }

    /// The next apns-id's 16 bytes as two words (a store that keeps them as a `uuid`): those of
    /// the id ``nextID()`` would have made.
    public mutating func nextWords() -> UUIDText.Words { .random(using: &random) }
}
