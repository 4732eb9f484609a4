import NIOCore

/// Hears what an ``HTTP2EngineHandler``'s peer did. Called on the channel's event loop, never
/// from inside libnghttp2: a delegate may call any of the engine's methods from here.
///
/// Channel-level events (active, inactive, errors, TLS user events) travel the pipeline as
/// usual; put the delegate's own handler after the engine to see them.
public protocol HTTP2EngineDelegate: AnyObject {
    func http2Engine(_ engine: HTTP2EngineHandler, didReceive event: HTTP2Event)
    /// The events recorded by one call into nghttp2 (a read, or a burst of output) were all
    /// delivered. A delegate may batch per call (one clock read for all of them, say) and settle
    /// here. Optional.
    func http2EngineDidDeliverEvents(_ engine: HTTP2EngineHandler)
}

extension HTTP2EngineDelegate {
    public func http2EngineDidDeliverEvents(_ engine: HTTP2EngineHandler) {}
}

/// HTTP/2 on libnghttp2, as one NIO channel handler above `NIOSSLHandler` (it reads and writes
/// plain `ByteBuffer`s) that owns one `nghttp2_session`, client or server.
///
/// ```swift
/// let engine = HTTP2EngineHandler(configuration: .init(mode: .client))
/// engine.delegate = myHandler          // gets HTTP2Event values
/// try channel.pipeline.syncOperations.addHandlers([tls, engine, myHandler])
/// let stream = try engine.submitRequest(headers, body: payload)
/// ```
///
/// - Input: each read goes to `nghttp2_session_mem_recv` straight from the buffer's readable
///   bytes; the events its callbacks recorded are delivered to the delegate after it returned.
/// - Output: `nghttp2_session_mem_send` output is gathered into one buffer per flush (at most
///   ``Configuration/maxBytesPerFlush`` bytes), written and flushed; it pauses while the channel
///   is not writable and resumes when it is. Flushes are coalesced: one after a read burst
///   (`channelReadComplete`), one per event-loop tick for calls made outside a read.
/// - When nghttp2 wants neither to read nor to write (GOAWAY done, fatal error) the channel is
///   closed. A fatal error (nghttp2's, or one a callback raised and the engine kept) is fired
///   down the pipeline (`errorCaught`) before the close.
/// - Streams still open when the channel goes inactive get no ``HTTP2Event/streamClosed(streamID:errorCode:)``:
///   the delegate's handler sees `channelInactive` and owns their fate.
///
/// Confined to its channel's event loop: every method must be called there.
public final class HTTP2EngineHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    public struct Configuration: Sendable {
        public var mode: HTTP2EngineMode
        /// Our SETTINGS, sent with the connection preface.
        public var initialSettings: [HTTP2Setting]
        /// Our connection-level receive window. HTTP/2 starts it at 65,535 whatever the
        /// SETTINGS say; the engine raises it with a WINDOW_UPDATE at the start. nghttp2 tops
        /// both the connection and stream windows up as data is received.
        public var connectionWindowSize: Int32
        /// The largest header block accepted from the peer (names + values + 32 per field);
        /// above it the connection fails with ``HTTP2EngineError/headerListTooLarge(limit:)``.
        public var maxHeaderListSize: Int
        /// The largest body accepted on one stream; above it the connection fails.
        public var maxBodySize: Int
        /// The most streams the engine keeps state for at once (a hostile peer's bound).
        public var maxTrackedStreams: Int
        /// The most bytes gathered into one write before it is flushed.
        public var maxBytesPerFlush: Int
        /// Let nghttp2 check HTTP semantics (pseudo-headers, content-length, forbidden
        /// connection headers); a violating stream is reset with PROTOCOL_ERROR.
        public var validatesHTTPMessaging: Bool
        /// Requests (client) submitted while a read is being handled are written out after every
        /// this many instead of all at once when the read burst ends, so that the peer can start
        /// on the first ones meanwhile. 0: only at the end of the burst.
        public var writeAfterRequests: Int = 0

