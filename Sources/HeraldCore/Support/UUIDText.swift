/// The one text form of a UUID in Herald and its one parser: 32 lowercase hex digits in groups
/// of 8-4-4-4-12, as Foundation's `UUID` prints it lowercased. Apns-ids (``NotificationID``),
/// the 16-byte apns-id columns of the stores, job ids and the sandbox's answers all go through
/// here. The 16 bytes travel as two big-endian words (``Words``), so that neither direction
/// needs an array.
///
/// ```swift
/// let text = UUIDText.format(UUIDText.Words(high: 0x0123_4567_89ab_cdef, low: 0xfedc_ba98_7654_3210))
/// // "01234567-89ab-cdef-fedc-ba9876543210"
/// UUIDText.parse("01234567-89AB-CDEF-fedc-ba9876543210")?.high  // 0x0123_4567_89ab_cdef
/// ```
public enum UUIDText {
    /// The 16 bytes of a UUID as two big-endian words.
    public struct Words: Hashable, Sendable {
        /// Bytes 0 to 7, the first byte in the top bits.
        public var high: UInt64
        /// Bytes 8 to 15.
        public var low: UInt64

        public init(high: UInt64, low: UInt64) {
            self.high = high
            self.low = low
        }

        /// The first 16 bytes of `bytes`; bytes past the 16th are ignored and missing ones read
        /// as zero (callers pass exactly 16).
        /// (A non-generic loop over contiguous bytes: a store decodes one per item.)
        public init(bytes: some Collection<UInt8>) {
            self =
                bytes.withContiguousStorageIfAvailable(Self.init(buffer:))
                ?? Array(bytes).withUnsafeBufferPointer(Self.init(buffer:))
        }

        private init(buffer: UnsafeBufferPointer<UInt8>) {
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<Swift.min(buffer.count, 16) {
                let shift = UInt64(56 &- 8 &* (index & 7))
                if index < 8 {
                    high |= UInt64(buffer[index]) &<< shift
                } else {
                    low |= UInt64(buffer[index]) &<< shift
                }
            }
            self.init(high: high, low: low)
        }

        /// A random version 4 UUID (RFC 9562): two words of `generator` with the version and
        /// variant bits set.
        public static func random(using generator: inout some RandomNumberGenerator) -> Words {
            Words(
                high: generator.next() & ~0xf000 | 0x4000,
                low: generator.next() & 0x3fff_ffff_ffff_ffff | 0x8000_0000_0000_0000)
        }

        /// The 16 bytes, in order.
        public var bytes: [UInt8] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(16)
            append(to: &bytes)
            return bytes
        }

