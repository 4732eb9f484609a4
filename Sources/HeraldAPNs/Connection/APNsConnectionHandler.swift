import HTTP2Engine
import HeraldCore
import Logging
import NIOCore
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
    func connectionRequestFinished(_ id: Int, answered: Bool, now: NIODeadline)
    /// A request the pool gave this connection was never processed by the server: run it elsewhere.
    /// Also counts as finished on this connection.
    func connectionHandBack(_ request: APNsRequest, from id: Int)
    /// The connection is gone. Called once.
    func connectionClosed(_ id: Int, failed: Bool, error: (any Error)?)
}

/// The APNs client side of one connection: the delegate of an ``HTTP2EngineHandler`` (client
/// mode, libnghttp2) that drives an ``APNsConnectionStateMachine``. It sits after the engine in
/// the pipeline to see the channel's lifecycle (TLS handshake, inactive, errors); HTTP/2 events
/// come from the engine as ``HTTP2Event`` values, delivered after nghttp2 returned.
///
/// Everything here runs on the channel's event loop.
final class APNsConnectionHandler: ChannelInboundHandler, HTTP2EngineDelegate {
    typealias InboundIn = Never

    private struct InFlight {
        let request: APNsRequest
        var status: Int? = nil
        var answeredID = AnsweredID.sent
        /// `apns-unique-id` (development environment), as its 16 bytes.
        var uniqueID: APNsUniqueID? = nil
        /// `retry-after` (delta-seconds), on a failure answer.
        var retryAfter: Duration? = nil
        /// `apns-channel-id` (channel management).
        var channelID: String? = nil
        var body: ByteBuffer? = nil
    }

    /// The apns-id an answer carried, against the one sent.
    private enum AnsweredID {
        /// The one sent, or none.
        case sent
        case other(NotificationID)
        /// Not a UUID.
        case malformed
    }

    let connectionID: Int
    private let host: String
    private let delegate: any APNsConnectionDelegate
    private let housekeepingInterval: TimeAmount
    private let engine: HTTP2EngineHandler
    private var logger: Logger
    private var stateMachine: APNsConnectionStateMachine
    private var headerIndexing = APNsHeaderIndexing()
    /// The request being written's header fields (one array reused; nghttp2 copies the bytes).
    private var headerScratch: [HTTP2Header] = []
    private var streams: [HTTP2StreamNumber: InFlight] = [:]
    private var context: ChannelHandlerContext?
    private var timer: Scheduled<Void>?
    private var closeReported = false
    private var closeIsFailure = true
    private var lastError: (any Error)?
    private var goAwayReason: APNsErrorBody?
    /// The endpoint's host is a valid `host` field value (checked once, not per request).
    private let hostIsValid: Bool
    /// Happy Eyeballs may try several channels; only the one that connected speaks to the pool.
    var isChosen = false
    /// The time of the events being delivered: one clock read for all the events of one read
    /// (hundreds of answers at full rate), cleared when the engine delivered them.
    private var eventsNow: NIODeadline?

    init(
        connectionID: Int, host: String, configuration: APNsConnectionStateMachine.Configuration,
        housekeepingInterval: TimeAmount, engine: HTTP2EngineHandler, delegate: any APNsConnectionDelegate, logger: Logger
    ) {
        self.connectionID = connectionID
        self.host = host
        self.hostIsValid = HTTP2Header.isValidValue(host)
        self.delegate = delegate
        self.housekeepingInterval = housekeepingInterval
        self.engine = engine
        self.logger = logger
        self.logger[metadataKey: "herald.connection"] = "\(connectionID)"
        self.stateMachine = APNsConnectionStateMachine(configuration: configuration, now: .now())
        engine.delegate = self
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
        if lastError == nil { lastError = error }
        logger.debug("APNs connection error", metadata: ["herald.error": "\(error)"])
        context.close(promise: nil)
    }

    // MARK: HTTP/2 events (from the engine, outside nghttp2)

    func http2EngineDidDeliverEvents(_ engine: HTTP2EngineHandler) {
        eventsNow = nil
    }

