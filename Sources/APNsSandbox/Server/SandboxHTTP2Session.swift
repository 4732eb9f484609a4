import CNGHTTP2
import NIOCore

/// The sandbox's HTTP/2 framing: one libnghttp2 server session for one connection, confined to
/// the connection's event loop.
///
/// nghttp2 is never re-entered from its own callbacks: the callbacks only copy what they are
/// given into ``events`` (and read response bodies this object already holds); the connection
/// handler acts on the events once ``receive(_:)`` or ``send(into:)`` has returned. Every
/// pointer nghttp2 passes to a callback is read inside that callback and never kept; every
/// pointer this object passes to nghttp2 (header names and values, SETTINGS, GOAWAY data) lives
/// only for the call, because nghttp2 copies them (no `NGHTTP2_NV_FLAG_NO_COPY_*`).
final class SandboxHTTP2Session {
    enum Event {
        /// A request's header block, complete (HEADERS and any CONTINUATION).
        case request(streamID: Int32, head: SandboxRequestHead, endStream: Bool, withPriority: Bool)
        /// A later header block on an open stream (trailers).
        case trailers(streamID: Int32, endStream: Bool, withPriority: Bool)
        /// Request body bytes (copied out of nghttp2's buffer).
        case data(streamID: Int32, bytes: ByteBuffer)
        /// A DATA frame carried END_STREAM.
        case endOfData(streamID: Int32)
        case priorityFrame
        /// The stream closed (answered, reset by either side, or refused).
        case streamClosed(streamID: Int32, errorCode: UInt32)
        /// nghttp2 found a frame invalid (`libError` is nghttp2's error code).
        case invalidFrame(type: UInt8, streamID: Int32, libError: Int32)
        /// The last frame of a response (END_STREAM) went out.
        case responseSent(streamID: Int32)
    }

    /// What the callbacks saw since the handler last took them.
    private(set) var events: [Event] = []
    private var session: OpaquePointer?
    private let allocator: ByteBufferAllocator
    /// Header blocks being received, by stream, until END_HEADERS.
    private var partialHeads: [Int32: SandboxRequestHead] = [:]
    /// Response bodies nghttp2 has yet to read, by stream.
    private var responseBodies: [Int32: (bytes: [UInt8], offset: Int)] = [:]
    /// Bytes a header list may hold (HPACK's count); beyond, values are no longer kept.
    private let maximumHeaderListSize: Int

    struct SessionError: Error, CustomStringConvertible {
        var code: Int
        var description: String { "nghttp2: " + String(cString: nghttp2_strerror(Int32(truncatingIfNeeded: code))) }
    }

