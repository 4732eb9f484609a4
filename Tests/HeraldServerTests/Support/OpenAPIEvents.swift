import Foundation
import HeraldServer
import Testing
import Yams

/// The events Herald posts to tenants' webhooks, as `openapi.yaml`'s `webhooks` describe them:
/// a body is checked against its event's schema (the subset the document uses: `type`, `enum`,
/// `required`, `properties`, `additionalProperties: false`, nested objects).
enum OpenAPIEvents {
    /// The document, parsed once for the test process (the tests that check events read it often).
    static func document() throws -> [String: Any] {
        try #require(try Parsed.shared.document.get() as? [String: Any])
    }

    /// Immutable once made: the parse's result, shared by every test.
    private final class Parsed: @unchecked Sendable {
        static let shared = Parsed()
        let document: Result<Any?, any Error>

        private init() {
            document = Result { try Yams.load(yaml: OpenAPIDocument.text) }
        }
    }

    /// The body schema of the webhook `name` (`jobFinished`, …).
    static func schema(of name: String) throws -> [String: Any] {
        let document = try document()
        let webhooks = try #require(document["webhooks"] as? [String: Any])
        let post = try #require((webhooks[name] as? [String: Any])?["post"] as? [String: Any], "no webhook \(name)")
        let content = (post["requestBody"] as? [String: Any])?["content"] as? [String: Any]
        let json = try #require((content?["application/json"] as? [String: Any])?["schema"] as? [String: Any])
        return try resolve(json, in: document)
    }

    static func resolve(_ schema: [String: Any], in document: [String: Any]) throws -> [String: Any] {
        guard let reference = schema["$ref"] as? String else { return schema }
        let name = try #require(reference.split(separator: "/").last.map(String.init))
        let schemas = (document["components"] as? [String: Any])?["schemas"] as? [String: Any]
        return try #require(schemas?[name] as? [String: Any], "no schema \(name)")
    }

    /// The problems of `value` against `schema` (empty when it conforms), each with its path.
    static func problems(_ value: Any, against schema: [String: Any], at path: String = "body") -> [String] {
        var found: [String] = []
        let types: [String]
        if let one = schema["type"] as? String { types = [one] } else { types = schema["type"] as? [String] ?? [] }
        if !types.isEmpty, !types.contains(where: { matches(value, $0) }) {
            found.append("\(path): \(type(of: value)) is not \(types)")
        }
        if let allowed = schema["enum"] as? [Any], !allowed.contains(where: { "\($0)" == "\(value)" }) {
            found.append("\(path): \(value) is not one of \(allowed)")
        }
        if let object = value as? [String: Any] {
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for name in schema["required"] as? [String] ?? [] where object[name] == nil {
                found.append("\(path).\(name): missing")
            }
            for (name, member) in object {
                if let property = properties[name] as? [String: Any] {
                    found += problems(member, against: property, at: "\(path).\(name)")
                } else if schema["additionalProperties"] as? Bool == false {
                    found.append("\(path).\(name): not in the schema")
                }
            }
        }
        return found
    }

    private static func matches(_ value: Any, _ type: String) -> Bool {
        switch type {
        case "null": return value is NSNull
        case "string": return value is String
        case "integer":
            // (The events hold no boolean, which JSONSerialization would also give as a number.)
            guard let number = value as? NSNumber else { return false }
            return number.doubleValue.rounded() == number.doubleValue
        case "number": return value is NSNumber
        case "boolean": return value is Bool
        case "object": return value is [String: Any]
        case "array": return value is [Any]
        default: return false
        }
    }

    /// Checks a received webhook's body and headers against the document's event `name`.
    static func check(_ body: [UInt8], headers: [String: String], as name: String) throws {
        let json = try JSONSerialization.jsonObject(with: Data(body))
        let problems = problems(json, against: try schema(of: name))
        #expect(problems.isEmpty, "\(name): \(problems)")
        for header in ["x-herald-event", "x-herald-delivery", "x-herald-timestamp", "x-herald-signature"] {
            #expect(headers[header]?.isEmpty == false, "\(name): no \(header)")
        }
    }
}
