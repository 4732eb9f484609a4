import Foundation
import HeraldCore
import Yams

/// A mapping whose keys were checked against the keys a section allows.
///
/// Unknown keys are errors that list the valid keys (and suggest the closest one), so a typo is
/// never silently ignored.
struct CheckedMapping {
    let node: Node
    let path: FieldPath
    /// The allowed keys present, each once (a later duplicate replaces it): at most as many as
    /// the section allows, so a look-up is a short scan, cheaper than hashing the name.
    private let entries: [(name: String, key: Node, value: Node)]
    private let diagnostics: YAMLDiagnostics

    /// Reads `node` as a mapping with the given keys. Reports and returns nil when it is not a mapping.
    init?(_ node: Node, path: FieldPath, allowedKeys: [String], diagnostics: YAMLDiagnostics) {
        guard case .mapping(let mapping) = node else {
            let what = path.text.isEmpty ? "the file" : "this section"
            diagnostics.error(
                at: node, path.text,
                "must be a mapping with the keys \(allowedKeys.joined(separator: ", ")), but \(what) is \(node.kindForMessages)"
            )
            return nil
        }
        var entries: [(name: String, key: Node, value: Node)] = []
        for (key, value) in mapping {
            guard case .scalar(let scalar) = key else {
                diagnostics.error(at: key, path.text, "keys must be plain names, not \(key.kindForMessages)")
                continue
            }
            let name = scalar.string
            guard allowedKeys.contains(name) else {
                var message = "unknown key"
                if let suggestion = Self.closest(to: name, in: allowedKeys) {
                    message += " (did you mean '\(suggestion)'?)"
                }
                message += "; valid keys: \(allowedKeys.joined(separator: ", "))"
                diagnostics.error(at: key, path.appending(name).text, message)
                continue
            }
            if let index = entries.firstIndex(where: { $0.name == name }) {
                entries[index] = (name, key, value)
            } else {
                entries.append((name, key, value))
            }
            // Sections are located at their key; scalar reads later point at the value instead.
            diagnostics.record(path.appending(name).text, key)
        }
        self.node = node
        self.path = path
        self.entries = entries
        self.diagnostics = diagnostics
    }

    /// The value of `key`, or nil when absent.
    subscript(_ key: String) -> Node? { entry(key)?.value }

    func has(_ key: String) -> Bool { entry(key) != nil }

    /// The key node itself (for errors about the key rather than its value).
    func keyNode(_ key: String) -> Node? { entry(key)?.key }

    private func entry(_ name: String) -> (name: String, key: Node, value: Node)? {
        entries.first { $0.name == name }
    }

    /// The value of a required key; reports "is required" at the mapping when absent.
    func require(_ key: String, hint: String = "") -> Node? {
        if let value = entry(key)?.value { return value }
        diagnostics.error(at: node, path.appending(key).text, "is required" + hint)
        return nil
    }

    /// The closest valid key within a small edit distance, for "did you mean" hints.
    static func closest(to name: String, in keys: [String]) -> String? {
        let lowered = name.lowercased().replacingOccurrences(of: "-", with: "_")
        var best: (key: String, distance: Int)? = nil
        for key in keys {
            let d = editDistance(Array(lowered.utf8), Array(key.utf8))
            if d <= max(1, key.count / 3), d < (best?.distance ?? Int.max) { best = (key, d) }
        }
        return best?.key
    }

    private static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}

/// Typed scalar reads that report what they expected.
extension YAMLDiagnostics {
    /// A non-empty string scalar (any plain or quoted scalar's text).
    func string(_ node: Node, _ path: FieldPath, allowEmpty: Bool = false) -> String? {
        guard case .scalar(let scalar) = node, !node.isNull else {
            error(at: node, path.text, "must be a string, not \(node.kindForMessages)")
            return nil
        }
        if !allowEmpty, scalar.string.isEmpty {
            error(at: node, path.text, "must not be empty")
            return nil
        }
        record(path.text, node)
        return scalar.string
    }

    /// A whole number in `range`.
    func integer(_ node: Node, _ path: FieldPath, in range: ClosedRange<Int>) -> Int? {
        guard case .scalar = node, node.tagName == .int, let value = node.wholeNumber else {
            error(
                at: node, path.text,
                "must be a whole number from \(range.lowerBound) to \(range.upperBound), not \(node.kindForMessages)")
            return nil
        }
        guard range.contains(value) else {
            error(at: node, path.text, "must be from \(range.lowerBound) to \(range.upperBound), not \(value)")
            return nil
        }
        record(path.text, node)
        return value
    }