        /// Appends the 16 bytes to `bytes`.
        public func append(to bytes: inout [UInt8]) {
            withUnsafeBytes(of: high.bigEndian) { bytes.append(contentsOf: $0) }
            withUnsafeBytes(of: low.bigEndian) { bytes.append(contentsOf: $0) }
        }
    }

    /// The length of a UUID's text.
    public static let length = 36

    /// The canonical text of a UUID: lowercase, 8-4-4-4-12. Written straight into the string's
    /// storage (one allocation).
    public static func format(_ words: Words) -> String {
        String(unsafeUninitializedCapacity: length) { buffer in
            guard buffer.count >= length, let text = buffer.baseAddress else { return 0 }
            write(words, to: text)
            return length
        }
    }

    /// Writes the canonical text, ``length`` bytes, to `text`, each group at its fixed place.
    public static func write(_ words: Words, to text: UnsafeMutablePointer<UInt8>) {
        writeHex(words.high, bytes: 0..<4, to: text)
        writeHex(words.high, bytes: 4..<6, to: text + 9)
        writeHex(words.high, bytes: 6..<8, to: text + 14)
        writeHex(words.low, bytes: 0..<2, to: text + 19)
        writeHex(words.low, bytes: 2..<8, to: text + 24)
        for dash in [8, 13, 18, 23] { text[dash] = UInt8(ascii: "-") }
    }

    /// Writes the bytes `bytes` of `word` (0 is its top byte) as two lowercase hex digits each.
    @inline(__always)
    private static func writeHex(_ word: UInt64, bytes: Range<Int>, to text: UnsafeMutablePointer<UInt8>) {
        for index in bytes {
            let byte = UInt8(truncatingIfNeeded: word &>> UInt64(56 &- 8 &* index))
            let at = 2 &* (index &- bytes.lowerBound)
            text[at] = HexDigits.digit(byte &>> 4)
            text[at &+ 1] = HexDigits.digit(byte & 0x0f)
        }
    }

    /// The UUID written as 32 hex digits in groups of 8-4-4-4-12, in either case (as APNs takes
    /// an `apns-id`); nil for any other text.
    public static func parse(_ text: String) -> Words? {
        var text = text
        var lowercase = true
        return text.withUTF8 { parse($0, lowercase: &lowercase) }
    }

    /// ``parse(_:)`` over a header value's bytes (an answer's `apns-id` or `apns-unique-id`).
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> Words? {
        var lowercase = true
        return bytes.withMemoryRebound(to: UInt8.self) { parse($0, lowercase: &lowercase) }
    }

    /// True when `text` is a UUID that ``parse(_:)`` reads.
    public static func isUUID(_ text: String) -> Bool {
        parse(text) != nil
    }

    /// ``parse(_:)`` over the text's bytes; `lowercase` is set to false when a digit is upper
    /// case (a caller that keeps canonical text keeps lowercase text as it is).
    ///
    /// Every apns-id APNs answers with goes through here, so the groups are read at their fixed
    /// places without a branch per byte: each digit's value and whether it is a digit at all are
    /// worked out arithmetically, and the text is judged once at the end.
    static func parse(_ utf8: UnsafeBufferPointer<UInt8>, lowercase: inout Bool) -> Words? {
        guard utf8.count == 36, let text = utf8.baseAddress else { return nil }
        var digits = Digits()
        var high: UInt64 = 0
        var low: UInt64 = 0
        digits.read(text, 0..<8, into: &high)
        digits.read(text, 9..<13, into: &high)
        digits.read(text, 14..<18, into: &high)
        digits.read(text, 19..<23, into: &low)
        digits.read(text, 24..<36, into: &low)
        let dash = UInt8(ascii: "-")
        let dashes = (text[8] ^ dash) | (text[13] ^ dash) | (text[18] ^ dash) | (text[23] ^ dash)
        guard dashes | digits.invalid == 0 else { return nil }
        if digits.upper != 0 { lowercase = false }
        return Words(high: high, low: low)
    }

    /// Hex digits read in runs: the value goes into a word, and whether any byte was not a hex
    /// digit (``invalid``) or was an upper-case one (``upper``) is kept, as a bit, for the end.
    private struct Digits {
        var invalid: UInt8 = 0
        var upper: UInt8 = 0

        /// Reads `text[range]` (within the 36 bytes ``parse(_:lowercase:)`` checked).
        @inline(__always)
        mutating func read(_ text: UnsafePointer<UInt8>, _ range: Range<Int>, into word: inout UInt64) {
            for at in range {
                let byte = text[at]
                let decimal = byte &- UInt8(ascii: "0")
                // Bit 5 folds the case of a letter; a letter without it is upper case.
                let letter = (byte | 0x20) &- UInt8(ascii: "a")
                let isDecimal: UInt8 = decimal < 10 ? 1 : 0
                let isLetter: UInt8 = letter < 6 ? 1 : 0
                invalid |= (isDecimal | isLetter) ^ 1
                upper |= isLetter & (byte &>> 5 & 1 ^ 1)
                word = word &<< 4 | UInt64(isDecimal == 1 ? decimal : letter &+ 10)
            }
        }
    }
}
