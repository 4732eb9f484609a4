import HTTP2Engine
import NIOCore
import NIOEmbedded
import Testing

/// Records every event an engine delivers; optionally reacts to them.
final class EventRecorder: HTTP2EngineDelegate {
    var events: [HTTP2Event] = []
    var onEvent: ((HTTP2EngineHandler, HTTP2Event) -> Void)?

    func http2Engine(_ engine: HTTP2EngineHandler, didReceive event: HTTP2Event) {
        events.append(event)
        onEvent?(engine, event)
    }

    func headers(on stream: Int32) -> [[HTTP2Header]] {
        events.compactMap {
            if case .headers(let id, let headers, _) = $0, id == stream { return Array(headers) }
            return nil
        }
    }

    func body(on stream: Int32) -> [UInt8] {
        var bytes: [UInt8] = []
        for case .data(let id, var data, _) in events where id == stream {
            bytes += data.readBytes(length: data.readableBytes) ?? []
        }
        return bytes
    }

    func closed(_ stream: Int32) -> HTTP2ErrorCode? {
        for case .streamClosed(let id, let code) in events where id == stream { return code }
        return nil
    }

    var settings: [[HTTP2Setting]] {
        events.compactMap { if case .settings(let list) = $0 { return list } else { return nil } }
    }
}

/// Catches errors fired down the pipeline after the engine.
final class ErrorCatcher: ChannelInboundHandler {
    typealias InboundIn = Never
    var errors: [any Error] = []
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        errors.append(error)
    }
}

/// An engine client and an engine server joined by hand: bytes move only when `exchange()`
/// runs, so every test sees each step and nothing depends on timing.
final class EnginePair {
    let client: EmbeddedChannel
    let server: EmbeddedChannel
    let clientEngine: HTTP2EngineHandler
    let serverEngine: HTTP2EngineHandler
    let clientEvents = EventRecorder()
    let serverEvents = EventRecorder()
    let clientErrors = ErrorCatcher()
    let serverErrors = ErrorCatcher()
    /// Every buffer the client wrote, in order (raw HTTP/2: no TLS here).
    var clientWrites: [ByteBuffer] = []
    var serverWrites: [ByteBuffer] = []

    init(
        client clientConfiguration: HTTP2EngineHandler.Configuration = .init(mode: .client),
        server serverConfiguration: HTTP2EngineHandler.Configuration = .init(mode: .server, initialSettings: [.maxConcurrentStreams(100)])
    ) throws {
        client = EmbeddedChannel()
        server = EmbeddedChannel()
        clientEngine = HTTP2EngineHandler(configuration: clientConfiguration)
        serverEngine = HTTP2EngineHandler(configuration: serverConfiguration)
        clientEngine.delegate = clientEvents
        serverEngine.delegate = serverEvents
        try client.pipeline.syncOperations.addHandlers([clientEngine, clientErrors])
        try server.pipeline.syncOperations.addHandlers([serverEngine, serverErrors])
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: 443)
        try client.connect(to: address).wait()
        try server.connect(to: address).wait()
    }

    /// Moves bytes both ways until neither side has anything more to say. `chunkSize`: each
    /// write arrives as reads of at most that many bytes (frames split anywhere).
    @discardableResult
    func exchange(rounds: Int = 50, chunkSize: Int? = nil) throws -> Int {
        var moved = 0
        for _ in 0..<rounds {
            client.embeddedEventLoop.run()
            server.embeddedEventLoop.run()
            var progressed = false
            while let bytes = try client.readOutbound(as: ByteBuffer.self) {
                clientWrites.append(bytes)
                moved += bytes.readableBytes
                progressed = true
                if server.isActive { try Self.deliver(bytes, to: server, chunkSize: chunkSize) }
            }
            if server.isActive { server.pipeline.fireChannelReadComplete() }
            server.embeddedEventLoop.run()
            while let bytes = try server.readOutbound(as: ByteBuffer.self) {
                serverWrites.append(bytes)
                moved += bytes.readableBytes
                progressed = true
                if client.isActive { try Self.deliver(bytes, to: client, chunkSize: chunkSize) }
            }
            if client.isActive { client.pipeline.fireChannelReadComplete() }
            if !progressed { break }
        }
        return moved
    }

    private static func deliver(_ bytes: ByteBuffer, to channel: EmbeddedChannel, chunkSize: Int?) throws {
        guard let chunkSize else {
            try channel.writeInbound(bytes)
            return
        }
        var rest = bytes
        while rest.readableBytes > 0, channel.isActive, let chunk = rest.readSlice(length: min(chunkSize, rest.readableBytes)) {
            try channel.writeInbound(chunk)
        }
    }

    /// A server that answers every finished request with 200 and the request's `apns-id`.
    func answerEveryRequest(status: String = "200", body: ((Int32) -> ByteBuffer?)? = nil) {
        serverEvents.onEvent = { engine, event in
            let finished: Int32?
            switch event {
            case .headers(let id, _, true), .data(let id, _, true): finished = id
            default: finished = nil
            }
            guard let id = finished else { return }
            let payload = body?(id)
            var headers = [HTTP2Header(name: ":status", value: status)]
            if let payload { headers.append(HTTP2Header(name: "content-length", value: "\(payload.readableBytes)")) }
            try? engine.submitResponse(streamID: id, headers: headers, body: payload)
        }
    }

    static func request(path: String = "/3/device/abc", extra: [HTTP2Header] = []) -> [HTTP2Header] {
        [
            HTTP2Header(name: ":method", value: "POST"),
            HTTP2Header(name: ":scheme", value: "https"),
            HTTP2Header(name: ":path", value: path),
            HTTP2Header(name: ":authority", value: "api.push.apple.com"),
        ] + extra
    }

    static func buffer(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    func finish() {
        _ = try? client.finish(acceptAlreadyClosed: true)
        _ = try? server.finish(acceptAlreadyClosed: true)
    }
}

extension HTTP2Header {
    var pair: String { "\(name): \(value)" }
}
