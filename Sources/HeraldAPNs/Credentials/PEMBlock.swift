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
        label.hasPrefix("ENCRYPTED") || text.contains("Proc-Type: 4,ENCRYPTED")
    }

    /// The blocks of `text`, in order. Text outside the blocks is ignored.
    static func all(in text: String) -> [PEMBlock] {
        var blocks: [PEMBlock] = []
        var rest = text[...]
        while let begin = rest.range(of: "-----BEGIN ") {
            let afterBegin = rest[begin.upperBound...]
            guard let labelEnd = afterBegin.range(of: "-----") else { break }
            let label = String(afterBegin[..<labelEnd.lowerBound])
            let endMarker = "-----END \(label)-----"
            guard !label.isEmpty, !label.contains("\n"),
                let end = rest[labelEnd.upperBound...].range(of: endMarker)
            else { break }
            blocks.append(PEMBlock(label: label, text: String(rest[begin.lowerBound..<end.upperBound]) + "\n"))
            rest = rest[end.upperBound...]
        }
        return blocks
    }
}