    init(allocator: ByteBufferAllocator, maximumHeaderListSize: Int) throws {
        self.allocator = allocator
        self.maximumHeaderListSize = maximumHeaderListSize
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { throw SessionError(code: -901) }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameRecv)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunkRecv)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks, onInvalidFrameRecv)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, onFrameSend)

        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { throw SessionError(code: -901) }
        defer { nghttp2_option_del(option) }
        // The sandbox reads every header APNs cares about itself (a missing :method is 405, a
        // missing :path BadPath), so nghttp2's HTTP messaging checks would answer before it.
        nghttp2_option_set_no_http_messaging(option, 1)
        // Load tests legitimately send many PINGs and SETTINGS; keep the guard, loosened.
        nghttp2_option_set_max_outbound_ack(option, 10_000)

        var created: OpaquePointer?
        let rv = nghttp2_session_server_new2(&created, callbacks, nil, option)
        guard rv == 0, let created else { throw SessionError(code: Int(rv)) }
        session = created
        // user_data: this object, unretained. nghttp2 calls back only from inside the
        // mem_recv/mem_send calls this object makes, while it is alive; deinit deletes the session.
        nghttp2_session_set_user_data(created, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    /// Ends the session at once (the channel is gone): nothing more is read or sent.
    func close() {
        if let session { nghttp2_session_del(session) }
        session = nil
        partialHeads.removeAll()
        responseBodies.removeAll()
    }

    func takeEvents() -> [Event] {
        defer { events.removeAll(keepingCapacity: true) }
        return events
    }

    // MARK: Input and output

    /// Hands received bytes to nghttp2. An error is a connection nghttp2 cannot go on with (bad
    /// preface, flooding): the caller sends what is pending and closes.
    func receive(_ buffer: ByteBuffer) throws {
        guard let session else { return }
        let processed = buffer.withUnsafeReadableBytes { bytes -> Int in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return 0 }
            return nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        }
        if processed < 0 { throw SessionError(code: processed) }
    }

    /// Appends what nghttp2 has to send to `output`, at most `limit` bytes (more may be left).
    func send(into output: inout ByteBuffer, limit: Int) throws {
        guard let session else { return }
        while output.readableBytes < limit {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            if count < 0 { throw SessionError(code: count) }
            guard count > 0, let data else { return }
            // Valid until the next nghttp2 call: copied now.
            output.writeBytes(UnsafeRawBufferPointer(start: data, count: count))
        }
    }

    /// True while nghttp2 expects to read or has something to write; false once the session is
    /// over (after a GOAWAY for a connection error is out).
    var isAlive: Bool {
        guard let session else { return false }
        return nghttp2_session_want_read(session) != 0 || nghttp2_session_want_write(session) != 0
    }

    var wantsWrite: Bool {
        guard let session else { return false }
        return nghttp2_session_want_write(session) != 0
    }

    // MARK: Submissions

    func submitSettings(maxConcurrentStreams: Int? = nil, maxHeaderListSize: Int? = nil, initialWindowSize: Int? = nil) {
        guard let session else { return }
        var settings: [nghttp2_settings_entry] = []
        func add(_ id: nghttp2_settings_id, _ value: Int?) {
            guard let value else { return }
            settings.append(
                nghttp2_settings_entry(settings_id: Int32(id.rawValue), value: UInt32(clamping: max(0, value))))
        }
        add(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, maxConcurrentStreams)
        add(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, maxHeaderListSize)
        add(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, initialWindowSize)
        _ = settings.withUnsafeBufferPointer { entries in
            nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), entries.baseAddress, entries.count)
        }
    }

    /// Opens the connection-level receive window to `size` bytes; nghttp2 then sends
    /// WINDOW_UPDATE as the client's data is consumed.
    func setConnectionWindow(_ size: Int) {
        guard let session else { return }
        _ = nghttp2_session_set_local_window_size(
            session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(clamping: size))
    }

    /// Submits a response: `:status`, the other headers, and the body (if any) as DATA with
    /// END_STREAM. `neverIndexed` names the headers sent with the never-indexed flag.
    @discardableResult
    func respond(streamID: Int32, headers: [(name: String, value: String, neverIndexed: Bool)], body: [UInt8]?) -> Bool {
        guard let session else { return false }
        // One contiguous copy of the names and values; nghttp2 copies them again during the call.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count })
        var spans: [(name: Range<Int>, value: Range<Int>, flags: UInt8)] = []
        for header in headers {
            let nameStart = bytes.count
            bytes.append(contentsOf: header.name.utf8)
            let valueStart = bytes.count
            bytes.append(contentsOf: header.value.utf8)
            let flags = header.neverIndexed ? UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue) : UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
            spans.append((nameStart..<valueStart, valueStart..<bytes.count, flags))
        }
        if let body { responseBodies[streamID] = (body, 0) }
        let rv = bytes.withUnsafeMutableBufferPointer { storage -> Int32 in
            guard let base = storage.baseAddress else { return -1 }
            var nva = spans.map { span in
                nghttp2_nv(
                    name: base + span.name.lowerBound, value: base + span.value.lowerBound,
                    namelen: span.name.count, valuelen: span.value.count, flags: span.flags)
            }
            return nva.withUnsafeMutableBufferPointer { list in
                if body != nil {
                    var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: readBodyCallback)
                    return nghttp2_submit_response(session, streamID, list.baseAddress, list.count, &provider)
                }
                return nghttp2_submit_response(session, streamID, list.baseAddress, list.count, nil)
            }
        }
        if rv != 0 { responseBodies.removeValue(forKey: streamID) }
        return rv == 0
    }

    func resetStream(_ streamID: Int32, errorCode: nghttp2_error_code) {
        guard let session else { return }
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, errorCode.rawValue)
    }

    /// GOAWAY naming `lastStreamID`, with `debugData` (the JSON reason). NO_ERROR: streams up to
    /// the last one are still served; nghttp2 ignores the client's later streams.
    func goAway(lastStreamID: Int32, debugData: [UInt8]) {
        guard let session else { return }
        _ = debugData.withUnsafeBufferPointer { data in
            nghttp2_submit_goaway(
                session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, NGHTTP2_NO_ERROR.rawValue,
                data.baseAddress, data.count)
        }
    }

    /// The MAX_CONCURRENT_STREAMS the client has acknowledged.
    var acknowledgedStreamLimit: Int {
        guard let session else { return 0 }
        return Int(nghttp2_session_get_local_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS))
    }

    // MARK: Callback bodies (record only)

    fileprivate func beganHeaders(_ frame: UnsafePointer<nghttp2_frame>) {
        guard frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return }
        partialHeads[frame.pointee.hd.stream_id] = SandboxRequestHead()
    }

    fileprivate func header(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        let streamID = frame.pointee.hd.stream_id
        guard partialHeads[streamID] != nil else { return }
        partialHeads[streamID]!.add(name: name, value: value, keepingValuesUpTo: maximumHeaderListSize)
    }

    fileprivate func received(_ frame: UnsafePointer<nghttp2_frame>) {
        let hd = frame.pointee.hd
        let endStream = hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        switch UInt32(hd.type) {
        case NGHTTP2_HEADERS.rawValue:
            let withPriority = hd.flags & UInt8(NGHTTP2_FLAG_PRIORITY.rawValue) != 0
            if let head = partialHeads.removeValue(forKey: hd.stream_id) {
                events.append(.request(streamID: hd.stream_id, head: head, endStream: endStream, withPriority: withPriority))
            } else {
                events.append(.trailers(streamID: hd.stream_id, endStream: endStream, withPriority: withPriority))
            }
        case NGHTTP2_DATA.rawValue:
            if endStream { events.append(.endOfData(streamID: hd.stream_id)) }
        case NGHTTP2_PRIORITY.rawValue:
            events.append(.priorityFrame)
        default:
            break
        }
    }

    fileprivate func dataChunk(streamID: Int32, bytes: UnsafeRawBufferPointer) {
        var buffer = allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        events.append(.data(streamID: streamID, bytes: buffer))
    }

    fileprivate func streamClosed(_ streamID: Int32, errorCode: UInt32) {
        partialHeads.removeValue(forKey: streamID)
        responseBodies.removeValue(forKey: streamID)
        events.append(.streamClosed(streamID: streamID, errorCode: errorCode))
    }

    fileprivate func invalidFrame(_ frame: UnsafePointer<nghttp2_frame>, libError: Int32) {
        partialHeads.removeValue(forKey: frame.pointee.hd.stream_id)
        events.append(.invalidFrame(type: frame.pointee.hd.type, streamID: frame.pointee.hd.stream_id, libError: libError))
    }

    fileprivate func sent(_ frame: UnsafePointer<nghttp2_frame>) {
        let hd = frame.pointee.hd
        let type = UInt32(hd.type)
        guard type == NGHTTP2_HEADERS.rawValue || type == NGHTTP2_DATA.rawValue,
            hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        else { return }
        events.append(.responseSent(streamID: hd.stream_id))
    }

    /// Copies the next piece of a response body into nghttp2's buffer.
    fileprivate func readBody(streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard var body = responseBodies[streamID] else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let count = min(length, body.bytes.count - body.offset)
        body.bytes.withUnsafeBufferPointer { source in
            if count > 0, let base = source.baseAddress {
                buffer.update(from: base + body.offset, count: count)
            }
        }
        body.offset += count
        if body.offset >= body.bytes.count {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            responseBodies.removeValue(forKey: streamID)
        } else {
            responseBodies[streamID] = body
        }
        return count
    }

    fileprivate static func from(_ userData: UnsafeMutableRawPointer?) -> SandboxHTTP2Session? {
        guard let userData else { return nil }
        return Unmanaged<SandboxHTTP2Session>.fromOpaque(userData).takeUnretainedValue()
    }
}

