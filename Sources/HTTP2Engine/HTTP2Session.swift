import CNGHTTP2
import NIOCore

enum HTTP2Library {
    static func describe(_ code: Int32) -> String {
        guard let text = nghttp2_strerror(code) else { return "unknown" }
        return String(cString: text)
    }

    static let callbackFailure = NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
    static let temporalCallbackFailure = NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
}

/// One `nghttp2_session` and the Swift state its callbacks touch.
///
/// Not thread-safe: ``HTTP2EngineHandler`` confines it to the channel's event loop.
///
/// Rules kept here:
/// - **No re-entry.** Callbacks only record events (and copy the bytes they are shown, which
///   nghttp2 owns only for the duration of the callback) into `recorded`; they never call an
///   nghttp2 function. The owner delivers the events after `receive`/`send` returned.
/// - **Received bytes go to one arena.** Header fields and DATA payloads are appended to
///   `arena` as the callbacks see them (no `String`, no buffer per frame); an event refers to
///   its range and becomes a slice of the arena only when it is delivered, after nghttp2
///   returned. Once every event was delivered the arena is cleared and reused (it gets new
///   storage only when a delegate still holds a slice of the old one).
/// - **Errors raised in callbacks are kept** in `callbackError` and rethrown by `receive`/`send`
///   once nghttp2 returned `NGHTTP2_ERR_CALLBACK_FAILURE`.
/// - **Header bytes are copied by nghttp2** (no `NO_COPY` flags): the `nghttp2_nv` array and the
///   bytes it points to live only for the `nghttp2_submit_*` call, in scratch storage reused from
///   call to call. One copy of ~300 bytes per request is cheaper than keeping a Swift object alive
///   per stream until `on_frame_send`/`on_frame_not_send`, and it leaves no pointer to outlive.
/// - **DATA** comes from a data provider whose source is the stream's entry in `streams` (not a
///   pointer): it lives until `on_stream_close` releases the entry, which nghttp2 calls after the
///   last read of that stream's source.
/// - **Per-stream state** is created on the first event of a stream and released in
///   `on_stream_close` (or with the whole session).
final class HTTP2Session {
    struct Limits {
        var maxHeaderListSize: Int
        var maxBodySize: Int
        var maxTrackedStreams: Int
    }

    /// A stream's outbound DATA not yet handed to nghttp2: a buffer (its readable bytes), or an
    /// array from an offset (a request's payload as the caller holds it, not copied first).
    enum Outbound {
        case buffer(ByteBuffer)
        case bytes([UInt8], from: Int)
    }

    private struct StreamState {
        var bodyBytes = 0
        var outbound: Outbound? = nil
    }

    let mode: HTTP2EngineMode
    private let limits: Limits
    private let allocator: ByteBufferAllocator
    private var session: OpaquePointer?
    private var streams: [Int32: StreamState] = [:]
    private var callbackError: HTTP2EngineError?
    /// An event as a callback records it: header blocks and DATA refer to `arena` by range.
    enum Recorded {
        case event(HTTP2Event)
        case headers(streamID: Int32, start: Int, length: Int, count: Int, endStream: Bool)
        case data(streamID: Int32, start: Int, length: Int, endStream: Bool)
    }

    /// Events recorded by callbacks, in the order nghttp2 reported them.
    private(set) var recorded: [Recorded] = []
    /// Received header fields and DATA payloads of the recorded events.
    private var arena: ByteBuffer
    /// Bytes of a frame split across reads, while the arena is cleared.
    private var carry: [UInt8] = []
    /// The header block being received (nghttp2 never interleaves header blocks).
    private var blockOpen = false
    private var blockStreamID: Int32 = 0
    private var blockStart = 0
    private var blockFields = 0
    private var blockListSize = 0
    /// The DATA frame being received: its stream and where its bytes start in `arena`.
    private var dataStreamID: Int32 = 0
    private var dataStart: Int? = nil
    /// An arena grown past this by a burst gets new, smaller storage when cleared.
    private static let arenaCapacity = 16 * 1024
    private static let arenaKeptCapacity = 256 * 1024
    /// Scratch storage for outbound header blocks (reused, so building one is allocation-free
    /// once warmed up).
    private var headerBytes: UnsafeMutableRawPointer
    private var headerByteCapacity = 1024
    private var nameValues: UnsafeMutablePointer<nghttp2_nv>
    private var nameValueCapacity = 16

