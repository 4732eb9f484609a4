import NIOCore

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
    public var value: String
    /// Outbound: how to encode it. Inbound: `.neverIndexed` when the peer sent it as a
    /// never-indexed literal, else `.automatic`.
    public var indexing: HTTP2HeaderIndexing

    public init(name: String, value: String, indexing: HTTP2HeaderIndexing = .automatic) {
        self.name = name
        self.value = value
        self.indexing = indexing
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
    case headers(streamID: HTTP2StreamNumber, headers: [HTTP2Header], endStream: Bool)
    /// The payload of one DATA frame (possibly empty, e.g. a bare END_STREAM).
    case data(streamID: HTTP2StreamNumber, bytes: ByteBuffer, endStream: Bool)
    /// The peer reset the stream.
    case resetReceived(streamID: HTTP2StreamNumber, errorCode: HTTP2ErrorCode)
    /// The stream is closed and its state released (after the answer, a reset either way, or
    /// when the connection ends). Every stream opened ends with exactly one of these.
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