    /// A duration in seconds: a number (`30`, `2.5`) or a string with a unit (`500ms`, `30s`, `10m`, `1h`, `7d`).
    func duration(_ node: Node, _ path: FieldPath, minimum: Double, allowZero: Bool) -> Double? {
        let rule =
            allowZero
            ? "must be a duration of 0 or more seconds (e.g. 30, 2.5, \"500ms\", \"10m\", \"1h\")"
            : "must be a duration of more than 0 seconds (e.g. 30, 2.5, \"500ms\", \"10m\", \"1h\")"
        guard case .scalar(let scalar) = node, !node.isNull else {
            error(at: node, path.text, rule)
            return nil
        }
        var seconds: Double?
        if node.tagName == .int || node.tagName == .float {
            seconds = node.float
        } else {
            seconds = Self.parseDuration(scalar.string)
        }
        guard let value = seconds, value.isFinite, value >= 0 else {
            error(at: node, path.text, rule)
            return nil
        }
        if value == 0 && !allowZero || value != 0 && value < minimum {
            error(at: node, path.text, rule + (value == 0 ? "" : "; the least is \(minimum) s"))
            return nil
        }
        // Durations become integer nanoseconds and milliseconds downstream: bound them well inside.
        if value > Self.maximumDuration {
            error(at: node, path.text, rule + "; the most is \(Int(Self.maximumDuration)) s (10 years)")
            return nil
        }
        record(path.text, node)
        return value
    }

    /// The longest duration any setting accepts: 10 years, in seconds.
    static let maximumDuration: Double = 315_360_000

    static func parseDuration(_ text: String) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard !number.isEmpty, number.allSatisfy({ $0.isNumber || $0 == "." }), let value = Double(number) else {
                return nil
            }
            return value * factor
        }
        return nil
    }

    /// A list; reports and returns nil otherwise.
    func sequence(_ node: Node, _ path: FieldPath, of what: String) -> [Node]? {
        guard case .sequence(let sequence) = node else {
            error(at: node, path.text, "must be a list of \(what), not \(node.kindForMessages)")
            return nil
        }
        record(path.text, node)
        return Array(sequence)
    }

    /// Any YAML value as JSON (plugin options). Mapping keys must be strings.
    func json(_ node: Node, _ path: FieldPath) -> JSONValue? {
        switch node {
        case .scalar(let scalar):
            if scalar.style == .singleQuoted || scalar.style == .doubleQuoted { return .string(scalar.string) }
            switch node.tagName {
            case .null: return .null
            case .bool: return node.bool.map(JSONValue.bool) ?? .string(scalar.string)
            case .int:
                if let value = node.wholeNumber { return .int(Int64(value)) }
                error(at: node, path.text, "the number \(scalar.string) is too large")
                return nil
            case .float:
                guard let value = node.float, value.isFinite else {
                    error(at: node, path.text, "must be a finite number (JSON has no .inf or .nan)")
                    return nil
                }
                return .double(value)
            default: return .string(scalar.string)
            }
        case .sequence(let sequence):
            var items: [JSONValue] = []
            var ok = true
            for (i, item) in sequence.enumerated() {
                if let value = json(item, path.index(i)) { items.append(value) } else { ok = false }
            }
            return ok ? .array(items) : nil
        case .mapping(let mapping):
            var members: [(String, JSONValue)] = []
            var ok = true
            for (key, value) in mapping {
                guard case .scalar(let keyScalar) = key else {
                    error(at: key, path.text, "keys must be strings, not \(key.kindForMessages)")
                    ok = false
                    continue
                }
                if let converted = json(value, path.appending(keyScalar.string)) {
                    members.append((keyScalar.string, converted))
                } else {
                    ok = false
                }
            }
            return ok ? .object(members) : nil
        case .alias:
            error(at: node, path.text, "aliases are not supported here")
            return nil
        }
    }
}

/// Turns a Yams parse error into a located error (without the source snippet, which could echo
/// a line the user pasted by mistake).
extension YAMLDiagnostics {
    func syntaxError(_ error: any Error) {
        switch error {
        case YamlError.scanner(let context, let problem, let mark, _),
            YamlError.parser(let context, let problem, let mark, _),
            YamlError.composer(let context, let problem, let mark, _):
            var message = "YAML syntax error: \(problem)"
            if let context {
                message += " (\(context.text) at line \(context.mark.line), column \(context.mark.column))"
            }
            self.error(at: location(mark), "", message)
        case YamlError.duplicatedKeysInMapping(let duplicates, let context):
            let names = duplicates.map { "'\($0)'" }.joined(separator: ", ")
            let plural = duplicates.count == 1 ? "key" : "keys"
            self.error(
                at: location(context.mark), duplicates.count == 1 ? duplicates[0] : "",
                "duplicate \(plural) \(names) in one mapping (each key may appear only once)")
        case YamlError.reader(let problem, _, _, _):
            self.error(
                at: SourceLocation(file: file, line: 1, column: 1), "", "cannot read the file as text: \(problem)")
        case YamlError.dataCouldNotBeDecoded:
            self.error(at: SourceLocation(file: file, line: 1, column: 1), "", "the file is not UTF-8 text")
        default:
            self.error(at: SourceLocation(file: file, line: 1, column: 1), "", "cannot parse the file as YAML")
        }
    }
}
