import Foundation
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import Synchronization

/// A deliberately raw HTTP/2 client for driving the sandbox: it writes frames byte by byte
/// (HPACK from NIOHPACK, everything else by hand) and keeps no HTTP/2 state machine, so it can
/// send what a well-behaved client never would (PRIORITY, streams above the limit, indexed
/// `:path`, malformed frames) and so no bug is shared with the sandbox's or Herald's HTTP/2 code.
final class RawH2Client: Sendable {
    enum FrameType: UInt8 {
        case data = 0, headers, priority, rstStream, settings, pushPromise, ping, goAway, windowUpdate, continuation
    }

    struct Response: Sendable {
        var status: Int?
        var headers: [(name: String, value: String)] = []
        var body: [UInt8] = []
        var ended = false
        var resetCode: UInt32? = nil

        func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
        var apnsID: String? { header("apns-id") }
        var reason: String? {
            guard !body.isEmpty,
                let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
            else { return nil }
            return object["reason"] as? String
        }
        var timestamp: Int64? {
            guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
                let number = object["timestamp"] as? NSNumber
            else { return nil }
            return number.int64Value
        }
    }

    struct GoAway: Sendable {
        var lastStreamID: UInt32
        var errorCode: UInt32
        var debugData: [UInt8]
        var reason: String? {
            guard let object = try? JSONSerialization.jsonObject(with: Data(debugData)) as? [String: Any] else {
                return nil
            }
            return object["reason"] as? String
        }
    }

    struct State: Sendable {
        var responses: [UInt32: Response] = [:]
        /// SETTINGS_MAX_CONCURRENT_STREAMS as last announced by the server (nil before any).
        var maxConcurrentStreams: Int? = nil
        var settingsFrames = 0
        var goAways: [GoAway] = []
        var closed = false
        var frameTypes: [UInt8] = []
    }

    struct TimedOut: Error, CustomStringConvertible {
        var what: String
        var description: String { "timed out waiting for \(what)" }
    }

    fileprivate final class Waiter: Sendable {
        let check: @Sendable (State) -> (@Sendable () -> Void)?
        let fail: @Sendable () -> Void
        init(check: @escaping @Sendable (State) -> (@Sendable () -> Void)?, fail: @escaping @Sendable () -> Void) {
            self.check = check
            self.fail = fail
        }
    }

    fileprivate struct Shared {
        var state = State()
        var waiters: [Int: Waiter] = [:]
        var nextWaiter = 0
    }

    /// Made before the connection, so that no frame arrives before there is somewhere to put it.
    fileprivate final class SharedBox: Sendable {
        let shared = Mutex(Shared())

        func update(_ body: (inout State) -> Void) {
            let ready: [@Sendable () -> Void] = self.shared.withLock { shared in
                body(&shared.state)
                var ready: [@Sendable () -> Void] = []
                for (id, waiter) in shared.waiters {
                    if let resume = waiter.check(shared.state) {
                        ready.append(resume)
                        shared.waiters.removeValue(forKey: id)
                    }
                }
                return ready
            }
            for resume in ready { resume() }
        }
    }

    private let box: SharedBox
    private let encoder = Mutex(HPACKEncoder(allocator: ByteBufferAllocator()))
    private let nextStream = Atomic<UInt32>(1)
    let channel: any Channel

    private init(channel: any Channel, box: SharedBox) {
        self.channel = channel
        self.box = box
    }

