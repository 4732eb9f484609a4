import CNGHTTP2
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which end of the connection an engine speaks for.
public enum HTTP2EngineMode: Sendable {
    /// Sends the connection preface and opens odd-numbered streams.
    case client
    /// Expects the client preface and answers streams.
    case server
}

/// How one header field is encoded by the HPACK deflater.
public enum HTTP2HeaderIndexing: Sendable, Hashable {
    /// Let nghttp2's deflater choose. It indexes most fields, never indexes `:path`,
    /// `content-length` and a few others, and sends `authorization` (and short `cookie`s) as
    /// never-indexed literals on its own.
    case automatic
    /// A never-indexed literal (`NGHTTP2_NV_FLAG_NO_INDEX`): the field never enters either
    /// side's dynamic table, nor any intermediary's.
    case neverIndexed
}

/// One header field, as sent or received.
public struct HTTP2Header: Sendable, Hashable {
    public var name: String
    /// The value as text (a value given as bytes is read as UTF-8).
    public var value: String {
        get {
            switch storage {
            case .text(let text): text
            case .bytes(let bytes): String(decoding: bytes, as: UTF8.self)
            }
        }
        set { storage = .text(newValue) }
    }
    /// Outbound: how to encode it. Inbound: `.neverIndexed` when the peer sent it as a
    /// never-indexed literal, else `.automatic`.
    public var indexing: HTTP2HeaderIndexing
    private var storage: Value

    private enum Value: Sendable {
        case text(String)
        case bytes([UInt8])
    }

    public init(name: String, value: String, indexing: HTTP2HeaderIndexing = .automatic) {
        self.name = name
        self.storage = .text(value)
        self.indexing = indexing
    }

    /// A field whose value is given as its bytes. A sender that writes a new value for every
    /// request into one array it keeps (dropping the previous request's headers first, so that
    /// the array is not shared when it is written) makes no string for that value.
    public init(name: String, utf8 value: [UInt8], indexing: HTTP2HeaderIndexing = .automatic) {
        self.name = name
        self.storage = .bytes(value)
        self.indexing = indexing
    }

    /// The value's length in bytes.
    var valueCount: Int {
        switch storage {
        case .text(let text): text.utf8.count
        case .bytes(let bytes): bytes.count
        }
    }

