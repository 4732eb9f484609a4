import Foundation
import HeraldCore
import Hummingbird
import NIOCore

/// Request bodies, read within a byte limit and parsed by the strict JSON parser.
enum RequestBodies {
    /// The request body as JSON, within `limit` bytes (415 without a JSON content type, 413
    /// beyond the limit, 400 for malformed JSON).
    static func json(_ request: Request, limit: Int) async throws(APIError) -> (bytes: [UInt8], root: JSONNode) {
        let contentType = request.headers[.contentType]
        guard let contentType, isJSON(contentType) else { throw APIError.unsupportedMediaType(contentType) }
        let bytes = try await raw(request, limit: limit)
        do {
            return (bytes, try StrictJSONParser.parse(bytes))
        } catch {
            throw APIError.malformedJSON(error)
        }
    }

    /// An optional JSON object body (`POST /admin/reload`'s `{"revoke": true}`): nil when empty.
    static func optionalJSON(_ request: Request, limit: Int) async throws(APIError) -> JSONNode? {
        let bytes = try await raw(request, limit: limit)
        guard !bytes.isEmpty else { return nil }
        guard let contentType = request.headers[.contentType], isJSON(contentType) else {
            throw APIError.unsupportedMediaType(request.headers[.contentType])
        }
        do {
            return try StrictJSONParser.parse(bytes)
        } catch {
            throw APIError.malformedJSON(error)
        }
    }

    /// The raw body, within `limit` bytes (413 beyond).
    static func raw(_ request: Request, limit: Int) async throws(APIError) -> [UInt8] {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit {
            throw APIError.bodyTooLarge(limit: limit)
        }
        do {
            let buffer = try await request.body.collect(upTo: limit)
            return Array(buffer.readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge(limit: limit)
        } catch {
            throw APIError(status: .badRequest, code: "body_unreadable", message: "the request body could not be read")
        }
    }

    static func isJSON(_ contentType: String) -> Bool {
        let media = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        return media == "application/json" || (media?.hasPrefix("application/") == true && media?.hasSuffix("+json") == true)
    }
}
