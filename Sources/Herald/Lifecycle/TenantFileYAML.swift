import Foundation
import HeraldCore
import Yams

/// JSON values as tenant file YAML: strings double-quoted (so that `"yes"`, `"1.0"` or `"null"`
/// stay strings), numbers, booleans and null plain, arrays and objects in block style.
enum TenantFileYAML {
    static func node(_ value: JSONValue) -> Node {
        switch value {
        case .null: return Node("null", .implicit, .plain)
        case .bool(let flag): return Node(flag ? "true" : "false", .implicit, .plain)
        case .int(let number): return Node(String(number), .implicit, .plain)
        case .double(let number): return Node(String(number), .implicit, .plain)
        case .string(let text): return Node(text, .implicit, .doubleQuoted)
        case .array(let items): return Node(items.map(node))
        case .object(let members): return .mapping(Node.Mapping(members.map { (key($0.0), node($0.1)) }))
        }
    }

    static func key(_ name: String) -> Node {
        let plain = !name.isEmpty && name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_")
        }
        return Node(name, .implicit, plain ? .plain : .doubleQuoted)
    }

    static func text(_ root: Node, header: String? = nil) throws -> String {
        let body = try Yams.serialize(node: root, indent: 2, width: -1, allowUnicode: true)
        guard let header else { return body }
        return header.split(separator: "\n", omittingEmptySubsequences: false).map { "# " + $0 }.joined(separator: "\n") + "\n" + body
    }
}
