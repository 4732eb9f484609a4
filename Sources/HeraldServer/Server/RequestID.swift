import Foundation
import HTTPTypes
import Logging

/// The ID of one API request: every answer carries it as `x-request-id`, and every log line
/// about the request has it as `herald.request-id`, so that an answer that says only "see the
/// log" can be matched to the detail an operator needs.
///
/// A caller may send its own `x-request-id` (1 to 128 of `A-Z a-z 0-9 . _ : -`); anything else
/// is replaced by a fresh random one.
enum RequestID {
    static let header = HTTPField.Name("x-request-id")!
    static let maximumLength = 128

    /// The ID of the request the current task serves (set by ``APIMiddleware``).
    @TaskLocal static var current: String?

    /// `logger` with the current request's ID as `herald.request-id`, when there is one.
    static func logger(_ logger: Logger) -> Logger {
        var logger = logger
        if let current { logger[metadataKey: "herald.request-id"] = "\(current)" }
        return logger
    }

    /// The caller's ID if it is a sane one, else a new one.
    static func accept(_ offered: String?) -> String {
        if let offered, isAcceptable(offered) { return offered }
        return make()
    }

    static func isAcceptable(_ value: String) -> Bool {
        let bytes = value.utf8
        guard !bytes.isEmpty, bytes.count <= maximumLength else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
    }

    /// 16 random bytes as 32 lowercase hex digits.
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        let high = generator.next() as UInt64
        let low = generator.next() as UInt64
        return hex(high) + hex(low)
    }

    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
