import APNsSandbox
import HTTP2Engine
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Testing

/// Answers every request with 200 and a body naming its path (server side, one per connection).
private final class EchoServer: HTTP2EngineDelegate {
    var paths: [Int32: String] = [:]

    func http2Engine(_ engine: HTTP2EngineHandler, didReceive event: HTTP2Event) {
        switch event {
        case .headers(let id, let headers, let endStream):
            paths[id] = headers.first { $0.name == ":path" }?.value ?? "?"
            if endStream { answer(engine, id) }
        case .data(let id, _, true):
            answer(engine, id)
        case .streamClosed(let id, _):
            paths[id] = nil
        default:
            break
        }
    }

    private func answer(_ engine: HTTP2EngineHandler, _ id: Int32) {
        let path = paths[id] ?? "?"
        try? engine.submitResponse(
            streamID: id, headers: [HTTP2Header(name: ":status", value: "200"), HTTP2Header(name: "x-path", value: path)],
            body: ByteBuffer(string: path))
    }
}

/// Sends `count` requests once the server's SETTINGS arrive; completes with each stream's answer.
private final class LoopbackClient: HTTP2EngineDelegate {
    let count: Int
    let done: EventLoopPromise<[String]>
    var answers: [Int32: String] = [:]
    var finished = 0
    var started = false

    init(count: Int, done: EventLoopPromise<[String]>) {
        self.count = count
        self.done = done
    }

    func http2Engine(_ engine: HTTP2EngineHandler, didReceive event: HTTP2Event) {
        switch event {
        case .settings where !started:
            started = true
            for index in 0..<count {
                do {
                    _ = try engine.submitRequest(
                        EnginePair.request(path: "/3/device/\(index)"), body: ByteBuffer(string: #"{"aps":{"alert":"\#(index)"}}"#))
                } catch {
                    done.fail(error)
                }
            }
        case .data(let id, var bytes, _):
            answers[id, default: ""] += bytes.readString(length: bytes.readableBytes) ?? ""
        case .streamClosed:
            finished += 1
            if finished == count { done.succeed(answers.keys.sorted().compactMap { answers[$0] }) }
        default:
            break
        }
    }
}

@Suite("HTTP2Engine over TLS on loopback")
struct HTTP2EngineTLSTests {
    @Test("An engine client and an engine server over TLS (ALPN h2) exchange 200 requests")
    func loopback() async throws {
        let ca = try SandboxCertificateAuthority.generate()
        let issued = try ca.issueServerCertificate()
        var serverTLS = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(issued.certificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(issued.privateKeyPEM.utf8), format: .pem)))
        serverTLS.applicationProtocols = ["h2"]
        let serverContext = try NIOSSLContext(configuration: serverTLS)
        var clientTLS = TLSConfiguration.makeClientConfiguration()
        clientTLS.applicationProtocols = ["h2"]
        clientTLS.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(ca.certificatePEM.utf8), format: .pem)])
        let clientContext = try NIOSSLContext(configuration: clientTLS)

        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let engine = HTTP2EngineHandler(configuration: .init(mode: .server, initialSettings: [.maxConcurrentStreams(100)]))
                    engine.delegate = EchoServer()
                    try channel.pipeline.syncOperations.addHandlers([NIOSSLServerHandler(context: serverContext), engine])
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(server.localAddress?.port)

        let count = 200
        let done = group.next().makePromise(of: [String].self)
        let client = try await ClientBootstrap(group: done.futureResult.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let engine = HTTP2EngineHandler(configuration: .init(mode: .client))
                    engine.delegate = LoopbackClient(count: count, done: done)
                    try channel.pipeline.syncOperations.addHandlers([
                        try NIOSSLClientHandler(context: clientContext, serverHostname: "localhost"), engine,
                    ])
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        client.closeFuture.whenComplete { _ in done.fail(HTTP2EngineError.notActive) }

        let answers = try await done.futureResult.get()
        #expect(answers.count == count)
        #expect(Set(answers) == Set((0..<count).map { "/3/device/\($0)" }))

        try await client.close()
        try await server.close()
        try await group.shutdownGracefully()
    }
}
