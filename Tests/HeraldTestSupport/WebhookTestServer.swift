import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A tiny HTTP/1.1 server on 127.0.0.1 (port 0) that records the POSTs it receives and answers
/// with scripted statuses (200 once the script runs out).
public final class WebhookTestServer: Sendable {
    public struct Received: Sendable {
        public var method: String
        public var uri: String
        public var headers: [String: String]
        public var body: [UInt8]
    }

    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel
    private let recorder: Recorder

    public var port: Int { channel.localAddress?.port ?? 0 }
    public var url: String { "http://127.0.0.1:\(port)/hooks/apns" }
    public var received: [Received] { recorder.state.withLock { $0.received } }

    /// - Parameter location: the `Location` of its 3xx answers (a redirect).
    public init(statuses: [Int] = [], location: String? = nil) async throws {
        let recorder = Recorder(statuses: statuses, location: location)
        self.recorder = recorder
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(Handler(recorder: recorder))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
    }

    /// Waits until `count` requests have arrived.
    public func waitForRequests(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = recorder.state.withLock { state -> Bool in
                if state.received.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    public func shutdown() async throws {
        try await channel.close()
        try await group.shutdownGracefully()
    }

    final class Recorder: Sendable {
        let state: Mutex<(received: [Received], statuses: [Int], waiters: [(Int, CheckedContinuation<Void, Never>)])>

        let location: String?

        init(statuses: [Int], location: String?) {
            state = Mutex(([], statuses, []))
            self.location = location
        }

        func record(_ request: Received) -> Int {
            let (status, ready) = state.withLock { state -> (Int, [CheckedContinuation<Void, Never>]) in
                state.received.append(request)
                let status = state.statuses.isEmpty ? 200 : state.statuses.removeFirst()
                let count = state.received.count
                let ready = state.waiters.filter { $0.0 <= count }.map(\.1)
                state.waiters.removeAll { $0.0 <= count }
                return (status, ready)
            }
            for continuation in ready { continuation.resume() }
            return status
        }
    }

    final class Handler: ChannelInboundHandler, @unchecked Sendable {
        // Confined to its channel's event loop.
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let recorder: Recorder
        var head: HTTPRequestHead?
        var body: [UInt8] = []

        init(recorder: Recorder) { self.recorder = recorder }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                body = []
            case .body(var buffer):
                body += buffer.readBytes(length: buffer.readableBytes) ?? []
            case .end:
                guard let head else { return }
                var headers: [String: String] = [:]
                for (name, value) in head.headers { headers[name.lowercased()] = value }
                let status = recorder.record(
                    Received(method: "\(head.method)", uri: head.uri, headers: headers, body: body))
                var responseHeaders = HTTPHeaders()
                responseHeaders.add(name: "content-length", value: "0")
                if (300..<400).contains(status), let location = recorder.location {
                    responseHeaders.add(name: "location", value: location)
                }
                let response = HTTPResponseHead(
                    version: head.version, status: HTTPResponseStatus(statusCode: status), headers: responseHeaders)
                context.write(wrapOutboundOut(.head(response)), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
                self.head = nil
            }
        }
    }
}