        public init(
            mode: HTTP2EngineMode,
            initialSettings: [HTTP2Setting] = [.enablePush(0), .initialWindowSize(1 << 20), .maxHeaderListSize(16 * 1024)],
            connectionWindowSize: Int32 = 1 << 20,
            maxHeaderListSize: Int = 16 * 1024,
            maxBodySize: Int = 1 << 20,
            maxTrackedStreams: Int = 10_000,
            maxBytesPerFlush: Int = 256 * 1024,
            validatesHTTPMessaging: Bool = true
        ) {
            self.mode = mode
            self.initialSettings = initialSettings
            self.connectionWindowSize = connectionWindowSize
            self.maxHeaderListSize = maxHeaderListSize
            self.maxBodySize = maxBodySize
            self.maxTrackedStreams = maxTrackedStreams
            self.maxBytesPerFlush = maxBytesPerFlush
            self.validatesHTTPMessaging = validatesHTTPMessaging
        }
    }

    /// Gets the engine's events. Held strongly until the handler is removed.
    public var delegate: (any HTTP2EngineDelegate)?
    public let configuration: Configuration

    private var session: HTTP2Session?
    private var context: ChannelHandlerContext?
    private var reading = false
    private var delivering = false
    private var writing = false
    private var flushScheduled = false
    private var needsFlush = false
    private var failed = false
    /// The size of the last buffer gathered: the next one starts with about that much room, so a
    /// burst of a few hundred requests is not copied again and again as its buffer doubles.
    private var lastGathered = 0
    /// Requests submitted during the current read burst since output was last written.
    private var submittedInBurst = 0

    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    // MARK: Public API

    /// Opens a stream with a request (client). The HEADERS (and DATA, when `body` is non-nil,
    /// with END_STREAM on the last frame) go out at the next flush. Returns the stream ID.
    ///
    /// Header bytes are copied by nghttp2 during this call; `body` is kept until the stream closes.
    ///
    /// `validatingHeaders`: every name and value is checked against HTTP/2's rules first
    /// (``HTTP2EngineError/invalidHeader``). A caller that built every field from values it
    /// already checked (``HTTP2Header/isValidValue(_:)``, or by construction) may pass false.
    @discardableResult
    public func submitRequest(_ headers: [HTTP2Header], body: ByteBuffer?, validatingHeaders: Bool = true) throws -> HTTP2StreamNumber {
        try submitRequest(headers, outbound: body.map { .buffer($0) }, validatingHeaders: validatingHeaders)
    }

    /// ``submitRequest(_:body:validatingHeaders:)`` with the body as an array, kept (not copied)
    /// until its bytes were handed to nghttp2: a caller holding its payload as `[UInt8]` saves a
    /// buffer and a copy per request.
    @discardableResult
    public func submitRequest(_ headers: [HTTP2Header], bytes body: [UInt8]?, validatingHeaders: Bool = true) throws -> HTTP2StreamNumber {
        try submitRequest(headers, outbound: body.map { .bytes($0, from: 0) }, validatingHeaders: validatingHeaders)
    }

    private func submitRequest(_ headers: [HTTP2Header], outbound: HTTP2Session.Outbound?, validatingHeaders: Bool) throws -> HTTP2StreamNumber {
        guard let session else { throw HTTP2EngineError.notActive }
        let id = try session.submitRequest(headers, outbound: outbound, validating: validatingHeaders)
        if reading, configuration.writeAfterRequests > 0 {
            submittedInBurst += 1
            if submittedInBurst >= configuration.writeAfterRequests {
                // Outside nghttp2 (events are delivered after mem_recv returned): safe to send.
                submittedInBurst = 0
                writeOutput()
                return id
            }
        }
        scheduleFlush()
        return id
    }

    /// Answers a stream (server): HEADERS, then `body` as DATA when non-nil (END_STREAM on the
    /// last frame; on the HEADERS when `body` is nil).
    ///
    /// `validatingHeaders`: as for ``submitRequest(_:body:validatingHeaders:)``.
    public func submitResponse(
        streamID: HTTP2StreamNumber, headers: [HTTP2Header], body: ByteBuffer?, validatingHeaders: Bool = true
    ) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        try session.submitResponse(streamID: streamID, headers, body: body, validating: validatingHeaders)
        scheduleFlush()
    }

    /// Sends RST_STREAM; the stream's ``HTTP2Event/streamClosed(streamID:errorCode:)`` follows.
    public func resetStream(_ streamID: HTTP2StreamNumber, errorCode: HTTP2ErrorCode) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        try session.submitReset(streamID: streamID, errorCode: errorCode)
        scheduleFlush()
    }

    /// Sends SETTINGS (e.g. a new MAX_CONCURRENT_STREAMS).
    public func sendSettings(_ settings: [HTTP2Setting]) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        try session.submitSettings(settings)
        scheduleFlush()
    }

    /// Sends a PING; the answer arrives as ``HTTP2Event/pingAcknowledged(_:)``.
    public func ping(_ data: UInt64) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        try session.submitPing(data)
        scheduleFlush()
    }

    /// Sends GOAWAY. `lastStreamID` nil: the last stream the peer opened that was handed to the
    /// delegate (streams above it were not processed). The connection closes once nghttp2 has
    /// nothing more to read or write (open streams at or below `lastStreamID` may finish).
    public func goAway(lastStreamID: HTTP2StreamNumber? = nil, errorCode: HTTP2ErrorCode = .noError, debugData: [UInt8] = []) throws {
        guard let session else { throw HTTP2EngineError.notActive }
        try session.submitGoAway(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
        scheduleFlush()
    }

    /// The peer's current SETTINGS_MAX_CONCURRENT_STREAMS (nghttp2's view).
    public var remoteMaxConcurrentStreams: UInt32 { session?.remoteMaxConcurrentStreams ?? 0 }

    /// Streams the engine currently keeps state for.
    public var trackedStreams: Int { session?.trackedStreams ?? 0 }

    /// Our connection-level receive window (nghttp2's view).
    public var localConnectionWindow: Int32 { session?.localConnectionWindow ?? 0 }

    /// Writes pending output now instead of at the coalesced flush point.
    public func flushNow() {
        needsFlush = false
        writeOutput()
    }

    // MARK: Channel events

    public func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        do {
            let session = try HTTP2Session(
                mode: configuration.mode,
                limits: .init(
                    maxHeaderListSize: configuration.maxHeaderListSize, maxBodySize: configuration.maxBodySize,
                    maxTrackedStreams: configuration.maxTrackedStreams),
                validateHTTPMessaging: configuration.validatesHTTPMessaging,
                allocator: context.channel.allocator)
            self.session = session
            try session.submitSettings(configuration.initialSettings)
            if configuration.connectionWindowSize > 65_535 {
                try session.setLocalConnectionWindow(configuration.connectionWindowSize)
            }
        } catch {
            fail(error)
            return
        }
        if context.channel.isActive { writeOutput() }
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        session?.terminate()
        session = nil
        delegate = nil
        self.context = nil
    }

    public func channelActive(context: ChannelHandlerContext) {
        writeOutput()
        context.fireChannelActive()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        session?.terminate()
        context.fireChannelInactive()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let session, !failed else { return }
        let buffer = unwrapInboundIn(data)
        reading = true
        do {
            try buffer.withUnsafeReadableBytes { try session.receive($0) }
        } catch {
            deliverEvents()
            fail(error)
            return
        }
        deliverEvents()
        needsFlush = true
    }

    public func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        submittedInBurst = 0
        if needsFlush {
            needsFlush = false
            writeOutput()
        }
        context.fireChannelReadComplete()
    }

    public func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { writeOutput() }
        context.fireChannelWritabilityChanged()
    }

    // MARK: Internals

    private func scheduleFlush() {
        if reading || delivering {
            needsFlush = true
            if !reading { scheduleTick() }
            return
        }
        scheduleTick()
    }

    private func scheduleTick() {
        guard !flushScheduled, let context else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.needsFlush = false
            self.writeOutput()
        }
    }

    private func deliverEvents() {
        guard !delivering, let session, session.hasEvents else { return }
        delivering = true
        defer { delivering = false }
        var index = 0
        while index < session.recorded.count {
            let event = session.event(at: index)
            index += 1
            delegate?.http2Engine(self, didReceive: event)
        }
        session.clearEvents()
        delegate?.http2EngineDidDeliverEvents(self)
    }

    /// Gathers nghttp2's output into bounded buffers and writes them while the channel takes them.
    private func writeOutput() {
        guard !writing, !failed, let context, let session, session.isActive, context.channel.isActive else { return }
        writing = true
        var more = true
        // Nothing to send (a read that needs no answer): no buffer is allocated for it.
        while more && context.channel.isWritable && session.wantsWrite {
            var buffer = context.channel.allocator.buffer(capacity: min(configuration.maxBytesPerFlush, max(4096, lastGathered + lastGathered / 4)))
            do {
                more = try session.send(into: &buffer, limit: configuration.maxBytesPerFlush)
            } catch {
                writing = false
                deliverEvents()
                fail(error)
                return
            }
            if buffer.readableBytes > 0 {
                lastGathered = buffer.readableBytes
                context.write(wrapOutboundOut(buffer), promise: nil)
                context.flush()
            }
            // Sending may have closed streams (END_STREAM sent on a half-closed stream, RST).
            if session.hasEvents {
                deliverEvents()
                more = more || session.wantsWrite
            }
        }
        writing = false
        if session.isActive, !session.wantsRead, !session.wantsWrite {
            context.close(promise: nil)
        }
    }

    private func fail(_ error: any Error) {
        guard !failed else { return }
        failed = true
        session?.terminate()
        guard let context else { return }
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }
}
