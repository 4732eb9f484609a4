import Yams

/// Replaces single-line scalar values in a YAML text in place, keeping everything else
/// (comments, order, quoting of the other values) as the operator wrote it.
///
/// Used by a credential upload that brings a new key ID: `key_id:` and `key_file:` get the new
/// values, and nothing else in the tenant file moves.
struct TenantFileScalarEdit {
    /// Where the value starts (Yams' mark: 1-based line, column in Unicode scalars) and what replaces it.
    var line: Int
    var column: Int
    /// The value as the file has it now (for a check that the mark points at it).
    var current: String
    var style: Node.Scalar.Style
    var replacement: String

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The scalar value node's edit, or nil when the node is not a scalar with a position.
    init?(node: Node, replacement: String) {
        guard case .scalar(let scalar) = node, let mark = node.mark else { return nil }
        self.line = mark.line
        self.column = mark.column
        self.current = scalar.string
        self.style = scalar.style
        self.replacement = replacement
    }

    /// Applies the edits to `text`. Edits must not overlap.
    static func apply(_ edits: [TenantFileScalarEdit], to text: String) throws(Failure) -> String {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map {
            Array(String($0).unicodeScalars)
        }
        // Right to left, bottom to top, so the earlier marks stay valid.
        for edit in edits.sorted(by: { ($0.line, $0.column) > ($1.line, $1.column) }) {
            guard edit.line >= 1, edit.line <= lines.count else {
                throw Failure(description: "line \(edit.line) is not in the file")
            }
            var scalars = lines[edit.line - 1]
            let start = edit.column - 1
            guard start >= 0, start <= scalars.count else {
                throw Failure(description: "column \(edit.column) is not on line \(edit.line)")
            }
            let end = try edit.end(in: scalars, from: start)
            scalars.replaceSubrange(start..<end, with: Array(Self.render(edit.replacement).unicodeScalars))
            lines[edit.line - 1] = scalars
        }
        return lines.map { String(String.UnicodeScalarView($0)) }.joined(separator: "\n")
    }

    /// Where the value written at `start` ends on its line.
    private func end(in scalars: [Unicode.Scalar], from start: Int) throws(Failure) -> Int {
        let where_ = "line \(line), column \(column)"
        switch style {
        case .plain:
            let value = Array(current.unicodeScalars)
            guard start + value.count <= scalars.count, Array(scalars[start..<start + value.count]) == value else {
                throw Failure(
                    description: "the value at \(where_) is not on one line as expected; edit the file by hand")
            }
            return start + value.count
        case .singleQuoted:
            guard start < scalars.count, scalars[start] == "'" else { break }
            var index = start + 1
            while index < scalars.count {
                if scalars[index] == "'" {
                    if index + 1 < scalars.count, scalars[index + 1] == "'" {
                        index += 2
                        continue
                    }
                    return index + 1
                }
                index += 1
            }
        case .doubleQuoted:
            guard start < scalars.count, scalars[start] == "\"" else { break }
            var index = start + 1
            while index < scalars.count {
                if scalars[index] == "\\" {
                    index += 2
                    continue
                }
                if scalars[index] == "\"" { return index + 1 }
                index += 1
            }
        default:
            break
        }
        throw Failure(description: "the value at \(where_) is not a one-line scalar; edit the file by hand")
    }

    /// Plain when that is unambiguous, double-quoted otherwise.
    static func render(_ value: String) -> String {
        let plainSafe =
            !value.isEmpty
            && value.unicodeScalars.allSatisfy { scalar in
                switch scalar {
                case "a"..."z", "A"..."Z", "0"..."9", "_", ".", "/", "-": return true
                default: return false
                }
            } && !value.hasPrefix("-")
        if plainSafe { return value }
        var quoted = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            default: quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted + "\""
    }
}
