/// An `apns-id`: a canonical UUID, 32 lowercase hex digits in the form 8-4-4-4-12.
public struct NotificationID: Hashable, Sendable, CustomStringConvertible, Codable {
    public let rawValue: String
    /// The 16 bytes when this value was made from them or parsed them (a batch item's id is
    /// read from its bytes and written back as bytes: no format-and-parse round trip). Not part
    /// of its identity: two ids are equal when their text is.
    private let knownWords: UUIDText.Words?

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
        // Already canonical (lower case, the usual case): kept as is, no copy.
        self.rawValue = lowercase ? text : UUIDText.format(words)
        self.knownWords = words
    }

    /// The apns-id of 16 bytes (``UUIDText/Words/init(bytes:)``: callers pass exactly 16), in
    /// canonical form.
    public init(bytes: some Collection<UInt8>) {
        self.init(words: UUIDText.Words(bytes: bytes))
    }

    /// The apns-id of these 16 bytes, in canonical form.
    public init(words: UUIDText.Words) {
        self.rawValue = UUIDText.format(words)
        self.knownWords = words
    }

    /// The apns-id's 16 bytes, or nil when it is not a UUID (one made with
    /// ``init(uncheckedCanonical:)`` from other text).
    public var words: UUIDText.Words? { knownWords ?? UUIDText.parse(rawValue) }

    /// Text taken as an apns-id without checking (its bytes are parsed when asked for, and are
    /// nil when it is not a UUID). Input goes through ``init(_:)``; an id made from its bytes
    /// through ``init(words:)``.
    public init(uncheckedCanonical: String) {
        self.rawValue = uncheckedCanonical
        self.knownWords = nil
    }

    public var description: String { rawValue }

    public static func == (left: NotificationID, right: NotificationID) -> Bool { left.rawValue == right.rawValue }

    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }

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

    /// The next apns-id's 16 bytes (a store that keeps the bytes need not format and parse it):
    /// the bytes of the id ``nextID()`` would have made.
    public mutating func nextBytes() -> [UInt8] { nextWords().bytes }

    /// The next apns-id's 16 bytes as two words (a store that keeps them as a `uuid`).
    public mutating func nextWords() -> UUIDText.Words { .random(using: &random) }
}