    /// Calls `body` with the value's bytes (a text value without contiguous storage is copied
    /// into a temporary array).
    func withValueBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        switch storage {
        case .text(let text):
            if let result = text.utf8.withContiguousStorageIfAvailable(body) { return result }
            return Array(text.utf8).withUnsafeBufferPointer(body)
        case .bytes(let bytes):
            return bytes.withUnsafeBufferPointer(body)
        }
    }

    /// Equal when name, value bytes and indexing are, whichever form the value was given in.
    public static func == (left: HTTP2Header, right: HTTP2Header) -> Bool {
        left.name == right.name && left.indexing == right.indexing
            && left.withValueBytes { l in right.withValueBytes { r in l.elementsEqual(r) } }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(indexing)
        withValueBytes { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// True when `value` is a valid HTTP/2 field value (nghttp2's check: no NUL, CR or LF, no
    /// whitespace at either end).
    public static func isValidValue(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { bytes in
            guard let base = bytes.baseAddress else { return true }
            return nghttp2_check_header_value(base, bytes.count) != 0
        }
    }
}

/// An HTTP/2 stream identifier (RFC 9113 5.1.1); 0 is the connection.
public typealias HTTP2StreamNumber = Int32

/// An HTTP/2 error code (RFC 9113 7), as carried by RST_STREAM and GOAWAY.
public struct HTTP2ErrorCode: Sendable, Hashable, CustomStringConvertible {
    public var rawValue: UInt32
    public init(_ rawValue: UInt32) { self.rawValue = rawValue }

    public static let noError = HTTP2ErrorCode(0x0)
    public static let protocolError = HTTP2ErrorCode(0x1)
    public static let internalError = HTTP2ErrorCode(0x2)
    public static let flowControlError = HTTP2ErrorCode(0x3)
    public static let settingsTimeout = HTTP2ErrorCode(0x4)
    public static let streamClosed = HTTP2ErrorCode(0x5)
    public static let frameSizeError = HTTP2ErrorCode(0x6)
    public static let refusedStream = HTTP2ErrorCode(0x7)
    public static let cancel = HTTP2ErrorCode(0x8)
    public static let compressionError = HTTP2ErrorCode(0x9)
    public static let connectError = HTTP2ErrorCode(0xa)
    public static let enhanceYourCalm = HTTP2ErrorCode(0xb)
    public static let inadequateSecurity = HTTP2ErrorCode(0xc)
    public static let http11Required = HTTP2ErrorCode(0xd)

    public var description: String {
        switch rawValue {
        case 0x0: return "NO_ERROR"
        case 0x1: return "PROTOCOL_ERROR"
        case 0x2: return "INTERNAL_ERROR"
        case 0x3: return "FLOW_CONTROL_ERROR"
        case 0x4: return "SETTINGS_TIMEOUT"
        case 0x5: return "STREAM_CLOSED"
        case 0x6: return "FRAME_SIZE_ERROR"
        case 0x7: return "REFUSED_STREAM"
        case 0x8: return "CANCEL"
        case 0x9: return "COMPRESSION_ERROR"
        case 0xa: return "CONNECT_ERROR"
        case 0xb: return "ENHANCE_YOUR_CALM"
        case 0xc: return "INADEQUATE_SECURITY"
        case 0xd: return "HTTP_1_1_REQUIRED"
        default: return "0x\(String(rawValue, radix: 16))"
        }
    }
}

/// One SETTINGS parameter (RFC 9113 6.5.2).
public struct HTTP2Setting: Sendable, Hashable {
    public var identifier: UInt16
    public var value: UInt32
    public init(identifier: UInt16, value: UInt32) {
        self.identifier = identifier
        self.value = value
    }

    public static func headerTableSize(_ value: UInt32) -> HTTP2Setting { .init(identifier: 0x1, value: value) }
    public static func enablePush(_ value: UInt32) -> HTTP2Setting { .init(identifier: 0x2, value: value) }
    public static func maxConcurrentStreams(_ value: UInt32) -> HTTP2Setting { .init(identifier: 0x3, value: value) }
    public static func initialWindowSize(_ value: UInt32) -> HTTP2Setting { .init(identifier: 0x4, value: value) }
    public static func maxFrameSize(_ value: UInt32) -> HTTP2Setting { .init(identifier: 0x5, value: value) }
    public static func maxHeaderListSize(_ value: UInt32) -> HTTP2Setting { .init(identifier: 0x6, value: value) }

    public static let maxConcurrentStreamsIdentifier: UInt16 = 0x3
}

/// What the peer did, as the engine reports it to its ``HTTP2EngineDelegate``.
///
/// Events are recorded while nghttp2 parses input (or produces output) and delivered only
/// after it returned, so a delegate may call back into the engine freely.
public enum HTTP2Event: Sendable {
    /// A complete header block (HEADERS plus any CONTINUATION) on a stream. The first block of
    /// a stream is the request (server) or response (client) head; a later one is trailers.
    /// The block's bytes (like a DATA event's) share one buffer with the other blocks of the
    /// same read: keeping a block past the event is fine, the next read then starts a new one.
    case headers(streamID: HTTP2StreamNumber, headers: HTTP2HeaderBlock, endStream: Bool)
    /// The payload of one DATA frame (possibly empty, e.g. a bare END_STREAM).
    case data(streamID: HTTP2StreamNumber, bytes: ByteBuffer, endStream: Bool)
    /// The peer reset the stream.
    case resetReceived(streamID: HTTP2StreamNumber, errorCode: HTTP2ErrorCode)
    /// The stream is closed and its state released (after the answer, a reset either way, or
    /// when the connection ends). Every stream opened ends with exactly one of these. A server
    /// also gets one (REFUSED_STREAM, with no headers event before it) for a stream nghttp2
    /// refused on arrival because the peer opened it beyond the MAX_CONCURRENT_STREAMS last
    /// sent and not yet acknowledged.
    case streamClosed(streamID: HTTP2StreamNumber, errorCode: HTTP2ErrorCode)
    /// The peer's SETTINGS (not an ACK), in the order the frame carried them.
    case settings([HTTP2Setting])
    /// The peer acknowledged our SETTINGS.
    case settingsAcknowledged
    /// The peer sent GOAWAY: streams above `lastStreamID` were not processed.
    case goAway(lastStreamID: HTTP2StreamNumber, errorCode: HTTP2ErrorCode, debugData: ByteBuffer)
    /// The peer answered our PING.
    case pingAcknowledged(UInt64)
}

/// Why the engine gave up on a connection or refused a call.
public struct HTTP2EngineError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case library(Int32)
        case headerListTooLarge(limit: Int)
        case bodyTooLarge(limit: Int)
        case tooManyStreams(limit: Int)
        case notActive
        case wrongMode
        case invalidHeader
    }

    private let code: Code

    /// A libnghttp2 call failed with this error code (`nghttp2_strerror` explains it).
    public static func library(_ code: Int32) -> HTTP2EngineError { .init(code: .library(code)) }
    /// The peer sent a header block above the configured limit.
    public static func headerListTooLarge(limit: Int) -> HTTP2EngineError { .init(code: .headerListTooLarge(limit: limit)) }
    /// The peer sent a body above the configured limit on one stream.
    public static func bodyTooLarge(limit: Int) -> HTTP2EngineError { .init(code: .bodyTooLarge(limit: limit)) }
    /// The peer kept more streams open than the engine tracks.
    public static func tooManyStreams(limit: Int) -> HTTP2EngineError { .init(code: .tooManyStreams(limit: limit)) }
    /// The engine has no session (not added to a pipeline, or the connection is gone).
    public static let notActive = HTTP2EngineError(code: .notActive)
    /// A client-only call on a server engine, or the reverse.
    public static let wrongMode = HTTP2EngineError(code: .wrongMode)
    /// A header name or value holds bytes HTTP/2 forbids (NUL, CR, LF; upper case names).
    public static let invalidHeader = HTTP2EngineError(code: .invalidHeader)

    /// The libnghttp2 error code, when a library call failed.
    public var libraryCode: Int32? {
        if case .library(let code) = code { return code }
        return nil
    }

    public var description: String {
        switch code {
        case .library(let value): return "libnghttp2 error \(value) (\(HTTP2Library.describe(value)))"
        case .headerListTooLarge(let limit): return "the peer's header block exceeds \(limit) bytes"
        case .bodyTooLarge(let limit): return "the peer's body exceeds \(limit) bytes on one stream"
        case .tooManyStreams(let limit): return "the peer opened more than \(limit) streams at once"
        case .notActive: return "the HTTP/2 engine has no session"
        case .wrongMode: return "the call does not fit the engine's mode (client or server)"
        case .invalidHeader: return "a header name or value holds bytes HTTP/2 forbids"
        }
    }
}