    init(mode: HTTP2EngineMode, limits: Limits, validateHTTPMessaging: Bool, allocator: ByteBufferAllocator) throws {
        self.mode = mode
        self.limits = limits
        self.allocator = allocator
        self.nameValues = .allocate(capacity: nameValueCapacity)
        self.arena = allocator.buffer(capacity: Self.arenaCapacity)
        self.headerBytes = .allocate(byteCount: headerByteCapacity, alignment: 1)

        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            nameValues.deallocate()
            headerBytes.deallocate()
            throw HTTP2EngineError.library(NGHTTP2_ERR_NOMEM.rawValue)
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameReceived)
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks, onInvalidFrameReceived)

        var options: OpaquePointer?
        guard nghttp2_option_new(&options) == 0, let options else {
            nameValues.deallocate()
            headerBytes.deallocate()
            throw HTTP2EngineError.library(NGHTTP2_ERR_NOMEM.rawValue)
        }
        defer { nghttp2_option_del(options) }
        if !validateHTTPMessaging { nghttp2_option_set_no_http_messaging(options, 1) }
        // Refuse oversized header blocks inside nghttp2 too (it answers with a stream error).
        nghttp2_option_set_max_send_header_block_length(options, max(limits.maxHeaderListSize, 16_384) * 4)

        var created: OpaquePointer?
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let rc: Int32
        switch mode {
        case .client: rc = nghttp2_session_client_new2(&created, callbacks, userData, options)
        case .server: rc = nghttp2_session_server_new2(&created, callbacks, userData, options)
        }
        guard rc == 0, let created else {
            nameValues.deallocate()
            headerBytes.deallocate()
            throw HTTP2EngineError.library(rc)
        }
        session = created
    }

    deinit {
        if let session { nghttp2_session_del(session) }
        nameValues.deallocate()
        headerBytes.deallocate()
    }

    /// Frees the session now (the connection is gone). Later calls throw ``HTTP2EngineError/notActive``.
    func terminate() {
        if let session { nghttp2_session_del(session) }
        session = nil
        streams.removeAll()
    }

    var isActive: Bool { session != nil }

    /// Open streams known to the Swift side.
    var trackedStreams: Int { streams.count }

    // MARK: Events

    var hasEvents: Bool { !recorded.isEmpty }

    /// The recorded event at `index` as the delegate sees it (header blocks and DATA as slices
    /// of the arena).
    func event(at index: Int) -> HTTP2Event {
        switch recorded[index] {
        case .event(let event):
            return event
        case .headers(let streamID, let start, let length, let count, let endStream):
            let block = arena.getSlice(at: start, length: length).map { HTTP2HeaderBlock(storage: $0, count: count) }
            return .headers(streamID: streamID, headers: block ?? HTTP2HeaderBlock([]), endStream: endStream)
        case .data(let streamID, let start, let length, let endStream):
            return .data(streamID: streamID, bytes: arena.getSlice(at: start, length: length) ?? ByteBuffer(), endStream: endStream)
        }
    }

    /// Every recorded event was delivered: forget them and reuse the arena. A header block or
    /// DATA frame still being received (split across reads) keeps its bytes so far: they move
    /// to the start of the arena.
    func clearEvents() {
        recorded.removeAll(keepingCapacity: true)
        var keepFrom = arena.writerIndex
        if blockOpen { keepFrom = min(keepFrom, blockStart) }
        if let dataStart { keepFrom = min(keepFrom, dataStart) }
        let kept = arena.writerIndex - keepFrom
        if kept > 0 {
            carry.removeAll(keepingCapacity: true)
            arena.withUnsafeReadableBytes { carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[keepFrom...])) }
        }
        if arena.capacity > Self.arenaKeptCapacity {
            arena = allocator.buffer(capacity: Self.arenaCapacity)
        } else {
            arena.clear()
        }
        if kept > 0 { arena.writeBytes(carry) }
        // Rebased even when nothing was kept (a block begun with no field decoded yet).
        if blockOpen { blockStart -= keepFrom }
        if let start = dataStart { dataStart = start - keepFrom }
    }

    // MARK: Input and output

    /// Feeds bytes from the peer. Events land in `events`.
    func receive(_ bytes: UnsafeRawBufferPointer) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        let rc = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        if rc < 0 {
            throw takeCallbackError() ?? HTTP2EngineError.library(Int32(truncatingIfNeeded: rc))
        }
    }

    /// Appends what nghttp2 has to send to `buffer`, stopping once `limit` bytes were gathered.
    /// Returns true when it stopped because of the limit (more may be waiting).
    func send(into buffer: inout ByteBuffer, limit: Int) throws -> Bool {
        guard let session else { throw HTTP2EngineError.notActive }
        var gathered = 0
        while gathered < limit {
            var data: UnsafePointer<UInt8>? = nil
            let count = nghttp2_session_mem_send(session, &data)
            if count < 0 {
                throw takeCallbackError() ?? HTTP2EngineError.library(Int32(truncatingIfNeeded: count))
            }
            guard count > 0, let data else { return false }
            // `data` is valid only until the next nghttp2 call: copy it now.
            buffer.writeBytes(UnsafeRawBufferPointer(start: data, count: count))
            gathered += count
        }
        return true
    }

    var wantsRead: Bool { session.map { nghttp2_session_want_read($0) != 0 } ?? false }
    var wantsWrite: Bool { session.map { nghttp2_session_want_write($0) != 0 } ?? false }

    private func takeCallbackError() -> HTTP2EngineError? {
        defer { callbackError = nil }
        return callbackError
    }

    // MARK: Submitting

    func submitSettings(_ settings: [HTTP2Setting]) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        let entries = settings.map { nghttp2_settings_entry(settings_id: Int32($0.identifier), value: $0.value) }
        let rc = entries.withUnsafeBufferPointer {
            nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), $0.baseAddress, $0.count)
        }
        if rc != 0 { throw HTTP2EngineError.library(rc) }
    }

    /// Sets our connection-level receive window (we announce it with WINDOW_UPDATE).
    func setLocalConnectionWindow(_ size: Int32) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        let rc = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, size)
        if rc != 0 { throw HTTP2EngineError.library(rc) }
    }

    func submitRequest(_ headers: [HTTP2Header], body: ByteBuffer?, validating: Bool = true) throws -> Int32 {
        try submitRequest(headers, outbound: body.map { .buffer($0) }, validating: validating)
    }

    func submitRequest(_ headers: [HTTP2Header], outbound body: Outbound?, validating: Bool = true) throws -> Int32 {
        guard let session else { throw HTTP2EngineError.notActive }
        guard mode == .client else { throw HTTP2EngineError.wrongMode }
        let streamID: Int32 = try withNameValues(headers, validating: validating) { nva, count in
            if body != nil {
                var provider = Self.dataProvider
                return nghttp2_submit_request(session, nil, nva, count, &provider, nil)
            }
            return nghttp2_submit_request(session, nil, nva, count, nil, nil)
        }
        if streamID < 0 { throw HTTP2EngineError.library(streamID) }
        if let body {
            streams[streamID, default: StreamState()].outbound = body
        }
        return streamID
    }

    func submitResponse(streamID: Int32, _ headers: [HTTP2Header], body: ByteBuffer?, validating: Bool = true) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        guard mode == .server else { throw HTTP2EngineError.wrongMode }
        // The entry must exist before nghttp2 may read from it; a stream that is already gone
        // makes the submit fail and the entry is dropped again.
        if let body { streams[streamID, default: StreamState()].outbound = .buffer(body) }
        let rc: Int32 = try withNameValues(headers, validating: validating) { nva, count in
            if body != nil {
                var provider = Self.dataProvider
                return nghttp2_submit_response(session, streamID, nva, count, &provider)
            }
            return nghttp2_submit_response(session, streamID, nva, count, nil)
        }
        if rc != 0 {
            if body != nil, nghttp2_session_find_stream(session, streamID) == nil { streams[streamID] = nil }
            throw HTTP2EngineError.library(rc)
        }
    }

    func submitReset(streamID: Int32, errorCode: HTTP2ErrorCode) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        let rc = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, errorCode.rawValue)
        if rc != 0 { throw HTTP2EngineError.library(rc) }
    }

    func submitPing(_ data: UInt64) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        var bigEndian = data.bigEndian
        let rc = withUnsafeBytes(of: &bigEndian) {
            nghttp2_submit_ping(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), $0.baseAddress?.assumingMemoryBound(to: UInt8.self))
        }
        if rc != 0 { throw HTTP2EngineError.library(rc) }
    }

    /// `lastStreamID` nil: the last stream nghttp2 handed to us (the graceful choice).
    func submitGoAway(lastStreamID: Int32?, errorCode: HTTP2ErrorCode, debugData: [UInt8]) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        let last = lastStreamID ?? nghttp2_session_get_last_proc_stream_id(session)
        let rc = debugData.withUnsafeBufferPointer {
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), last, errorCode.rawValue, $0.baseAddress, $0.count)
        }
        if rc != 0 { throw HTTP2EngineError.library(rc) }
    }

    /// The highest stream ID the peer opened that nghttp2 passed to us (server) or 0.
    var lastProcessedStreamID: Int32 {
        session.map { nghttp2_session_get_last_proc_stream_id($0) } ?? 0
    }

    /// How many more streams the peer lets us open now (its MAX_CONCURRENT_STREAMS minus ours).
    var remoteMaxConcurrentStreams: UInt32 {
        session.map { nghttp2_session_get_remote_settings($0, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) } ?? 0
    }

    /// Our connection-level receive window as nghttp2 tracks it.
    var localConnectionWindow: Int32 {
        session.map { nghttp2_session_get_local_window_size($0) } ?? 0
    }

    /// Builds the `nghttp2_nv` array in scratch storage; nghttp2 copies it during `body`.
    /// `validating`: check every name and value with nghttp2's rules (RFC 9113 8.2.1) first.
    private func withNameValues<R>(
        _ headers: [HTTP2Header], validating: Bool, _ body: (UnsafePointer<nghttp2_nv>, Int) -> R
    ) throws -> R {
        if headers.count > nameValueCapacity {
            nameValues.deallocate()
            nameValueCapacity = headers.count
            nameValues = .allocate(capacity: nameValueCapacity)
        }
        var total = 0
        for header in headers { total += header.name.utf8.count + header.valueCount }
        if total > headerByteCapacity {
            headerBytes.deallocate()
            headerByteCapacity = max(total, headerByteCapacity * 2)
            headerBytes = .allocate(byteCount: headerByteCapacity, alignment: 1)
        }
        let base = headerBytes.assumingMemoryBound(to: UInt8.self)
        var offset = 0
        for (index, header) in headers.enumerated() {
            let name = base + offset
            let nameLength = Self.copyUTF8(header.name, to: name)
            let value = name + nameLength
            let valueLength = header.withValueBytes { bytes in
                if let source = bytes.baseAddress, bytes.count > 0 { value.update(from: source, count: bytes.count) }
                return bytes.count
            }
            offset += nameLength + valueLength
            guard !validating
                || (nghttp2_check_header_name(name, nameLength) != 0 && nghttp2_check_header_value(value, valueLength) != 0)
            else { throw HTTP2EngineError.invalidHeader }
            let flags: UInt8 =
                header.indexing == .neverIndexed
                ? UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue) : UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
            (nameValues + index).initialize(
                to: nghttp2_nv(name: name, value: value, namelen: nameLength, valuelen: valueLength, flags: flags))
        }
        return body(nameValues, headers.count)
    }

    /// Copies `text`'s UTF-8 bytes to `destination` (room for them was made); returns the count.
    private static func copyUTF8(_ text: String, to destination: UnsafeMutablePointer<UInt8>) -> Int {
        let copied = text.utf8.withContiguousStorageIfAvailable { bytes -> Int in
            if let source = bytes.baseAddress, bytes.count > 0 { destination.update(from: source, count: bytes.count) }
            return bytes.count
        }
        if let copied { return copied }
        var count = 0
        for byte in text.utf8 {
            destination[count] = byte
            count += 1
        }
        return count
    }

    /// Every stream's DATA comes through the same read callback; its source is the stream's
    /// `outbound` entry, found by stream ID.
    private static var dataProvider: nghttp2_data_provider {
        nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: onDataSourceRead)
    }

    // MARK: Callback bodies (called by nghttp2 only; they record, never call nghttp2)

    fileprivate func beginHeaders(streamID: Int32) -> Int32 {
        guard trackedIndex(streamID) != nil else { return HTTP2Library.callbackFailure }
        blockOpen = true
        blockStreamID = streamID
        blockStart = arena.writerIndex
        blockFields = 0
        blockListSize = 0
        return 0
    }

    fileprivate func headerReceived(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, flags: UInt8) -> Int32 {
        blockListSize += name.count + value.count + 32
        guard blockListSize <= limits.maxHeaderListSize else {
            callbackError = .headerListTooLarge(limit: limits.maxHeaderListSize)
            return HTTP2Library.callbackFailure
        }
        let neverIndexed = flags & UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue) != 0
        HTTP2HeaderBlock.append(name: name, value: value, neverIndexed: neverIndexed, to: &arena)
        blockFields += 1
        return 0
    }

    fileprivate func dataReceived(streamID: Int32, bytes: UnsafeRawBufferPointer) -> Int32 {
        guard let index = trackedIndex(streamID) else { return HTTP2Library.callbackFailure }
        streams.values[index].bodyBytes += bytes.count
        guard streams.values[index].bodyBytes <= limits.maxBodySize else {
            callbackError = .bodyTooLarge(limit: limits.maxBodySize)
            return HTTP2Library.callbackFailure
        }
        // The chunks of one DATA frame arrive one after another, nothing between them.
        if dataStart == nil || dataStreamID != streamID {
            dataStart = arena.writerIndex
            dataStreamID = streamID
        }
        arena.writeBytes(bytes)
        return 0
    }

    /// The stream's entry, created on first use, within the bound on tracked streams.
    private func trackedIndex(_ streamID: Int32) -> Dictionary<Int32, StreamState>.Index? {
        if let index = streams.index(forKey: streamID) { return index }
        guard streams.count < limits.maxTrackedStreams else {
            callbackError = .tooManyStreams(limit: limits.maxTrackedStreams)
            return nil
        }
        streams[streamID] = StreamState()
        return streams.index(forKey: streamID)
    }

    fileprivate func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        let header = frame.pointee.hd
        let streamID = header.stream_id
        let endStream = header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        let ack = header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue:
            recorded.append(
                .headers(
                    streamID: streamID, start: blockStart, length: arena.writerIndex - blockStart, count: blockFields,
                    endStream: endStream))
            blockOpen = false
            blockStart = arena.writerIndex
            blockFields = 0
            blockListSize = 0
        case NGHTTP2_DATA.rawValue:
            if let start = dataStart, dataStreamID == streamID {
                recorded.append(.data(streamID: streamID, start: start, length: arena.writerIndex - start, endStream: endStream))
            } else {
                recorded.append(.data(streamID: streamID, start: arena.writerIndex, length: 0, endStream: endStream))
            }
            dataStart = nil
        case NGHTTP2_RST_STREAM.rawValue:
            recorded.append(.event(.resetReceived(streamID: streamID, errorCode: HTTP2ErrorCode(frame.pointee.rst_stream.error_code))))
        case NGHTTP2_SETTINGS.rawValue:
            if ack {
                recorded.append(.event(.settingsAcknowledged))
            } else {
                let settings = frame.pointee.settings
                var list: [HTTP2Setting] = []
                if let entries = settings.iv {
                    list.reserveCapacity(settings.niv)
                    for index in 0..<settings.niv {
                        let entry = entries[index]
                        list.append(HTTP2Setting(identifier: UInt16(truncatingIfNeeded: entry.settings_id), value: entry.value))
                    }
                }
                recorded.append(.event(.settings(list)))
            }
        case NGHTTP2_GOAWAY.rawValue:
            let goAway = frame.pointee.goaway
            var debug = allocator.buffer(capacity: goAway.opaque_data_len)
            if let data = goAway.opaque_data, goAway.opaque_data_len > 0 {
                debug.writeBytes(UnsafeRawBufferPointer(start: data, count: goAway.opaque_data_len))
            }
            recorded.append(.event(.goAway(lastStreamID: goAway.last_stream_id, errorCode: HTTP2ErrorCode(goAway.error_code), debugData: debug)))
        case NGHTTP2_PING.rawValue:
            if ack {
                let value = withUnsafeBytes(of: frame.pointee.ping.opaque_data) { raw in
                    raw.reduce(UInt64(0)) { ($0 << 8) | UInt64($1) }
                }
                recorded.append(.event(.pingAcknowledged(value)))
            }
        default:
            break
        }
        return 0
    }

    fileprivate func streamClosed(streamID: Int32, errorCode: UInt32) -> Int32 {
        streams[streamID] = nil
        if dataStreamID == streamID { dataStart = nil }
        if blockOpen, blockStreamID == streamID { blockOpen = false }
        recorded.append(.event(.streamClosed(streamID: streamID, errorCode: HTTP2ErrorCode(errorCode))))
        return 0
    }

    /// nghttp2 refused a frame it received. Only one case is reported: a server refusing a new
    /// stream (REFUSED_STREAM) because the peer opened it beyond the MAX_CONCURRENT_STREAMS
    /// last sent, before it could have acknowledged it. nghttp2 never opens such a stream, so no
    /// `on_stream_close` follows: the stream's end is recorded here instead, so that whoever
    /// counts the peer's streams from the wire learns it is not open.
    fileprivate func invalidFrameReceived(_ frame: UnsafePointer<nghttp2_frame>, libraryError: Int32) -> Int32 {
        let header = frame.pointee.hd
        guard mode == .server, UInt32(header.type) == NGHTTP2_HEADERS.rawValue,
            libraryError == NGHTTP2_ERR_REFUSED_STREAM.rawValue, streams[header.stream_id] == nil
        else { return 0 }
        recorded.append(.event(.streamClosed(streamID: header.stream_id, errorCode: .refusedStream)))
        return 0
    }

    fileprivate func readOutbound(
        streamID: Int32, into destination: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        guard let index = streams.index(forKey: streamID), let outbound = streams.values[index].outbound else {
            // No source for a stream nghttp2 asks about: reset that stream, keep the connection.
            return Int(HTTP2Library.temporalCallbackFailure)
        }
        // Copies at most `length` bytes to `destination` (nghttp2's buffer of that size).
        func copy(_ source: UnsafeRawBufferPointer) -> Int {
            let count = min(source.count, length)
            if count > 0, let base = source.baseAddress {
                UnsafeMutableRawPointer(destination).copyMemory(from: base, byteCount: count)
            }
            return count
        }
        let count: Int
        let rest: Outbound?
        switch outbound {
        case .buffer(var buffer):
            streams.values[index].outbound = nil  // the buffer is read, not copied, below
            count = buffer.readWithUnsafeReadableBytes(copy)
            rest = buffer.readableBytes == 0 ? nil : .buffer(buffer)
        case .bytes(let bytes, let offset):
            let start = min(max(0, offset), bytes.count)
            count = bytes.withUnsafeBytes { copy(UnsafeRawBufferPointer(rebasing: $0[start...])) }
            rest = start + count >= bytes.count ? nil : .bytes(bytes, from: start + count)
        }
        streams.values[index].outbound = rest
        if rest == nil { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }
}

