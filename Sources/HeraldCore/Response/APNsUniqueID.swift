/// An `apns-unique-id`: the key APNs' development environment gives each answer in Apple's
/// delivery log, a UUID.
///
/// Held as its 16 bytes, read straight from the header; its canonical text is made only where
/// the id is shown or stored (``rawValue``). An answer that carries one costs no allocation for
/// it, and most never show it (a batch item's plain success does not keep it).
public struct APNsUniqueID: Hashable, Sendable, CustomStringConvertible {
    public let words: UUIDText.Words

    public init(words: UUIDText.Words) {
        self.words = words
    }

    /// The id written as a UUID in either case; nil for any other text (the header and a
    /// stored value are untrusted: anything else is dropped, not passed on).
    public init?(_ text: String) {
        guard let words = UUIDText.parse(text) else { return nil }
        self.words = words
    }

    /// The header's value, or nil when it is not a UUID.
    public init?(header bytes: UnsafeRawBufferPointer) {
        guard let words = UUIDText.parse(bytes) else { return nil }
        self.words = words
    }

    /// The canonical text: 32 lowercase hex digits in the form 8-4-4-4-12.
    public var rawValue: String { UUIDText.format(words) }

    public var description: String { rawValue }
}
