import Foundation
import Hummingbird
import MultipartKit
import NIOCore

/// A submitted console form (`multipart/form-data`, what every console form posts, so that the
/// credential forms can carry files): its fields by name, each with its bytes and, for a file
/// input, the file's name.
///
/// Everything in it is untrusted: the body is read within a byte limit, at most
/// ``maximumParts`` parts are kept, a field named twice keeps its first value, and text fields
/// are read as UTF-8 or refused.
struct ConsoleForm: Sendable {
    struct Part: Sendable {
        var bytes: [UInt8]
        /// The file name a file input sent (nil for a text field).
        var filename: String?
    }

    static let maximumParts = 32

    private(set) var parts: [String: Part] = [:]

    init(parts: [String: Part]) {
        self.parts = parts
    }

    /// A text field, trimmed; nil when absent or empty.
    func text(_ name: String) throws(ConsoleError) -> String? {
        guard let part = parts[name] else { return nil }
        guard let text = String(validating: part.bytes, as: UTF8.self) else {
            throw ConsoleError.field(name, "must be text (UTF-8)")
        }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.isEmpty ? nil : trimmed
    }

    /// A required text field.
    func required(_ name: String) throws(ConsoleError) -> String {
        guard let value = try text(name) else { throw ConsoleError.field(name, "is required") }
        return value
    }

    /// An uploaded file's bytes; nil when no file was chosen (browsers send an empty part).
    func file(_ name: String) -> [UInt8]? {
        guard let part = parts[name], !part.bytes.isEmpty else { return nil }
        return part.bytes
    }

    /// A checkbox: present and not "off".
    func flag(_ name: String) -> Bool {
        guard let part = parts[name] else { return false }
        return String(decoding: part.bytes, as: UTF8.self) != "off"
    }

    /// Reads and parses the request's form within `limit` bytes.
    static func read(_ request: Request, limit: Int) async throws(ConsoleError) -> ConsoleForm {
        guard let contentType = request.headers[.contentType], let boundary = boundary(of: contentType) else {
            throw ConsoleError.badRequest("the form must be sent as multipart/form-data")
        }
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit {
            throw ConsoleError.badRequest("the form is larger than \(limit) bytes")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw ConsoleError.badRequest("the form is larger than \(limit) bytes")
        } catch {
            throw ConsoleError.badRequest("the form could not be read")
        }
        return try parse(buffer, boundary: boundary)
    }

    /// The `boundary` parameter of a `multipart/form-data` content type (1 to 70 characters, as
    /// RFC 2046 allows); nil for any other content type.
    static func boundary(of contentType: String) -> String? {
        let parameters = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard parameters.first?.lowercased() == "multipart/form-data" else { return nil }
        for parameter in parameters.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            guard (1...70).contains(value.utf8.count), !value.contains(where: { $0.isNewline }) else { return nil }
            return value
        }
        return nil
    }

    static func parse(_ buffer: ByteBuffer, boundary: String) throws(ConsoleError) -> ConsoleForm {
        // MultipartParser calls back synchronously inside execute(); the state lives in this call.
        final class Collector {
            var parts: [String: Part] = [:]
            var count = 0
            var headers: [(String, String)] = []
            var body: [UInt8] = []
        }
        let collector = Collector()
        let parser = MultipartParser(boundary: boundary)
        parser.onHeader = { name, value in collector.headers.append((name, value)) }
        parser.onBody = { buffer in collector.body.append(contentsOf: buffer.readableBytesView) }
        parser.onPartComplete = {
            defer {
                collector.headers = []
                collector.body = []
            }
            collector.count += 1
            guard collector.count <= maximumParts else { return }
            guard let disposition = collector.headers.first(where: { $0.0.lowercased() == "content-disposition" })?.1,
                let name = parameter("name", in: disposition), collector.parts[name] == nil
            else { return }
            collector.parts[name] = Part(bytes: collector.body, filename: parameter("filename", in: disposition))
        }
        do {
            try parser.execute(buffer)
        } catch {
            throw ConsoleError.badRequest("the form is not valid multipart/form-data")
        }
        guard collector.count <= maximumParts else {
            throw ConsoleError.badRequest("the form has more than \(maximumParts) fields")
        }
        return ConsoleForm(parts: collector.parts)
    }

    /// A parameter of a `Content-Disposition` header (`name="key_file"`).
    static func parameter(_ key: String, in header: String) -> String? {
        for item in header.split(separator: ";").dropFirst() {
            let pair = item.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingCharacters(in: .whitespaces).lowercased() == key else { continue }
            var value = pair[1].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            return value
        }
        return nil
    }
}

/// Why a console request was refused: shown on the page, naming the form field when one is at fault.
struct ConsoleError: Error, Sendable {
    var status: HTTPResponse.Status
    var message: String
    /// The form field at fault, when there is one.
    var field: String?

    static func field(_ name: String, _ rule: String) -> ConsoleError {
        ConsoleError(status: .unprocessableContent, message: "\(name) \(rule)", field: name)
    }

    static func badRequest(_ message: String) -> ConsoleError {
        ConsoleError(status: .badRequest, message: message)
    }

    static let forbidden = ConsoleError(
        status: .forbidden, message: "the form is stale or did not come from this console; reload the page and try again")
    static let notFound = ConsoleError(status: .notFound, message: "no such page or tenant")
    /// The session's account lacks `permission` (its role is too low).
    static func lacks(_ permission: AdminPermission, _ actor: AdminActor) -> ConsoleError {
        ConsoleError(
            status: .forbidden,
            message: "\(permission.rawValue) is required: account \(actor.account) has the \(actor.role.rawValue) role.")
    }
}