    func http2Engine(_ engine: HTTP2EngineHandler, didReceive event: HTTP2Event) {
        let now: NIODeadline
        if let eventsNow {
            now = eventsNow
        } else {
            now = .now()
            eventsNow = now
        }
        stateMachine.frameReceived(now: now)
        switch event {
        case .headers(let streamID, let headers, let endStream):
            guard let index = streams.index(forKey: streamID) else { break }
            // An answer without a body (most are) ends here: one lookup takes it out.
            var stream = endStream ? streams.remove(at: index).value : streams.values[index]
            // Read as bytes: no String is made for it.
            headers.forEachField { name, value, _ in
                if HTTP2HeaderBlock.bytesEqual(name, Self.statusName) {
                    if stream.status == nil { stream.status = Self.statusCode(value) }
                } else if HTTP2HeaderBlock.bytesEqual(name, Self.apnsIDName)
                    || (stream.request.sendsRequestID && HTTP2HeaderBlock.bytesEqual(name, Self.requestIDName))
                {
                    if let id = APNsResponse.apnsID(header: value) {
                        stream.answeredID = id == stream.request.apnsID ? .sent : .other(id)
                    } else {
                        stream.answeredID = .malformed
                    }
                } else if stream.request.keepsResponseBody, HTTP2HeaderBlock.bytesEqual(name, Self.channelIDName) {
                    // Untrusted: at most the length a channel ID may have, else dropped.
                    if value.count <= ChannelID.maximumLength { stream.channelID = String(decoding: value, as: UTF8.self) }
                } else if HTTP2HeaderBlock.bytesEqual(name, Self.uniqueIDName) {
                    stream.uniqueID = APNsUniqueID(header: value)
                } else if HTTP2HeaderBlock.bytesEqual(name, Self.retryAfterName) {
                    stream.retryAfter = APNsResponse.retryAfter(header: value)
                }
            }
            if endStream {
                finish(stream, now: now)
            } else {
                streams.values[index] = stream
            }
        case .data(let streamID, var bytes, let endStream):
            guard var stream = streams[streamID] else { break }
            let limit = stream.request.keepsResponseBody ? Self.maximumManagementBody : Self.maximumAnswerBody
            if (stream.body?.readableBytes ?? 0) + bytes.readableBytes > limit {
                // Untrusted: an answer larger than any APNs sends ends its stream, not the process.
                streams[streamID] = nil
                try? engine.resetStream(streamID, errorCode: .cancel)
                fail(
                    stream.request, with: .protocolError("the answer's body is larger than \(limit) bytes", mayHaveBeenProcessed: true),
                    now: now)
                break
            }
            if bytes.readableBytes > 0 {
                if stream.body == nil {
                    stream.body = bytes
                } else {
                    stream.body!.writeBuffer(&bytes)
                }
            }
            if endStream {
                streams[streamID] = nil
                finish(stream, now: now)
            } else {
                streams[streamID] = stream
            }
        case .resetReceived, .streamClosed:
            // A stream that ends here without its answer: reset by the peer, refused, or
            // reset by nghttp2 (a malformed answer).
            let (streamID, code): (HTTP2StreamNumber, HTTP2ErrorCode)
            switch event {
            case .resetReceived(let id, let errorCode), .streamClosed(let id, let errorCode): (streamID, code) = (id, errorCode)
            default: return
            }
            guard let stream = streams.removeValue(forKey: streamID) else { break }
            if code == .refusedStream {
                // RFC 9113 8.7: the server did not process it.
                handBack(stream.request, now: now)
            } else if code == .noError {
                fail(stream.request, with: .protocolError("the stream ended without a complete answer", mayHaveBeenProcessed: true), now: now)
            } else {
                fail(stream.request, with: .streamReset(code: "\(code)"), now: now)
            }
        case .settings(let settings):
            var maxStreams: Int? = nil
            for setting in settings where setting.identifier == HTTP2Setting.maxConcurrentStreamsIdentifier {
                maxStreams = Int(setting.value)
            }
            switch stateMachine.settingsReceived(maxConcurrentStreams: maxStreams, now: now) {
            case .none:
                break
            case .ready(let max):
                guard isChosen else { context?.close(promise: nil); break }
                logger.debug("APNs connection ready", metadata: ["herald.max-streams": "\(max)"])
                delegate.connectionReady(connectionID, maxStreams: max)
            case .maxStreamsChanged(let max):
                logger.debug("APNs stream limit changed", metadata: ["herald.max-streams": "\(max)"])
                delegate.connectionMaxStreamsChanged(connectionID, maxStreams: max)
            }
        case .goAway(let lastStreamID, let errorCode, let debugData):
            receivedGoAway(lastStreamID: lastStreamID, errorCode: errorCode, opaqueData: debugData, now: now)
        case .pingAcknowledged(let data):
            stateMachine.pingAckReceived(data: data, now: now)
        case .settingsAcknowledged:
            break
        }
    }

