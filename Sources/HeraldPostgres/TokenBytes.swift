import HeraldCore
import NIOCore
import PostgresNIO

/// A device token as PostgreSQL's `bytea`: its bytes, half the size of its hex digits, which the
/// server stores without checking them as text. A batch's chunks keep their items' tokens so
/// (`job_chunk.token_bytes`); the token goes in from its hex form and comes out into it.
struct TokenBytes: PostgresNonThrowingEncodable, PostgresDecodable, Sendable {
    let token: DeviceToken

    init(_ token: DeviceToken) { self.token = token }

    static var psqlType: PostgresDataType { .bytea }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: token.byteCount) { token.copyBytes(to: $0) }
    }

    /// A token of no bytes is not a token (``DeviceToken`` needs at least one): the chunk is
    /// corrupt, and so is one longer than a token can be.
    init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard type == .bytea, format == .binary else { throw PostgresDecodingError.Code.typeMismatch }
        guard let token = buffer.withUnsafeReadableBytes({ Self.token($0) }) else { throw PostgresDecodingError.Code.failure }
        buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
        self.token = token
    }

    /// The token of `bytes`; nil when they are none or more than a token can hold.
    static func token(_ bytes: UnsafeRawBufferPointer) -> DeviceToken? {
        guard bytes.count > 0, bytes.count <= DeviceToken.maximumHexLength / 2 else { return nil }
        return DeviceToken(bytes: bytes)
    }
}