// MARK: C callbacks: each finds its session and records; none calls back into nghttp2.

private let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame, let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.beganHeaders(frame)
    return 0
}

private let onHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.header(
        frame, name: UnsafeRawBufferPointer(start: name, count: name == nil ? 0 : nameLength),
        value: UnsafeRawBufferPointer(start: value, count: value == nil ? 0 : valueLength))
    return 0
}

private let onFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame, let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.received(frame)
    return 0
}

private let onDataChunkRecv: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    guard let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.dataChunk(streamID: streamID, bytes: UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : length))
    return 0
}

private let onStreamClose: nghttp2_on_stream_close_callback = { _, streamID, errorCode, userData in
    guard let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.streamClosed(streamID, errorCode: errorCode)
    return 0
}

private let onInvalidFrameRecv: nghttp2_on_invalid_frame_recv_callback = { _, frame, libError, userData in
    guard let frame, let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.invalidFrame(frame, libError: libError)
    return 0
}

private let onFrameSend: nghttp2_on_frame_send_callback = { _, frame, userData in
    guard let frame, let session = SandboxHTTP2Session.from(userData) else { return 0 }
    session.sent(frame)
    return 0
}

private let readBodyCallback: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    guard let buffer, let flags, let session = SandboxHTTP2Session.from(userData) else {
        return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }
    return session.readBody(streamID: streamID, into: buffer, length: length, flags: flags)
}