    /// The largest answer body kept: an error's JSON is tens of bytes; a channel list of
    /// 10,000 IDs fits in the management limit.
    static let maximumAnswerBody = 64 * 1024
    static let maximumManagementBody = 8 * 1024 * 1024

    private static var statusName: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: (":status" as StaticString).utf8Start, count: 7) }
    private static var apnsIDName: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: ("apns-id" as StaticString).utf8Start, count: 7) }
    private static var requestIDName: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: ("apns-request-id" as StaticString).utf8Start, count: 15)
    }
    private static var channelIDName: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: ("apns-channel-id" as StaticString).utf8Start, count: 15)
    }
    private static var uniqueIDName: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: ("apns-unique-id" as StaticString).utf8Start, count: 14)
    }
    private static var retryAfterName: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: ("retry-after" as StaticString).utf8Start, count: 11)
    }

    /// A `:status` value: three ASCII digits, else nil (the answer is then malformed).
    private static func statusCode(_ value: UnsafeRawBufferPointer) -> Int? {
        guard value.count == 3 else { return nil }
        var code = 0
        for byte in value {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            code = code * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return code
    }

    // MARK: Requests

    /// Writes the request on a new stream, or hands it back when this connection cannot take it.
    func write(_ request: APNsRequest) {
        // Inside the delivery of an answer (a completion sending the next request) its time serves.
        let now = eventsNow ?? NIODeadline.now()
        guard context != nil else {
            handBack(request, now: now, openedStream: false)
            return
        }
        if request.deadline <= now {
            delegate.connectionRequestFinished(connectionID, answered: false, now: now)
            request.complete(.failure(.timedOut(mayHaveBeenProcessed: false)))
            return
        }
        if request.isCancellable, request.isCancelled {
            delegate.connectionRequestFinished(connectionID, answered: false, now: now)
            request.complete(.failure(.cancelled(mayHaveBeenProcessed: false)))
            return
        }
        switch stateMachine.openStream(now: now) {
        case .refuse:
            handBack(request, now: now, openedStream: false)
        case .open:
            headerIndexing.fill(&headerScratch, for: request, host: host)
            do {
                // nghttp2 numbers the stream; it matches the state machine's count, as every
                // stream opened here goes through both.
                // Not re-validated field by field: every value is built from checked input
                // (the device token, apns-id, push type, priority and expiration by their
                // types; topic and collapse-id by the tenant's admission; the token we
                // signed; the host once per connection, below).
                guard hostIsValid else { throw HTTP2EngineError.invalidHeader }
                let streamID = try engine.submitRequest(headerScratch, bytes: request.payload, validatingHeaders: false)
                headerScratch.removeAll(keepingCapacity: true)
                streams[streamID] = InFlight(request: request)
                if request.isCancellable, let context {
                    let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
                    let loop = context.eventLoop
                    let registered = request.setCancelHandler {
                        loop.execute { handler.value.cancelStream(streamID, of: request) }
                    }
                    if !registered { cancelStream(streamID, of: request) }
                }
            } catch let error as HTTP2EngineError where error == .invalidHeader {
                // The same bytes would fail on any connection: answer now, nothing was written.
                fail(request, with: .invalidRequest(field: "headers", "a header name or value holds bytes HTTP/2 forbids (NUL, CR, LF)"), now: now)
            } catch {
                // Nothing was written (the session is gone): the request can run elsewhere.
                logger.debug("APNs request not submitted", metadata: ["herald.error": "\(error)"])
                handBack(request, now: now)
            }
        }
    }

    /// The caller cancelled a written request: reset its stream (CANCEL), which frees the stream
    /// for the next request, and fail it with `cancelled` (it may have been processed). The
    /// stream's closing event then finds no entry.
    private func cancelStream(_ streamID: HTTP2StreamNumber, of request: APNsRequest) {
        guard let stream = streams[streamID], stream.request === request else { return }
        streams[streamID] = nil
        try? engine.resetStream(streamID, errorCode: .cancel)
        fail(request, with: .cancelled(mayHaveBeenProcessed: true), now: .now())
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

    private func finish(_ stream: InFlight, now: NIODeadline) {
        let request = stream.request
        guard let status = stream.status else {
            fail(request, with: .protocolError("the response had no :status", mayHaveBeenProcessed: true), now: now)
            return
        }
        let response: APNsResponse
        if status == 200, stream.body == nil, !request.keepsResponseBody {
            let id: NotificationID?
            switch stream.answeredID {
            case .sent: id = request.apnsID
            case .other(let other): id = other
            case .malformed: id = nil
            }
            response = APNsResponse(status: 200, apnsID: id, uniqueID: stream.uniqueID)
        } else {
            var body = stream.body ?? ByteBuffer()
            let bytes = body.readBytes(length: body.readableBytes) ?? []
            let id: NotificationID
            if case .other(let other) = stream.answeredID { id = other } else { id = request.apnsID }
            var decoded = APNsResponse(
                status: status, apnsID: id, body: bytes, uniqueID: stream.uniqueID, retryAfter: stream.retryAfter)
            if request.keepsResponseBody {
                decoded.channelID = stream.channelID
                if decoded.isSuccessful {
                    decoded.reason = nil
                    decoded.body = bytes
                }
            }
            response = decoded
        }
        streamDone(answered: true, now: now)
        request.complete(.success(consume response))
    }

    private func fail(_ request: APNsRequest, with error: APNsTransportError, now: NIODeadline) {
        streamDone(answered: false, now: now)
        request.complete(.failure(error))
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

    /// The pool counts the stream as free before its caller hears the answer, so that a send the
    /// caller makes at once (a callback's next item, a task resumed on another thread) finds the
    /// stream free rather than a full connection, which would open another.
    private func streamDone(answered: Bool, now: NIODeadline) {
        let action = stateMachine.streamClosed(now: now)
        delegate.connectionRequestFinished(connectionID, answered: answered, now: now)
        if case .closeConnection = action {
            closeGracefully()
        }
    }

    private func receivedGoAway(lastStreamID: HTTP2StreamNumber, errorCode: HTTP2ErrorCode, opaqueData: ByteBuffer, now: NIODeadline) {
        var reason: APNsErrorBody? = nil
        var data = opaqueData
        if data.readableBytes > 0, let bytes = data.readBytes(length: data.readableBytes) {
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
            do {
                try engine.ping(data)
            } catch {
                logger.debug("APNs PING not sent", metadata: ["herald.error": "\(error)"])
            }
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
            var expired: [HTTP2StreamNumber] = []
            for (id, stream) in streams where stream.request.deadline <= now {
                expired.append(id)
            }
            for id in expired.sorted() {
                guard let stream = streams.removeValue(forKey: id) else { continue }
                // The stream's closing event finds no entry and is ignored.
                try? engine.resetStream(id, errorCode: .cancel)
                fail(stream.request, with: .timedOut(mayHaveBeenProcessed: true), now: now)
            }
        }
        if !closeReported {
            scheduleHousekeeping(context: context)
        }
    }
}
