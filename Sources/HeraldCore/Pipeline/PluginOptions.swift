/// Reads a plugin's YAML options (as JSON) with errors that name the option and the rule.
///
/// ```swift
/// let options = try PluginOptions(json, allowed: ["per_second", "burst"])
/// let rate = try options.double("per_second", greaterThan: 0)          // required
/// let burst = try options.int("burst", default: Int(rate), range: 1...1_000_000)
/// ```
public struct PluginOptions: Sendable {
    private let members: [(String, JSONValue)]
    /// The path of this options object inside the plugin's options (`""` at the top).
    public let path: String

    /// - Parameters:
    ///   - value: the options; `null` (none given) reads as an empty object.
    ///   - allowed: the option names the plugin knows; any other is an error.
    public init(_ value: JSONValue, allowed: Set<String>, path: String = "") throws(PluginOptionError) {
        self.path = path
        switch value {
        case .null: members = []
        case .object(let members):
            self.members = members
            for (key, _) in members where !allowed.contains(key) {
                let known = allowed.sorted().joined(separator: ", ")
                throw PluginOptionError(
                    option: Self.join(path, key),
                    message: "unknown option" + (known.isEmpty ? " (this plugin takes none)" : " (known: \(known))"))
            }
        default:
            throw PluginOptionError(
                option: path.isEmpty ? nil : path,
                message: "options must be a mapping of names to values, got \(Self.kind(value))")
        }
    }

    /// The raw value of an option, nil when absent.
    public subscript(key: String) -> JSONValue? {
        members.first { $0.0 == key }?.1
    }

    public func contains(_ key: String) -> Bool { self[key] != nil }

    // MARK: Numbers

    /// A required number greater than `lowerBound`.
    public func double(_ key: String, greaterThan lowerBound: Double) throws(PluginOptionError) -> Double {
        guard let value = self[key] else { throw missing(key) }
        return try number(key, value, greaterThan: lowerBound)
    }

    /// An optional number greater than `lowerBound`.
    public func double(_ key: String, default defaultValue: Double, greaterThan lowerBound: Double)
        throws(PluginOptionError) -> Double
    {
        guard let value = self[key], value != .null else { return defaultValue }
        return try number(key, value, greaterThan: lowerBound)
    }

    /// A required whole number in `range`.
    public func int(_ key: String, range: ClosedRange<Int>) throws(PluginOptionError) -> Int {
        guard let value = self[key] else { throw missing(key) }
        return try integer(key, value, range: range)
    }

    /// An optional whole number in `range`.
    public func int(_ key: String, default defaultValue: Int, range: ClosedRange<Int>) throws(PluginOptionError) -> Int
    {
        guard let value = self[key], value != .null else { return defaultValue }
        return try integer(key, value, range: range)
    }

    // MARK: Other kinds

    public func bool(_ key: String, default defaultValue: Bool) throws(PluginOptionError) -> Bool {
        guard let value = self[key], value != .null else { return defaultValue }
        guard case .bool(let flag) = value else {
            throw PluginOptionError(
                option: Self.join(path, key), message: "must be true or false, got \(Self.kind(value))")
        }
        return flag
    }

    /// A required non-empty string.
    public func string(_ key: String) throws(PluginOptionError) -> String {
        guard let value = self[key] else { throw missing(key) }
        return try text(key, value)
    }

    /// An optional non-empty string.
    public func string(_ key: String, default defaultValue: String?) throws(PluginOptionError) -> String? {
        guard let value = self[key], value != .null else { return defaultValue }
        return try text(key, value)
    }

    /// An optional list of strings (a single string reads as a list of one).
    public func strings(_ key: String) throws(PluginOptionError) -> [String]? {
        guard let value = self[key], value != .null else { return nil }
        switch value {
        case .string(let one): return [one]
        case .array(let items):
            var out: [String] = []
            for (index, item) in items.enumerated() {
                guard case .string(let text) = item, !text.isEmpty else {
                    throw PluginOptionError(
                        option: "\(Self.join(path, key))[\(index)]",
                        message: "must be a non-empty string, got \(Self.kind(item))")
                }
                out.append(text)
            }
            return out
        default:
            throw PluginOptionError(
                option: Self.join(path, key), message: "must be a list of strings, got \(Self.kind(value))")
        }
    }

    /// An optional nested options object.
    public func object(_ key: String, allowed: Set<String>) throws(PluginOptionError) -> PluginOptions? {
        guard let value = self[key], value != .null else { return nil }
        return try PluginOptions(value, allowed: allowed, path: Self.join(path, key))
    }

    /// An error about `key`, for rules the plugin checks itself.
    public func error(_ key: String?, _ message: String) -> PluginOptionError {
        PluginOptionError(option: key.map { Self.join(path, $0) } ?? (path.isEmpty ? nil : path), message: message)
    }

    // MARK: Helpers

    private func missing(_ key: String) -> PluginOptionError {
        PluginOptionError(option: Self.join(path, key), message: "is required")
    }

    private func number(_ key: String, _ value: JSONValue, greaterThan lowerBound: Double) throws(PluginOptionError)
        -> Double
    {
        let number: Double
        switch value {
        case .int(let v): number = Double(v)
        case .double(let v) where v.isFinite: number = v
        default:
            throw PluginOptionError(option: Self.join(path, key), message: "must be a number, got \(Self.kind(value))")
        }
        guard number > lowerBound else {
            throw PluginOptionError(
                option: Self.join(path, key),
                message: "must be greater than \(Self.format(lowerBound)), got \(Self.format(number))")
        }
        return number
    }

    private func integer(_ key: String, _ value: JSONValue, range: ClosedRange<Int>) throws(PluginOptionError) -> Int {
        let number: Int
        switch value {
        case .int(let v) where v >= Int64(Int.min) && v <= Int64(Int.max): number = Int(v)
        case .double(let v) where v.isFinite && v.rounded() == v && abs(v) < 9e15: number = Int(v)
        default:
            throw PluginOptionError(
                option: Self.join(path, key), message: "must be a whole number, got \(Self.kind(value))")
        }
        guard range.contains(number) else {
            throw PluginOptionError(
                option: Self.join(path, key),
                message: "must be between \(range.lowerBound) and \(range.upperBound), got \(number)")
        }
        return number
    }

    private func text(_ key: String, _ value: JSONValue) throws(PluginOptionError) -> String {
        guard case .string(let text) = value, !text.isEmpty else {
            throw PluginOptionError(
                option: Self.join(path, key), message: "must be a non-empty string, got \(Self.kind(value))")
        }
        return text
    }

    static func join(_ path: String, _ key: String) -> String {
        path.isEmpty ? key : path + "." + key
    }

    static func format(_ number: Double) -> String {
        number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }

    /// How a value is described in messages: its kind and, for scalars, the value.
    static func kind(_ value: JSONValue) -> String {
        switch value {
        case .null: return "nothing"
        case .bool(let v): return "\(v)"
        case .int(let v): return "\(v)"
        case .double(let v): return format(v)
        case .string(let v): return "\"\(v.count > 40 ? String(v.prefix(40)) + "…" : v)\""
        case .array: return "a list"
        case .object: return "a mapping"
        }
    }
}