    /// Connects over TLS (ALPN `h2`), sends the preface and an open-windows SETTINGS.
    static func connect(
        port: Int, trustRootsPEM: String, clientCertificate: (certificatePEM: String, privateKeyPEM: String)? = nil,
        alpn: [String] = ["h2"], sendPreface: Bool = true
    ) async throws -> RawH2Client {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(trustRootsPEM.utf8), format: .pem)])
        tls.applicationProtocols = alpn
        tls.minimumTLSVersion = .tlsv12
        if let clientCertificate {
            tls.certificateChain = [
                .certificate(try NIOSSLCertificate(bytes: Array(clientCertificate.certificatePEM.utf8), format: .pem))
            ]
            tls.privateKey = .privateKey(
                try NIOSSLPrivateKey(bytes: Array(clientCertificate.privateKeyPEM.utf8), format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let box = SharedBox()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let ssl = try NIOSSLClientHandler(context: context, serverHostname: "localhost")
                    try channel.pipeline.syncOperations.addHandler(ssl)
                    try channel.pipeline.syncOperations.addHandler(FrameReader(box: box, sendPreface: sendPreface))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        let client = RawH2Client(channel: channel, box: box)
        return client
    }

    // MARK: Sending

    static func appendFrame(_ type: FrameType, flags: UInt8, stream: UInt32, payload: ByteBuffer, to buffer: inout ByteBuffer) {
        appendFrame(rawType: type.rawValue, flags: flags, stream: stream, payload: payload, to: &buffer)
    }

    static func appendFrame(rawType: UInt8, flags: UInt8, stream: UInt32, payload: ByteBuffer, to buffer: inout ByteBuffer) {
        let length = payload.readableBytes
        buffer.writeInteger(UInt8((length >> 16) & 0xff))
        buffer.writeInteger(UInt8((length >> 8) & 0xff))
        buffer.writeInteger(UInt8(length & 0xff))
        buffer.writeInteger(rawType)
        buffer.writeInteger(flags)
        buffer.writeInteger(stream & 0x7fff_ffff)
        var payload = payload
        buffer.writeBuffer(&payload)
    }

    /// A fresh client stream ID (odd, increasing).
    func newStreamID() -> UInt32 {
        nextStream.wrappingAdd(2, ordering: .relaxed).oldValue
    }

    /// Sends HEADERS (with END_HEADERS), optionally with END_STREAM and a PRIORITY block.
    func sendHeaders(
        stream: UInt32, _ headers: [(String, String, HPACKIndexing)], endStream: Bool, withPriority: Bool = false
    ) throws {
        try encoder.withLock { encoder in
            var block = channel.allocator.buffer(capacity: 256)
            if withPriority {
                block.writeInteger(UInt32(0))  // depends on stream 0, not exclusive
                block.writeInteger(UInt8(15))  // weight 16
            }
            var hpack = HPACKHeaders()
            for (name, value, indexing) in headers { hpack.add(name: name, value: value, indexing: indexing) }
            try encoder.encode(headers: hpack, to: &block)
            var frame = channel.allocator.buffer(capacity: block.readableBytes + 9)
            let flags: UInt8 = 0x4 | (endStream ? 0x1 : 0) | (withPriority ? 0x20 : 0)
            Self.appendFrame(.headers, flags: flags, stream: stream, payload: block, to: &frame)
            channel.writeAndFlush(frame, promise: nil)
        }
    }

    func sendData(stream: UInt32, _ bytes: [UInt8], endStream: Bool) {
        var frame = channel.allocator.buffer(capacity: bytes.count + 9)
        Self.appendFrame(
            .data, flags: endStream ? 0x1 : 0, stream: stream, payload: channel.allocator.buffer(bytes: bytes),
            to: &frame)
        encoder.withLock { _ in channel.writeAndFlush(frame, promise: nil) }
    }

    func sendPriority(stream: UInt32, dependsOn: UInt32 = 0) {
        var payload = channel.allocator.buffer(capacity: 5)
        payload.writeInteger(dependsOn)
        payload.writeInteger(UInt8(15))
        var frame = channel.allocator.buffer(capacity: 14)
        Self.appendFrame(.priority, flags: 0, stream: stream, payload: payload, to: &frame)
        encoder.withLock { _ in channel.writeAndFlush(frame, promise: nil) }
    }

    func sendRSTStream(stream: UInt32, code: UInt32 = 0x8) {
        var payload = channel.allocator.buffer(capacity: 4)
        payload.writeInteger(code)
        var frame = channel.allocator.buffer(capacity: 13)
        Self.appendFrame(.rstStream, flags: 0, stream: stream, payload: payload, to: &frame)
        encoder.withLock { _ in channel.writeAndFlush(frame, promise: nil) }
    }

    /// Writes arbitrary bytes (for malformed-frame tests).
    func sendRaw(_ bytes: [UInt8]) {
        let buffer = channel.allocator.buffer(bytes: bytes)
        encoder.withLock { _ in channel.writeAndFlush(buffer, promise: nil) }
    }

    /// Sends one request (HEADERS, then DATA if there is a body) on a new stream; returns the stream.
    @discardableResult
    func send(_ request: RawRequest, withPriority: Bool = false) throws -> UInt32 {
        let stream = newStreamID()
        try sendHeaders(stream: stream, request.headerList, endStream: request.body.isEmpty, withPriority: withPriority)
        if !request.body.isEmpty { sendData(stream: stream, request.body, endStream: true) }
        return stream
    }

    /// Sends a request and waits for its complete response.
    func roundTrip(_ request: RawRequest) async throws -> Response {
        let stream = try send(request)
        return try await response(stream: stream)
    }

    func close() async {
        try? await channel.close()
    }

    // MARK: Waiting

    /// Waits until `check` returns a value (evaluated on every frame); fails after `timeout`
    /// (a safety net against hangs, never an assertion about speed).
    @discardableResult
    func wait<T: Sendable>(
        _ what: String, timeout: TimeAmount = .seconds(20), _ check: @escaping @Sendable (State) -> T?
    ) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let immediate: T? = box.shared.withLock { shared in
                if let value = check(shared.state) { return value }
                let id = shared.nextWaiter
                shared.nextWaiter += 1
                shared.waiters[id] = Waiter(
                    check: { state in
                        guard let value = check(state) else { return nil }
                        return { continuation.resume(returning: value) }
                    },
                    fail: { continuation.resume(throwing: TimedOut(what: what)) })
                channel.eventLoop.scheduleTask(in: timeout) { [weak self] in
                    self?.expire(id)
                }
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
    }

    private func expire(_ id: Int) {
        let waiter = box.shared.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.fail()
    }

    func response(stream: UInt32) async throws -> Response {
        try await wait("the response on stream \(stream)") { state in
            guard let response = state.responses[stream], response.ended || response.resetCode != nil else { return nil }
            return response
        }
    }

    /// Waits until the server has announced this SETTINGS_MAX_CONCURRENT_STREAMS.
    func waitForMaxConcurrentStreams(_ n: Int) async throws {
        try await wait("SETTINGS_MAX_CONCURRENT_STREAMS = \(n)") { $0.maxConcurrentStreams == n ? true : nil }
    }

    func waitForGoAway() async throws -> GoAway {
        try await wait("a GOAWAY") { $0.goAways.first }
    }

    func waitForClose() async throws {
        try await wait("the connection to close") { $0.closed ? true : nil }
    }

    var state: State { box.shared.withLock { $0.state } }

}

/// Parses the server's frames, answers SETTINGS and PING, decodes header blocks.
private final class FrameReader: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let box: RawH2Client.SharedBox
    private var buffer = ByteBuffer()
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())

    private let sendPreface: Bool

    init(box: RawH2Client.SharedBox, sendPreface: Bool) {
        self.box = box
        self.sendPreface = sendPreface
    }

    /// The preface goes first, from the pipeline itself, so no SETTINGS ACK can overtake it
    /// (TLS holds it until the handshake is done).
    func channelActive(context: ChannelHandlerContext) {
        if sendPreface {
            var buffer = context.channel.allocator.buffer(capacity: 64)
            buffer.writeString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            // SETTINGS: INITIAL_WINDOW_SIZE = 2^31-1, then open the connection window just as wide.
            var settings = context.channel.allocator.buffer(capacity: 6)
            settings.writeInteger(UInt16(0x4))
            settings.writeInteger(UInt32(0x7fff_ffff))
            RawH2Client.appendFrame(.settings, flags: 0, stream: 0, payload: settings, to: &buffer)
            var increment = context.channel.allocator.buffer(capacity: 4)
            increment.writeInteger(UInt32(0x7fff_ffff - 65_535))
            RawH2Client.appendFrame(.windowUpdate, flags: 0, stream: 0, payload: increment, to: &buffer)
            context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        buffer.writeBuffer(&incoming)
        while buffer.readableBytes >= 9 {
            let length =
                Int(buffer.getInteger(at: buffer.readerIndex, as: UInt8.self)!) << 16
                | Int(buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self)!) << 8
                | Int(buffer.getInteger(at: buffer.readerIndex + 2, as: UInt8.self)!)
            guard buffer.readableBytes >= 9 + length else { break }
            buffer.moveReaderIndex(forwardBy: 3)
            let realType = buffer.readInteger(as: UInt8.self)!
            let flags = buffer.readInteger(as: UInt8.self)!
            let stream = buffer.readInteger(as: UInt32.self)! & 0x7fff_ffff
            var payload = buffer.readSlice(length: length)!
            handle(context: context, type: realType, flags: flags, stream: stream, payload: &payload)
        }
        buffer.discardReadBytes()
    }

    private func handle(context: ChannelHandlerContext, type: UInt8, flags: UInt8, stream: UInt32, payload: inout ByteBuffer) {
        let client = box
        switch RawH2Client.FrameType(rawValue: type) {
        case .settings where flags & 0x1 == 0:
            var maxStreams: Int? = nil
            while payload.readableBytes >= 6 {
                let id = payload.readInteger(as: UInt16.self)!
                let value = payload.readInteger(as: UInt32.self)!
                if id == 0x3 { maxStreams = Int(value) }
            }
            var ack = context.channel.allocator.buffer(capacity: 9)
            RawH2Client.appendFrame(.settings, flags: 0x1, stream: 0, payload: ByteBuffer(), to: &ack)
            context.writeAndFlush(wrapOutboundOut(ack), promise: nil)
            client.update { state in
                state.settingsFrames += 1
                if let maxStreams { state.maxConcurrentStreams = maxStreams }
                state.frameTypes.append(type)
            }
        case .ping where flags & 0x1 == 0:
            var pong = context.channel.allocator.buffer(capacity: 17)
            RawH2Client.appendFrame(.ping, flags: 0x1, stream: 0, payload: payload, to: &pong)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .headers:
            var block = payload
            if flags & 0x8 != 0 {  // PADDED
                let pad = Int(block.readInteger(as: UInt8.self)!)
                block = block.getSlice(at: block.readerIndex, length: block.readableBytes - pad)!
            }
            if flags & 0x20 != 0 { block.moveReaderIndex(forwardBy: 5) }
            let headers = (try? decoder.decodeHeaders(from: &block)) ?? HPACKHeaders()
            client.update { state in
                var response = state.responses[stream] ?? RawH2Client.Response()
                for (name, value, _) in headers {
                    if name == ":status" { response.status = Int(value) } else { response.headers.append((name, value)) }
                }
                if flags & 0x1 != 0 { response.ended = true }
                state.responses[stream] = response
                state.frameTypes.append(type)
            }
        case .data:
            let bytes = Array(payload.readableBytesView)
            client.update { state in
                var response = state.responses[stream] ?? RawH2Client.Response()
                response.body += bytes
                if flags & 0x1 != 0 { response.ended = true }
                state.responses[stream] = response
                state.frameTypes.append(type)
            }
        case .rstStream:
            let code = payload.readInteger(as: UInt32.self) ?? 0
            client.update { state in
                var response = state.responses[stream] ?? RawH2Client.Response()
                response.resetCode = code
                state.responses[stream] = response
                state.frameTypes.append(type)
            }
        case .goAway:
            let last = (payload.readInteger(as: UInt32.self) ?? 0) & 0x7fff_ffff
            let code = payload.readInteger(as: UInt32.self) ?? 0
            let debug = Array(payload.readableBytesView)
            client.update { state in
                state.goAways.append(.init(lastStreamID: last, errorCode: code, debugData: debug))
                state.frameTypes.append(type)
            }
        default:
            client.update { $0.frameTypes.append(type) }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        box.update { $0.closed = true }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// An APNs request as the raw client sends it, with Apple's HPACK advice as the default.
struct RawRequest: Sendable {
    var method = "POST"
    var path: String
    var authorization: String? = nil
    var topic: String? = nil
    var pushType: String? = "alert"
    var apnsID: String? = nil
    var priority: String? = nil
    var expiration: String? = nil
    var collapseID: String? = nil
    var extraHeaders: [(String, String, HPACKIndexing)] = []
    var pathIndexing: HPACKIndexing = .nonIndexable
    var body: [UInt8] = Array(#"{"aps":{"alert":"Hello"}}"#.utf8)

    init(device: String = "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0") {
        self.path = "/3/device/" + device
    }

    var headerList: [(String, String, HPACKIndexing)] {
        var list: [(String, String, HPACKIndexing)] = [
            (":method", method, .indexable),
            (":scheme", "https", .indexable),
            (":path", path, pathIndexing),
            (":authority", "localhost", .indexable),
        ]
        if let authorization { list.append(("authorization", authorization, .nonIndexable)) }
        if let topic { list.append(("apns-topic", topic, .indexable)) }
        if let pushType { list.append(("apns-push-type", pushType, .indexable)) }
        if let apnsID { list.append(("apns-id", apnsID, .nonIndexable)) }
        if let priority { list.append(("apns-priority", priority, .indexable)) }
        if let expiration { list.append(("apns-expiration", expiration, .nonIndexable)) }
        if let collapseID { list.append(("apns-collapse-id", collapseID, .nonIndexable)) }
        list += extraHeaders
        return list
    }
}
