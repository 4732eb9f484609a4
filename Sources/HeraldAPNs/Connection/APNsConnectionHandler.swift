import HeraldCore
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS

/// What a connection tells its pool. Called on the connection's event loop.
protocol APNsConnectionDelegate: AnyObject, Sendable {
    /// Handshake done and the peer's first SETTINGS arrived.
    func connectionReady(_ id: Int, maxStreams: Int)
    /// The peer changed SETTINGS_MAX_CONCURRENT_STREAMS.
    func connectionMaxStreamsChanged(_ id: Int, maxStreams: Int)
    /// No new streams may go to this connection (GOAWAY, drain, idle close).
    func connectionDraining(_ id: Int)
    /// A request the pool gave this connection is done (answered, failed or timed out).
    func connectionRequestFinished(_ id: Int, answered: Bool)
    /// A request the pool gave this connection was never processed by the server: run it elsewhere.
    /// Also counts as finished on this connection.
    func connectionHandBack(_ request: APNsRequest, from id: Int)
    /// The connection is gone. Called once.
    func connectionClosed(_ id: Int, failed: Bool, error: (any Error)?)
}

/// The HTTP/2 client side of one APNs connection, working on frames (no child channel per
/// stream): it sits after `NIOHTTP2Handler` and drives an ``APNsConnectionStateMachine``.
///
/// Everything here runs on the channel's event loop.
final class APNsConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct InFlight {
        let request: APNsRequest
        var status: Int? = nil
        var apnsIDHeader: String? = nil
        var body: ByteBuffer? = nil
    }

    let connectionID: Int
    private let host: String
    private let delegate: any APNsConnectionDelegate
    private let housekeepingInterval: TimeAmount
    private var logger: Logger
    private var stateMachine: APNsConnectionStateMachine
    private var headerIndexing = APNsHeaderIndexing()
    private var streams: [HTTP2StreamID: InFlight] = [:]
    private var context: ChannelHandlerContext?
    private var flushScheduled = false
    private var readInProgress = false
    private var needsFlush = false
    private var timer: Scheduled<Void>?
    private var closeReported = false
    private var closeIsFailure = true
    private var lastError: (any Error)?
    private var goAwayReason: APNsErrorBody?
    /// Happy Eyeballs may try several channels; only the one that connected speaks to the pool.
    var isChosen = false

    init(
        connectionID: Int, host: String, configuration: APNsConnectionStateMachine.Configuration,
        housekeepingInterval: TimeAmount, delegate: any APNsConnectionDelegate, logger: Logger
    ) {
        self.connectionID = connectionID
        self.host = host
        self.delegate = delegate
        self.housekeepingInterval = housekeepingInterval
        self.logger = logger
        self.logger[metadataKey: "herald.connection"] = "\(connectionID)"
        self.stateMachine = APNsConnectionStateMachine(configuration: configuration, now: .now())
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        scheduleHousekeeping(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        connectionGone()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        connectionGone()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream {
            replenishConnectionWindow(context: context, inboundWindowSize: window.inboundWindowSize)
        }
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent {
            if negotiated != "h2" {
                lastError = APNsTransportError.protocolError("the server did not negotiate HTTP/2 (ALPN h2)", mayHaveBeenProcessed: false)
                logger.warning("APNs connection without ALPN h2", metadata: ["herald.alpn": "\(negotiated ?? "none")"])
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            // A stream-level protocol error (the stream is reset); the connection lives on.
            failStream(streamError.streamID, with: .protocolError("HTTP/2 stream error: \(streamError.baseError)", mayHaveBeenProcessed: true))
            return
        }
        if lastError == nil { lastError = error }
        logger.debug("APNs connection error", metadata: ["herald.error": "\(error)"])
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let now = NIODeadline.now()
        readInProgress = true
        stateMachine.frameReceived(now: now)
        switch frame.payload {
        case .headers(let headers):
            guard var stream = streams[frame.streamID] else { break }
            for (name, value, _) in headers.headers {
                if name == ":status" {
                    if stream.status == nil { stream.status = Int(value) }
                } else if name == "apns-id" {
                    stream.apnsIDHeader = value
                }
            }
            if headers.endStream {
                streams[frame.streamID] = nil
                finish(stream, now: now)
            } else {
                streams[frame.streamID] = stream
            }
        case .data(let data):
            guard var stream = streams[frame.streamID] else { break }
            if case .byteBuffer(var bytes) = data.data, bytes.readableBytes > 0 {
                if stream.body == nil {
                    stream.body = bytes
                } else {
                    stream.body!.writeBuffer(&bytes)
                }
            }
            if data.endStream {
                streams[frame.streamID] = nil
                finish(stream, now: now)
            } else {
                streams[frame.streamID] = stream
            }
        case .rstStream(let code):
            guard let stream = streams.removeValue(forKey: frame.streamID) else { break }
            if code == .refusedStream {
                // RFC 9113 8.7: the server did not process it.
                handBack(stream.request, now: now)
            } else {
                fail(stream.request, with: .streamReset(code: "\(code)"), now: now)
            }
        case .settings(.settings(let settings)):
            var maxStreams: Int? = nil
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                maxStreams = setting.value
            }
            switch stateMachine.settingsReceived(maxConcurrentStreams: maxStreams, now: now) {
            case .none:
                break
            case .ready(let max):
                guard isChosen else { context.close(promise: nil); break }
                logger.debug("APNs connection ready", metadata: ["herald.max-streams": "\(max)"])
                delegate.connectionReady(connectionID, maxStreams: max)
            case .maxStreamsChanged(let max):
                logger.debug("APNs stream limit changed", metadata: ["herald.max-streams": "\(max)"])
                delegate.connectionMaxStreamsChanged(connectionID, maxStreams: max)
            }
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            receivedGoAway(lastStreamID: lastStreamID, errorCode: errorCode, opaqueData: opaqueData, now: now)
        case .ping(let data, ack: true):
            stateMachine.pingAckReceived(data: data.integer, now: now)
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        readInProgress = false
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    /// The connection-level receive window (RFC 9113 6.9.2: 65,535 until WINDOW_UPDATE; SETTINGS
    /// do not change it). `NIOHTTP2Handler` leaves replenishing it to whoever reads the DATA (its
    /// stream multiplexer does, and this handler works on frames without one): without a
    /// WINDOW_UPDATE the server stops sending after 64 KiB of answer bodies in total.
    static let connectionWindowTarget = 65_535

    /// Tops the connection window back up to its target once it is half used.
    private func replenishConnectionWindow(context: ChannelHandlerContext, inboundWindowSize: Int?) {
        guard let size = inboundWindowSize, size <= Self.connectionWindowTarget / 2 else { return }
        let increment = Self.connectionWindowTarget - size
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
        if readInProgress { needsFlush = true } else { context.flush() }
    }

    // MARK: Requests

    /// Writes the request on a new stream, or hands it back when this connection cannot take it.
    func write(_ request: APNsRequest) {
        let now = NIODeadline.now()
        guard let context else {
            handBack(request, now: now, openedStream: false)
            return
        }
        if request.deadline <= now {
            request.complete(.failure(.timedOut(mayHaveBeenProcessed: false)))
            delegate.connectionRequestFinished(connectionID, answered: false)
            return
        }
        switch stateMachine.openStream(now: now) {
        case .refuse:
            handBack(request, now: now, openedStream: false)
        case .open(let streamID):
            let headers = headerIndexing.headers(for: request, host: host)
            streams[streamID] = InFlight(request: request)
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: false)))),
                promise: nil)
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(request.payload), endStream: true)))),
                promise: nil)
            scheduleFlush(context: context)
        }
    }

    /// Stop taking streams; close after the open ones finish.
    func drain() {
        switch stateMachine.drainRequested() {
        case .none:
            break
        case .draining(let closeNow):
            delegate.connectionDraining(connectionID)
            if closeNow { closeGracefully() }
        case .closeConnection:
            delegate.connectionDraining(connectionID)
            closeGracefully()
        }
    }

    /// Close now; open streams fail.
    func close() {
        switch stateMachine.closeRequested() {
        case .none:
            break
        case .closeChannel:
            closeIsFailure = false
            context?.close(promise: nil)
        }
    }

    // MARK: Internals

    private func scheduleFlush(context: ChannelHandlerContext) {
        if readInProgress {
            needsFlush = true
            return
        }
        guard !flushScheduled else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.context?.flush()
        }
    }

    private func finish(_ stream: InFlight, now: NIODeadline) {
        let request = stream.request
        guard let status = stream.status else {
            fail(request, with: .protocolError("the response had no :status", mayHaveBeenProcessed: true), now: now)
            return
        }
        let response: APNsResponse
        if status == 200, stream.body == nil {
            let id: NotificationID?
            if let header = stream.apnsIDHeader, header != request.apnsID.rawValue {
                id = try? NotificationID(header)
            } else {
                id = request.apnsID
            }
            response = APNsResponse(status: 200, apnsID: id)
        } else {
            var body = stream.body ?? ByteBuffer()
            let bytes = body.readBytes(length: body.readableBytes) ?? []
            var decoded = APNsResponse(status: status, apnsIDHeader: stream.apnsIDHeader ?? request.apnsID.rawValue, body: bytes)
            if decoded.apnsID == nil { decoded.apnsID = request.apnsID }
            response = decoded
        }
        request.complete(.success(response))
        streamDone(answered: true, now: now)
    }

    private func fail(_ request: APNsRequest, with error: APNsTransportError, now: NIODeadline) {
        request.complete(.failure(error))
        streamDone(answered: false, now: now)
    }

    private func failStream(_ streamID: HTTP2StreamID, with error: APNsTransportError) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        fail(stream.request, with: error, now: .now())
    }

    /// Gives a never-processed request back to the pool.
    private func handBack(_ request: APNsRequest, now: NIODeadline, openedStream: Bool = true) {
        if openedStream {
            if case .closeConnection = stateMachine.streamClosed(now: now) {
                closeGracefully()
            }
        }
        delegate.connectionHandBack(request, from: connectionID)
    }

    private func streamDone(answered: Bool, now: NIODeadline) {
        let action = stateMachine.streamClosed(now: now)
        delegate.connectionRequestFinished(connectionID, answered: answered)
        if case .closeConnection = action {
            closeGracefully()
        }
    }

    private func receivedGoAway(lastStreamID: HTTP2StreamID, errorCode: HTTP2ErrorCode, opaqueData: ByteBuffer?, now: NIODeadline) {
        var reason: APNsErrorBody? = nil
        if var data = opaqueData, data.readableBytes > 0, let bytes = data.readBytes(length: data.readableBytes) {
            reason = APNsErrorBody.decode(bytes)
        }
        goAwayReason = reason ?? goAwayReason
        let above = streams.keys.filter { $0 > lastStreamID }.sorted()
        logger.info(
            "APNs sent GOAWAY",
            metadata: [
                "herald.goaway-reason": "\(reason?.reason.wireValue ?? "none")",
                "herald.goaway-error-code": "\(errorCode)",
                "herald.last-stream-id": "\(lastStreamID)",
                "herald.streams-retried": "\(above.count)",
            ])
        switch stateMachine.goAwayReceived(lastStreamID: lastStreamID, streamsAbove: above.count, now: now) {
        case .none:
            break
        case .drain(_, let closeNow):
            delegate.connectionDraining(connectionID)
            for streamID in above {
                if let stream = streams.removeValue(forKey: streamID) {
                    // Never processed by the server: safe to run on another connection.
                    delegate.connectionHandBack(stream.request, from: connectionID)
                }
            }
            if closeNow { closeGracefully() }
        }
    }

    private func closeGracefully() {
        closeIsFailure = false
        guard let context else { return }
        // Let pending writes (the last stream's frames, a GOAWAY ack) go out first.
        context.eventLoop.assumeIsolated().execute {
            self.context?.close(promise: nil)
        }
    }

    /// The channel is gone (or never came up): fail what is left and tell the pool, once.
    func connectionGone() {
        guard !closeReported, isChosen else { return }
        closeReported = true
        let wasReady = stateMachine.wasReady
        stateMachine.channelClosed()
        timer?.cancel()
        timer = nil
        let failed = closeIsFailure || !wasReady
        if failed {
            logger.debug("APNs connection closed", metadata: ["herald.error": "\(lastError.map { "\($0)" } ?? "none")"])
        }
        delegate.connectionClosed(connectionID, failed: failed, error: lastError)
        let remaining = streams
        streams.removeAll()
        for (_, stream) in remaining.sorted(by: { $0.key < $1.key }) {
            // Written and not answered: the server may have processed it.
            stream.request.complete(.failure(.connectionClosed(mayHaveBeenProcessed: true, lastError)))
        }
    }

    private func scheduleHousekeeping(context: ChannelHandlerContext) {
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: housekeepingInterval) {
            self.housekeeping()
        }
    }

    private func housekeeping() {
        guard let context, !closeReported else { return }
        let now = NIODeadline.now()
        switch stateMachine.tick(now: now) {
        case .none:
            break
        case .sendPing(let data):
            context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: data), ack: false))), promise: nil)
        case .closeIdle:
            logger.debug("APNs connection idle: closing")
            delegate.connectionDraining(connectionID)
            closeGracefully()
        case .closePingTimedOut:
            logger.warning("APNs connection did not answer PING: closing")
            lastError = APNsTransportError.protocolError("no PING answer in time", mayHaveBeenProcessed: true)
            delegate.connectionDraining(connectionID)
            context.close(promise: nil)
        case .closeStartTimedOut:
            logger.warning("APNs connection did not start in time: closing")
            lastError = APNsTransportError.protocolError("the TLS/HTTP/2 handshake did not finish in time", mayHaveBeenProcessed: false)
            context.close(promise: nil)
        }
        if !streams.isEmpty {
            var expired: [HTTP2StreamID] = []
            for (id, stream) in streams where stream.request.deadline <= now {
                expired.append(id)
            }
            for id in expired.sorted() {
                guard let stream = streams.removeValue(forKey: id) else { continue }
                context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))), promise: nil)
                fail(stream.request, with: .timedOut(mayHaveBeenProcessed: true), now: now)
            }
            if !expired.isEmpty { context.flush() }
        }
        if !closeReported {
            scheduleHousekeeping(context: context)
        }
    }
}