// MARK: C callbacks: each finds its HTTP2Session through user_data (unretained: the session
// object owns the nghttp2_session and deletes it in deinit, so it always outlives the pointer).

private func owner(_ userData: UnsafeMutableRawPointer?) -> HTTP2Session? {
    guard let userData else { return nil }
    return Unmanaged<HTTP2Session>.fromOpaque(userData).takeUnretainedValue()
}

private func onFrameReceived(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let engine = owner(userData), let frame else { return HTTP2Library.callbackFailure }
    return engine.frameReceived(frame)
}

private func onBeginHeaders(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let engine = owner(userData), let frame else { return HTTP2Library.callbackFailure }
    return engine.beginHeaders(streamID: frame.pointee.hd.stream_id)
}

private func onHeader(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?,
    _ name: UnsafePointer<UInt8>?, _ nameLength: Int, _ value: UnsafePointer<UInt8>?, _ valueLength: Int,
    _ flags: UInt8, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let engine = owner(userData) else { return HTTP2Library.callbackFailure }
    return engine.headerReceived(
        name: UnsafeRawBufferPointer(start: name, count: name == nil ? 0 : nameLength),
        value: UnsafeRawBufferPointer(start: value, count: value == nil ? 0 : valueLength),
        flags: flags)
}

private func onDataChunk(
    _ session: OpaquePointer?, _ flags: UInt8, _ streamID: Int32, _ data: UnsafePointer<UInt8>?, _ length: Int,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let engine = owner(userData) else { return HTTP2Library.callbackFailure }
    return engine.dataReceived(streamID: streamID, bytes: UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : length))
}

private func onStreamClose(
    _ session: OpaquePointer?, _ streamID: Int32, _ errorCode: UInt32, _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let engine = owner(userData) else { return HTTP2Library.callbackFailure }
    return engine.streamClosed(streamID: streamID, errorCode: errorCode)
}

private func onInvalidFrameReceived(
    _ session: OpaquePointer?, _ frame: UnsafePointer<nghttp2_frame>?, _ libraryError: Int32,
    _ userData: UnsafeMutableRawPointer?
) -> Int32 {
    guard let engine = owner(userData), let frame else { return HTTP2Library.callbackFailure }
    return engine.invalidFrameReceived(frame, libraryError: libraryError)
}

private func onDataSourceRead(
    _ session: OpaquePointer?, _ streamID: Int32, _ buffer: UnsafeMutablePointer<UInt8>?, _ length: Int,
    _ flags: UnsafeMutablePointer<UInt32>?, _ source: UnsafeMutablePointer<nghttp2_data_source>?,
    _ userData: UnsafeMutableRawPointer?
) -> Int {
    guard let engine = owner(userData), let buffer, let flags else { return Int(HTTP2Library.callbackFailure) }
    return engine.readOutbound(streamID: streamID, into: buffer, length: length, flags: flags)
}
