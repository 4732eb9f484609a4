import Foundation

/// One `-----BEGIN LABEL-----` … `-----END LABEL-----` block found in a text that may carry other
/// lines around it (our demo keys start with a comment line).
struct PEMBlock: Sendable {
    /// The label, e.g. `PRIVATE KEY`, `EC PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`.
    var label: String
    /// The block itself, from `-----BEGIN` through the end marker.
    var text: String
    /// True when the block is an encrypted key (PKCS#8 `ENCRYPTED PRIVATE KEY` or a legacy
    /// `Proc-Type: 4,ENCRYPTED` header).
    var isEncrypted: Bool {
        label.hasPrefix("ENCRYPTED") || Self.find(Self.encryptedHeader, in: Array(text.utf8), from: 0) != nil
    }

    /// The bytes the block's base64 body holds (its DER); nil when the body is not base64 or
    /// carries header lines (`Proc-Type:`, as a legacy encrypted key does).
    var der: [UInt8]? {
        let bytes = Array(text.utf8)
        // The lines between the BEGIN line and the END line.
        guard let bodyStart = bytes.firstIndex(of: UInt8(ascii: "\n")).map({ $0 + 1 }),
            let endLine = Self.find(Self.end, in: bytes, from: bodyStart)
        else { return nil }
        var body: [UInt8] = []
        body.reserveCapacity(endLine - bodyStart)
        for byte in bytes[bodyStart..<endLine] {
            switch byte {
            case UInt8(ascii: ":"): return nil
            case UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: " "), UInt8(ascii: "\t"): continue
            default: body.append(byte)
            }
        }
        return Data(base64Encoded: Data(body)).map { [UInt8]($0) }
    }

    private static let encryptedHeader = Array("Proc-Type: 4,ENCRYPTED".utf8)
    private static let end = Array("-----END ".utf8)
    private static let begin = Array("-----BEGIN ".utf8)
    private static let dashes = Array("-----".utf8)

    /// The blocks of `text`, in order. Text outside the blocks is ignored.
    static func all(in text: String) -> [PEMBlock] {
        let bytes = Array(text.utf8)
        var blocks: [PEMBlock] = []
        var position = 0
        while let start = find(begin, in: bytes, from: position) {
            let labelStart = start + begin.count
            guard let labelEnd = find(dashes, in: bytes, from: labelStart) else { break }
            let label = bytes[labelStart..<labelEnd]
            let endMarker = Array("-----END ".utf8) + label + dashes
            guard !label.isEmpty, !label.contains(UInt8(ascii: "\n")),
                let end = find(endMarker, in: bytes, from: labelEnd + dashes.count)
            else { break }
            let blockEnd = end + endMarker.count
            blocks.append(
                PEMBlock(
                    label: String(decoding: label, as: UTF8.self),
                    text: String(decoding: bytes[start..<blockEnd], as: UTF8.self) + "\n"))
            position = blockEnd
        }
        return blocks
    }

    /// The first position at or after `from` where `needle` starts in `bytes`.
    private static func find(_ needle: [UInt8], in bytes: [UInt8], from: Int) -> Int? {
        guard let first = needle.first, from <= bytes.count - needle.count else { return nil }
        var index = from
        let last = bytes.count - needle.count
        while index <= last {
            if bytes[index] == first, bytes[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