/// A received header block (HEADERS plus any CONTINUATION): every field's name and value bytes,
/// as nghttp2 decoded them, in one buffer. Reading it makes no `String` unless asked to: the
/// hot paths look fields up as bytes (``forEachField(_:)``, ``withValue(of:_:)``); iterating
/// it as a collection yields ``HTTP2Header`` values (Strings made on access).
///
/// Storage: for each field, in order, the name length and value length (`UInt32`, native byte
/// order), a flags byte (1: never indexed), the name bytes, the value bytes.
public struct HTTP2HeaderBlock: Sendable, Collection, CustomStringConvertible {
    public struct Index: Comparable, Sendable {
        fileprivate let offset: Int
        public static func < (lhs: Index, rhs: Index) -> Bool { lhs.offset < rhs.offset }
    }

    static let entryOverhead = 9
    static let neverIndexedFlag: UInt8 = 1

    private let storage: ByteBuffer
    /// The number of fields.
    public let count: Int

    /// `storage` holds exactly the block's entries (its readable bytes), `count` of them.
    init(storage: ByteBuffer, count: Int) {
        self.storage = storage
        self.count = count
    }

    /// A block holding `headers`, in order (tests, and callers that build one by hand).
    public init(_ headers: [HTTP2Header]) {
        var buffer = ByteBuffer()
        for header in headers {
            buffer.writeInteger(UInt32(truncatingIfNeeded: header.name.utf8.count), endianness: .host)
            buffer.writeInteger(UInt32(truncatingIfNeeded: header.valueCount), endianness: .host)
            buffer.writeInteger(header.indexing == .neverIndexed ? Self.neverIndexedFlag : 0)
            buffer.writeString(header.name)
            header.withValueBytes { _ = buffer.writeBytes($0) }
        }
        self.init(storage: buffer, count: headers.count)
    }

