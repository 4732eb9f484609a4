/// A fast JSON syntax check that allocates nothing: is this text one JSON object?
///
/// The sandbox checks every payload; a full parse per request would cost more than everything
/// else it does, so this only validates the grammar (RFC 8259), with a bounded nesting depth.
enum JSONSyntax {
    static let maximumDepth = 64

    static func isObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var scanner = Scanner(bytes: bytes)
        scanner.skipWhitespace()
        guard scanner.peek() == UInt8(ascii: "{") else { return false }
        guard scanner.value(depth: 0) else { return false }
        scanner.skipWhitespace()
        return scanner.index == bytes.count
    }

    static func isObject(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { isObject($0) }
    }

    /// True when `needle` occurs in `bytes` (a plain byte search).
    static func contains(_ needle: StaticString, in bytes: UnsafeRawBufferPointer) -> Bool {
        let n = needle.utf8CodeUnitCount
        guard n > 0, bytes.count >= n else { return false }
        let first = needle.utf8Start[0]
        var i = 0
        while i <= bytes.count - n {
            if bytes[i] == first {
                var j = 1
                while j < n, bytes[i + j] == needle.utf8Start[j] { j += 1 }
                if j == n { return true }
            }
            i += 1
        }
        return false
    }

    private struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < JSONSyntax.maximumDepth else { return false }
            skipWhitespace()
            guard let byte = peek() else { return false }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            default: return false
            }
        }

        mutating func object(depth: Int) -> Bool {
            index += 1  // {
            skipWhitespace()
            if peek() == UInt8(ascii: "}") {
                index += 1
                return true
            }
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\""), string() else { return false }
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { return false }
                index += 1
                guard value(depth: depth + 1) else { return false }
                skipWhitespace()
                switch peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"):
                    index += 1
                    return true
                default: return false
                }
            }
        }

        mutating func array(depth: Int) -> Bool {
            index += 1  // [
            skipWhitespace()
            if peek() == UInt8(ascii: "]") {
                index += 1
                return true
            }
            while true {
                guard value(depth: depth + 1) else { return false }
                skipWhitespace()
                switch peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return true
                default: return false
                }
            }
        }

        mutating func string() -> Bool {
            index += 1  // opening quote
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return true
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escaped = peek() else { return false }
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                        UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        index += 1
                    case UInt8(ascii: "u"):
                        index += 1
                        for _ in 0..<4 {
                            guard let h = peek(), isHex(h) else { return false }
                            index += 1
                        }
                    default: return false
                    }
                case 0x00..<0x20: return false
                default: index += 1
                }
            }
            return false
        }

        mutating func number() -> Bool {
            if peek() == UInt8(ascii: "-") { index += 1 }
            guard let first = peek(), isDigit(first) else { return false }
            if first == UInt8(ascii: "0") {
                index += 1
            } else {
                while let d = peek(), isDigit(d) { index += 1 }
            }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard let d = peek(), isDigit(d) else { return false }
                while let d = peek(), isDigit(d) { index += 1 }
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard let d = peek(), isDigit(d) else { return false }
                while let d = peek(), isDigit(d) { index += 1 }
            }
            return true
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let n = word.utf8CodeUnitCount
            guard bytes.count - index >= n else { return false }
            for k in 0..<n where bytes[index + k] != word.utf8Start[k] { return false }
            index += n
            return true
        }

        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

        func isHex(_ b: UInt8) -> Bool {
            isDigit(b) || (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "f"))
                || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "F"))
        }
    }
}
