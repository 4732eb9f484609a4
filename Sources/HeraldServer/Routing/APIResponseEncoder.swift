import Foundation
import Hummingbird
import NIOCore

/// Encodes the API's response types: JSON with `application/json`, dates as RFC 3339 in UTC with
/// milliseconds (``Timestamps/iso8601(_:)``), property names in snake case, keys in a stable (sorted) order, one line feed at
/// the end. Route handlers return ``Encodable`` values (`ResponseEncodable`) and Hummingbird
/// encodes them through the request context's `responseEncoder`.
public struct APIResponseEncoder: ResponseEncoder, Sendable {
    public init() {}

    public func encode(_ value: some Encodable, from request: Request, context: some RequestContext) throws -> Response {
        try Self.response(value)
    }

    /// The answer for `value` (also used where no request context is at hand: error answers).
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let bytes = try bytes(value)
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The JSON text of `value`, with its final line feed.
    static func bytes(_ value: some Encodable) throws -> [UInt8] {
        var bytes = Array(try makeEncoder().encode(value))
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    private static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Swift's `apnsID`, `jobID`, `nextFailedAfter` are the API's `apns_id`, `job_id`, `next_failed_after`.
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamps.iso8601(date))
        }
        return encoder
    }
}

/// An optional member that is written as `null` when absent (the API documents these members
/// as always present), where a synthesized `Encodable` would leave the key out.
///
/// ```swift
/// struct Answer: ResponseEncodable { @Nullable var reason: String? }   // {"reason":null}
/// ```
@propertyWrapper
public struct Nullable<Value: Encodable & Sendable>: Encodable, Sendable {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue {
            try container.encode(wrappedValue)
        } else {
            try container.encodeNil()
        }
    }
}
