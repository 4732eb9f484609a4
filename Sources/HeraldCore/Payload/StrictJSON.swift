import Foundation

/// A JSON value as it was written in a request body: its value and the bytes it spans, so that
/// a payload can be passed on exactly as sent and an error can say where it is.
package struct JSONNode: Sendable {
    package enum Value: Sendable {
        case null
        case bool(Bool)
        /// The number as written (validated JSON number syntax).
        case number(String)
        case string(String)
        case array([JSONNode])
        /// Members in the order written (keys are unique: duplicates are a syntax error).
        case object([(key: String, value: JSONNode)])
    }

    package var value: Value
    /// The byte offsets of the value in the body.
    package var range: Range<Int>

    /// A short name of the kind, for messages ("a string", "an object", …).
    package var kind: String {
        switch value {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

/// Malformed JSON: what is wrong and where (1-based line and column, byte offset).
package struct JSONSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    package var message: String
    package var offset: Int
    package var line: Int
    package var column: Int

    package var description: String { "\(message) at line \(line), column \(column)" }
}

/// A strict JSON (RFC 8259) parser over bytes: one value, optional whitespace around it,
/// no comments, no trailing commas, no duplicate object keys, nesting at most `maximumDepth`.
package struct StrictJSONParser {
    package static let maximumDepth = 64

    private let bytes: [UInt8]
    private var position = 0
    private var depth = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Parses a whole body.
    package static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONNode {
        var parser = StrictJSONParser(bytes)
        parser.skipWhitespace()
        guard parser.position < bytes.count else { throw parser.error("the body is empty; a JSON object was expected") }
        let node = try parser.parseValue()
        parser.skipWhitespace()
        guard parser.position == bytes.count else { throw parser.error("unexpected text after the JSON value") }
        return node
    }

    // MARK: Values

    private mutating func parseValue() throws(JSONSyntaxError) -> JSONNode {
        guard position < bytes.count else { throw error("unexpected end of the body") }
        let start = position
        switch bytes[position] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""):
            let text = try parseString()
            return JSONNode(value: .string(text), range: start..<position)
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return JSONNode(value: .bool(true), range: start..<position)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return JSONNode(value: .bool(false), range: start..<position)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return JSONNode(value: .null, range: start..<position)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try parseNumber()
        default:
            throw error("unexpected character '\(Self.printable(bytes[position]))'")
        }
    }

    private mutating func parseObject() throws(JSONSyntaxError) -> JSONNode {
        let start = position
        try enter()
        position += 1  // {
        var members: [(key: String, value: JSONNode)] = []
        var seen = Set<String>()
        skipWhitespace()
        if peek == UInt8(ascii: "}") {
            position += 1
            depth -= 1
            return JSONNode(value: .object(members), range: start..<position)
        }
        while true {
            skipWhitespace()
            guard peek == UInt8(ascii: "\"") else { throw error("expected a quoted member name") }
            let keyStart = position
            let key = try parseString()
            guard seen.insert(key).inserted else {
                position = keyStart
                throw error("duplicate member name '\(key)'")
            }
            skipWhitespace()
            guard peek == UInt8(ascii: ":") else { throw error("expected ':' after the member name") }
            position += 1
            skipWhitespace()
            let value = try parseValue()
            members.append((key, value))
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","):
                position += 1
                skipWhitespace()
                if peek == UInt8(ascii: "}") { throw error("trailing comma before '}'") }
            case UInt8(ascii: "}"):
                position += 1
                depth -= 1
                return JSONNode(value: .object(members), range: start..<position)
            default:
                throw error("expected ',' or '}' in the object")
            }
        }
    }

    private mutating func parseArray() throws(JSONSyntaxError) -> JSONNode {
        let start = position
        try enter()
        position += 1  // [
        var elements: [JSONNode] = []
        skipWhitespace()
        if peek == UInt8(ascii: "]") {
            position += 1
            depth -= 1
            return JSONNode(value: .array(elements), range: start..<position)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            switch peek {
            case UInt8(ascii: ","):
                position += 1
                skipWhitespace()
                if peek == UInt8(ascii: "]") { throw error("trailing comma before ']'") }
            case UInt8(ascii: "]"):
                position += 1
                depth -= 1
                return JSONNode(value: .array(elements), range: start..<position)
            default:
                throw error("expected ',' or ']' in the array")
            }
        }
    }

    private mutating func enter() throws(JSONSyntaxError) {
        depth += 1
        guard depth <= Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth) levels") }
    }

    private mutating func parseString() throws(JSONSyntaxError) -> String {
        position += 1  // opening quote
        let contentStart = position
        // Fast path: no escapes.
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: bytes[contentStart..<position], as: UTF8.self)
                try checkUTF8(contentStart..<position)
                position += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("control character in a string (escape it)") }
            position += 1
        }
        var out = Array(bytes[contentStart..<position])
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "\""):
                try checkUTF8Bytes(out, at: contentStart)
                position += 1
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                position += 1
                guard position < bytes.count else { throw error("unterminated string") }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): out.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                        else { throw error("unpaired surrogate in a \\u escape") }
                        position += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate in a \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("unpaired surrogate in a \\u escape")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                    out.append(contentsOf: Array(String(Character(unicode)).utf8))
                default:
                    position -= 1
                    throw error("invalid escape '\\\(Self.printable(escape))'")
                }
            default:
                if byte < 0x20 { throw error("control character in a string (escape it)") }
                out.append(byte)
                position += 1
            }
        }
        throw error("unterminated string")
    }

    private mutating func parseHex4() throws(JSONSyntaxError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw error("incomplete \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("invalid hex digit in a \\u escape")
            }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    private mutating func parseNumber() throws(JSONSyntaxError) -> JSONNode {
        let start = position
        if peek == UInt8(ascii: "-") { position += 1 }
        guard let first = peek, Self.isDigit(first) else { throw error("invalid number") }
        if first == UInt8(ascii: "0") {
            position += 1
            if let next = peek, Self.isDigit(next) { throw error("numbers may not have leading zeros") }
        } else {
            while let byte = peek, Self.isDigit(byte) { position += 1 }
        }
        if peek == UInt8(ascii: ".") {
            position += 1
            guard let byte = peek, Self.isDigit(byte) else { throw error("invalid number: digits expected after '.'") }
            while let byte = peek, Self.isDigit(byte) { position += 1 }
        }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            position += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { position += 1 }
            guard let byte = peek, Self.isDigit(byte) else { throw error("invalid number: digits expected in the exponent") }
            while let byte = peek, Self.isDigit(byte) { position += 1 }
        }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        return JSONNode(value: .number(text), range: start..<position)
    }

    private mutating func expectLiteral(_ literal: String) throws(JSONSyntaxError) {
        let expected = Array(literal.utf8)
        guard position + expected.count <= bytes.count, bytes[position..<(position + expected.count)].elementsEqual(expected) else {
            throw error("invalid literal (expected \(literal))")
        }
        position += expected.count
    }

    // MARK: Helpers

    private var peek: UInt8? { position < bytes.count ? bytes[position] : nil }

    private mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private func checkUTF8(_ range: Range<Int>) throws(JSONSyntaxError) {
        // ASCII is the common case; only check when a byte is not ASCII.
        guard bytes[range].contains(where: { $0 >= 0x80 }) else { return }
        try checkUTF8Bytes(Array(bytes[range]), at: range.lowerBound)
    }

    private func checkUTF8Bytes(_ text: [UInt8], at offset: Int) throws(JSONSyntaxError) {
        guard text.contains(where: { $0 >= 0x80 }) else { return }
        if String(validating: text, as: UTF8.self) == nil {
            throw Self.error("a string is not valid UTF-8", at: offset, in: bytes)
        }
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private static func printable(_ byte: UInt8) -> String {
        (0x20..<0x7F).contains(byte) ? String(UnicodeScalar(byte)) : String(format: "\\x%02X", byte)
    }

    private func error(_ message: String) -> JSONSyntaxError {
        Self.error(message, at: position, in: bytes)
    }

    /// An error at a byte offset, with its line and column (columns count characters, 1-based).
    package static func error(_ message: String, at offset: Int, in bytes: [UInt8]) -> JSONSyntaxError {
        var line = 1
        var column = 1
        var index = 0
        let end = min(offset, bytes.count)
        while index < end {
            let byte = bytes[index]
            if byte == 0x0A {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
            index += 1
        }
        return JSONSyntaxError(message: message, offset: offset, line: line, column: column)
    }
}
