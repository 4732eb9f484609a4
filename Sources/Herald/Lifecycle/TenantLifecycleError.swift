import Foundation
import HeraldConfig
import HeraldCore

/// Why a lifecycle change (create, update, delete, API keys) was refused. Nothing was changed:
/// no file written (or every file written put back), the running tenant untouched.
public struct TenantLifecycleError: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The tenant ID (or an API key name) is taken.
        case conflict
        /// No such tenant (or API key).
        case notFound = "not_found"
        /// A setting or the credential does not validate; ``field`` names it in the tenant file.
        case invalid
        /// The files could not be written or moved.
        case writeFailed = "write_failed"
    }

    public var code: Code
    /// What is wrong, naming the field and the rule; never secret material.
    public var message: String
    /// The field in the tenant file's terms (`topics[1]`, `auth.token.key_id`, `pool.connections`),
    /// when one is to blame.
    public var field: String?

    init(_ code: Code, _ message: String, field: String? = nil) {
        self.code = code
        self.message = message
        self.field = field
    }

    public var description: String { (field.map { "\($0): " } ?? "") + message }

    static func conflict(_ message: String) -> TenantLifecycleError { .init(.conflict, message) }
    static func notFound(_ message: String) -> TenantLifecycleError { .init(.notFound, message) }
    static func invalid(_ message: String, field: String?) -> TenantLifecycleError { .init(.invalid, message, field: field) }
    static func writeFailed(_ message: String) -> TenantLifecycleError { .init(.writeFailed, message) }

    /// The first error of a tenant file that did not parse, with its field.
    static func invalid(_ failure: TenantLoadFailure) -> TenantLifecycleError {
        guard let first = failure.errors.first else { return .invalid("the tenant file is not valid", field: nil) }
        let more = failure.errors.count > 1 ? " (and \(failure.errors.count - 1) more problems)" : ""
        return .invalid(first.message + more, field: first.field.isEmpty ? nil : first.field)
    }

    /// A full validation's refusal (``ReloadCoordinator/validate(_:)`` messages name the file and
    /// the field as `file: field: message`): the field is read back from the message.
    static func validation(_ message: String, file: String) -> TenantLifecycleError {
        var rest = Substring(message)
        if rest.hasPrefix(file) {
            // `file: …` or `file:line:column: …`
            rest = rest.dropFirst(file.count)
            while let first = rest.first, first == ":" || first.isNumber { rest = rest.dropFirst() }
            rest = rest.drop { $0 == " " }
        }
        let text = String(rest)
        for section in ["auth", "endpoints", "plugins", "pool", "delivery", "topics", "webhook", "proxy"] where text.hasPrefix(section) {
            if let colon = text.firstIndex(of: ":") {
                let field = String(text[..<colon])
                if !field.contains(" ") {
                    return .invalid(String(text[text.index(after: colon)...]).trimmingCharacters(in: .whitespaces), field: field)
                }
            }
            return .invalid(text, field: section)
        }
        return .invalid(text, field: nil)
    }
}
