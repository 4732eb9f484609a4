import HeraldCore

/// Reads the members of one JSON object of a request, strictly: unknown members are errors, and
/// every error names the member by its path (`notifications[3].priority`).
struct JSONObjectReader {
    /// The object's own path ("" for the body itself).
    let path: String
    let node: JSONNode
    private let members: [String: JSONNode]

    /// - Throws: when `node` is not an object, or has a member not in `allowed` (the first such
    ///   member, in the order written).
    init(_ node: JSONNode, path: String, allowed: [String]) throws(APIError) {
        guard case .object(let list) = node.value else {
            throw APIError.invalidField(path.isEmpty ? "(body)" : path, "must be a JSON object, not \(node.kind)")
        }
        var members: [String: JSONNode] = [:]
        members.reserveCapacity(list.count)
        for (key, value) in list {
            guard allowed.contains(key) else { throw APIError.unknownField(FieldPaths.join(path, key), allowed: allowed) }
            members[key] = value
        }
        self.path = path
        self.node = node
        self.members = members
    }

    func path(_ key: String) -> String { FieldPaths.join(path, key) }

    func has(_ key: String) -> Bool { members[key] != nil }

    /// The member, or nil when absent. An explicit `null` is a value like any other (and the
    /// wrong kind for every field), so that the API accepts exactly what its OpenAPI document
    /// describes: a field is given with a value of its kind, or left out.
    subscript(_ key: String) -> JSONNode? {
        members[key]
    }

    func string(_ key: String, required: Bool = false) throws(APIError) -> String? {
        guard let node = self[key] else {
            if required { throw APIError.missingField(path(key)) }
            return nil
        }
        guard case .string(let text) = node.value else { throw APIError.invalidField(path(key), "must be a string, not \(node.kind)") }
        return text
    }

    /// A whole number (no fraction, no exponent) that fits in `range`.
    func integer(_ key: String, in range: ClosedRange<Int64>) throws(APIError) -> Int64? {
        guard let node = self[key] else { return nil }
        return try Self.integer(node, path: path(key), in: range)
    }

    static func integer(_ node: JSONNode, path: String, in range: ClosedRange<Int64>) throws(APIError) -> Int64 {
        guard case .number(let text) = node.value else {
            throw APIError.invalidField(path, "must be a whole number, not \(node.kind)")
        }
        guard let value = wholeNumber(text) else {
            throw APIError.invalidField(path, "must be a whole number from \(range.lowerBound) to \(range.upperBound), not \(text.prefix(40))")
        }
        guard range.contains(value) else {
            throw APIError.invalidField(path, "must be from \(range.lowerBound) to \(range.upperBound), not \(value)")
        }
        return value
    }

    /// A JSON number with no fractional part as an integer: `12`, and also `12.0` or `1.2e1`
    /// (JSON Schema's reading of "integer"), when it fits exactly. Checked before any conversion.
    static func wholeNumber(_ text: String) -> Int64? {
        if let value = Int64(text) { return value }
        guard let double = Double(text), double.isFinite, double.rounded() == double, abs(double) <= 9_007_199_254_740_992 else {
            return nil
        }
        return Int64(double)
    }

    func number(_ key: String) throws(APIError) -> Double? {
        guard let node = self[key] else { return nil }
        guard case .number(let text) = node.value, let value = Double(text), value.isFinite else {
            throw APIError.invalidField(path(key), "must be a number, not \(node.kind)")
        }
        return value
    }

    func bool(_ key: String) throws(APIError) -> Bool? {
        guard let node = self[key] else { return nil }
        guard case .bool(let value) = node.value else { throw APIError.invalidField(path(key), "must be true or false, not \(node.kind)") }
        return value
    }

    /// A flag written as `1`/`0` (Apple's spelling) or `true`/`false`.
    func flag(_ key: String) throws(APIError) -> Bool? {
        guard let node = self[key] else { return nil }
        switch node.value {
        case .bool(let value): return value
        case .number(let text) where Self.wholeNumber(text) == 1: return true
        case .number(let text) where Self.wholeNumber(text) == 0: return false
        default: throw APIError.invalidField(path(key), "must be 1, 0, true or false, not \(node.kind)")
        }
    }

    func object(_ key: String, allowed: [String]) throws(APIError) -> JSONObjectReader? {
        guard let node = self[key] else { return nil }
        return try JSONObjectReader(node, path: path(key), allowed: allowed)
    }

    func array(_ key: String) throws(APIError) -> [JSONNode]? {
        guard let node = self[key] else { return nil }
        guard case .array(let elements) = node.value else { throw APIError.invalidField(path(key), "must be an array, not \(node.kind)") }
        return elements
    }

    func strings(_ key: String) throws(APIError) -> [String]? {
        guard let elements = try array(key) else { return nil }
        var out: [String] = []
        out.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            guard case .string(let text) = element.value else {
                throw APIError.invalidField(path(key) + "[\(index)]", "must be a string, not \(element.kind)")
            }
            out.append(text)
        }
        return out
    }

    /// Any JSON value, as a ``JSONValue``.
    func json(_ key: String) throws(APIError) -> JSONValue? {
        guard let node = self[key] else { return nil }
        return try Self.jsonValue(node, path: path(key))
    }

    /// A JSON object member, as a ``JSONValue``.
    func jsonObject(_ key: String) throws(APIError) -> JSONValue? {
        guard let node = self[key] else { return nil }
        guard case .object = node.value else { throw APIError.invalidField(path(key), "must be a JSON object, not \(node.kind)") }
        return try Self.jsonValue(node, path: path(key))
    }

    /// `node` as a ``JSONValue``. A number is kept as an integer when it is one, else as a
    /// double; a number no double can hold (`1e400`) is refused rather than changed.
    static func jsonValue(_ node: JSONNode, path: String) throws(APIError) -> JSONValue {
        switch node.value {
        case .null: return .null
        case .bool(let value): return .bool(value)
        case .number(let text):
            if let int = Int64(text) { return .int(int) }
            guard let double = Double(text), double.isFinite else {
                throw APIError.invalidField(path, "the number \(text.prefix(40)) is out of range (a double precision number is the most)")
            }
            return .double(double)
        case .string(let text): return .string(text)
        case .array(let elements):
            var values: [JSONValue] = []
            values.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() { values.append(try jsonValue(element, path: path + "[\(index)]")) }
            return .array(values)
        case .object(let members):
            var values: [(String, JSONValue)] = []
            values.reserveCapacity(members.count)
            for (key, value) in members { values.append((key, try jsonValue(value, path: FieldPaths.join(path, key)))) }
            return .object(values)
        }
    }
}