    /// Appends one field's entry to `buffer` (the session's arena).
    /// One write per field (each ByteBuffer write checks uniqueness and capacity).
    static func append(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, neverIndexed: Bool, to buffer: inout ByteBuffer) {
        let total = entryOverhead + name.count + value.count
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { out in
            out.storeBytes(of: UInt32(truncatingIfNeeded: name.count), toByteOffset: 0, as: UInt32.self)
            out.storeBytes(of: UInt32(truncatingIfNeeded: value.count), toByteOffset: 4, as: UInt32.self)
            out.storeBytes(of: neverIndexed ? neverIndexedFlag : 0, toByteOffset: 8, as: UInt8.self)
            if let source = name.baseAddress, name.count > 0 {
                (out.baseAddress! + entryOverhead).copyMemory(from: source, byteCount: name.count)
            }
            if let source = value.baseAddress, value.count > 0 {
                (out.baseAddress! + entryOverhead + name.count).copyMemory(from: source, byteCount: value.count)
            }
            return total
        }
    }

    public var startIndex: Index { Index(offset: 0) }
    public var endIndex: Index { Index(offset: storage.readableBytes) }

    /// The name and value lengths of the entry at `offset`; traps (like an array's subscript)
    /// for an index that is not one of this block's.
    private static func lengths(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> (name: Int, value: Int) {
        precondition(offset >= 0 && offset + entryOverhead <= bytes.count, "HTTP2HeaderBlock index out of range")
        let name = Int(bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        let value = Int(bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
        precondition(offset + entryOverhead + name + value <= bytes.count, "HTTP2HeaderBlock index out of range")
        return (name, value)
    }

    public func index(after i: Index) -> Index {
        storage.withUnsafeReadableBytes { bytes in
            let (nameLength, valueLength) = Self.lengths(bytes, at: i.offset)
            return Index(offset: i.offset + Self.entryOverhead + nameLength + valueLength)
        }
    }

    public subscript(position: Index) -> HTTP2Header {
        storage.withUnsafeReadableBytes { bytes in
            let (nameLength, valueLength) = Self.lengths(bytes, at: position.offset)
            let flags = bytes[position.offset + 8]
            let nameStart = position.offset + Self.entryOverhead
            let name = UnsafeRawBufferPointer(rebasing: bytes[nameStart..<(nameStart + nameLength)])
            let value = UnsafeRawBufferPointer(rebasing: bytes[(nameStart + nameLength)..<(nameStart + nameLength + valueLength)])
            return HTTP2Header(
                name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self),
                indexing: flags & Self.neverIndexedFlag != 0 ? .neverIndexed : .automatic)
        }
    }

    /// Calls `body` with each field's name and value bytes (valid only during the call) and
    /// whether the peer sent it never-indexed, in order.
    public func forEachField(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ neverIndexed: Bool) throws -> Void) rethrows {
        try storage.withUnsafeReadableBytes { bytes in
            var offset = 0
            while offset + Self.entryOverhead <= bytes.count {
                let nameLength = Int(bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
                let valueLength = Int(bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
                let flags = bytes[offset + 8]
                let nameStart = offset + Self.entryOverhead
                let end = nameStart + nameLength + valueLength
                guard end <= bytes.count else { return }
                try body(
                    UnsafeRawBufferPointer(rebasing: bytes[nameStart..<(nameStart + nameLength)]),
                    UnsafeRawBufferPointer(rebasing: bytes[(nameStart + nameLength)..<end]),
                    flags & Self.neverIndexedFlag != 0)
                offset = end
            }
        }
    }

    /// Calls `body` with the value bytes of the first field named `name` (lower case, as HTTP/2
    /// sends names); nil when there is none.
    public func withValue<R>(of name: StaticString, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R? {
        let wanted = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        var result: R? = nil
        var found = false
        try forEachField { fieldName, value, _ in
            guard !found, HTTP2HeaderBlock.bytesEqual(fieldName, wanted) else { return }
            found = true
            result = try body(value)
        }
        return result
    }

    /// The value of the first field named `name`, as a String (nil when there is none).
    public func value(of name: StaticString) -> String? {
        withValue(of: name) { String(decoding: $0, as: UTF8.self) }
    }

    /// Byte-wise equality (`memcmp`).
    public static func bytesEqual(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard lhs.count > 0, let left = lhs.baseAddress, let right = rhs.baseAddress else { return true }
        return memcmp(left, right, lhs.count) == 0
    }

    /// The field names only: values may be secrets (a provider token).
    public var description: String {
        map(\.name).joined(separator: ", ")
    }
}
