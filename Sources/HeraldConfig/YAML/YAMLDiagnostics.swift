import HeraldCore
import Yams

/// Collects the errors found in one YAML file and remembers where each field was written.
///
/// Readers report every problem they find and go on, so one pass over a file lists all of its
/// errors, not just the first.
final class YAMLDiagnostics {
    let file: String
    private(set) var errors: [ConfigError] = []
    /// Problems that do not stop the file from loading (a key file others can read).
    private(set) var warnings: [ConfigError] = []
    /// Field path → where its value was written.
    private(set) var locations: [String: SourceLocation] = [:]

    init(file: String) {
        self.file = file
    }

    var hasErrors: Bool { !errors.isEmpty }

    func location(_ node: Node?) -> SourceLocation {
        guard let mark = node?.mark else { return SourceLocation(file: file, line: 1, column: 1) }
        return SourceLocation(file: file, line: mark.line, column: mark.column)
    }

    func location(_ mark: Mark) -> SourceLocation {
        SourceLocation(file: file, line: mark.line, column: mark.column)
    }

    func error(at node: Node?, _ field: String, _ message: String) {
        errors.append(ConfigError(location: location(node), field: field, message: message))
    }

    func error(at location: SourceLocation, _ field: String, _ message: String) {
        errors.append(ConfigError(location: location, field: field, message: message))
    }

    func warning(at node: Node?, _ field: String, _ message: String) {
        warnings.append(ConfigError(location: location(node), field: field, message: message))
    }

    func record(_ field: String, _ node: Node) {
        locations[field] = location(node)
    }

    /// Errors sorted by position (readers visit sections in their own order).
    var sortedErrors: [ConfigError] {
        errors.enumerated().sorted { a, b in
            let (l, r) = (a.element.location, b.element.location)
            if l.line != r.line { return l.line < r.line }
            if l.column != r.column { return l.column < r.column }
            return a.offset < b.offset
        }.map(\.element)
    }
}

/// A field path: `auth.token.key_id`, `topics[2]`, `plugins[0].options`.
struct FieldPath: CustomStringConvertible {
    let text: String

    static let root = FieldPath(text: "")

    func appending(_ key: String) -> FieldPath {
        FieldPath(text: text.isEmpty ? key : text + "." + key)
    }

    func index(_ i: Int) -> FieldPath {
        FieldPath(text: text + "[\(i)]")
    }

    var description: String { text }
}

extension Node {
    /// A short name of the node's kind for messages ("a mapping", "a list", "a number", …).
    var kindForMessages: String {
        switch self {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .alias: return "an alias"
        case .scalar(let scalar):
            if scalar.style == .singleQuoted || scalar.style == .doubleQuoted { return "a string" }
            switch tagName {
            case .null: return "empty"
            case .bool: return "a boolean"
            case .int: return "a whole number"
            case .float: return "a number"
            default: return "a string"
            }
        }
    }

    /// The resolver configuration files are composed with: none of the YAML core schema's rules,
    /// so that composing a file (which hashes every mapping key, with its tag, to find duplicate
    /// keys) runs no regular expression; a plain scalar is typed by ``tagName`` when a reader
    /// asks for its type.
    static let composeResolver = Resolver.basic

    /// The node's tag name (`tag:yaml.org,2002:int`, …): an explicit tag as written; a plain
    /// scalar's as the YAML core schema's rules type its text (Yams' default resolver).
    var tagName: Tag.Name {
        if case .scalar(let scalar) = self, scalar.tag.description == Tag.Name.implicit.rawValue {
            return Self.evidentTag(of: scalar.string) ?? Resolver.default.resolveTag(of: self)
        }
        return Tag.Name(rawValue: tag.rawValue)
    }

    /// The tag the default resolver gives `text` where its first characters settle it, without
    /// the resolver's regular expressions: a word starting with a letter no rule starts with is
    /// a string (booleans start with y, n, t, f or o, null with n or N; numbers, dates, merge
    /// and value keys with a digit, sign, dot, `<` or `=`), and a decimal without leading zero
    /// is an integer (the resolver tries its integer rule before its float rule). Nil: ask the
    /// resolver.
    static func evidentTag(of text: String) -> Tag.Name? {
        guard let first = text.utf8.first else { return .null }
        switch first {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"):
            return Self.ruleInitials.contains(first) ? nil : .str
        case UInt8(ascii: "1")...UInt8(ascii: "9"):
            return evidentInteger(text) != nil ? .int : nil
        default:
            return nil
        }
    }

    /// The letters a boolean or null of the default resolver starts with.
    private static let ruleInitials: Set<UInt8> = Set("yYnNtTfFoO".utf8)

    /// `text` as an integer when it is a plain decimal without sign, leading zero or
    /// underscore, of at most 18 digits (so it fits); nil otherwise.
    static func evidentInteger(_ text: String) -> Int? {
        let utf8 = text.utf8
        guard let first = utf8.first, first != UInt8(ascii: "0"), utf8.count <= 18 else { return nil }
        var value = 0
        for byte in utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// The node's value as an integer, as Yams reads one (`node.int`), with plain decimals read
    /// directly.
    var wholeNumber: Int? {
        if case .scalar(let scalar) = self, let value = Self.evidentInteger(scalar.string) { return value }
        return int
    }

    /// True for `~`, `null` and an empty plain value.
    ///
    /// A scalar whose tag is still to be resolved is matched here as the resolver's null rule
    /// would match it (`~`, `null`, `Null`, `NULL` or nothing): every string read asks this, and
    /// resolving the tag runs the resolver's regular expressions, most of a tenant file's parse.
    var isNull: Bool {
        guard case .scalar(let scalar) = self, scalar.style != .singleQuoted, scalar.style != .doubleQuoted else { return false }
        if scalar.tag.description == Tag.Name.implicit.rawValue {
            switch scalar.string {
            case "", "~", "null", "Null", "NULL": return true
            default: return false
            }
        }
        return tagName == .null
    }
}
