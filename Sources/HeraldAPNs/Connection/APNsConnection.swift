import EventLoopExecutors
import HTTP2Engine
import HeraldCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// One HTTP/2 connection to an APNs endpoint: TCP, TLS 1.2+ with ALPN `h2`, the HTTP/2
/// preface, then one stream per notification. The pool creates it, starts it, hands it
/// requests, and hears back through ``APNsConnectionDelegate``.
final class APNsConnection: Sendable {
    struct Configuration: Sendable {
        var stateMachine = APNsConnectionStateMachine.Configuration()
        var connectTimeout: TimeAmount = .seconds(10)
        /// The outbound proxy the connection goes through (when it applies to the endpoint's host).
        var proxy: EgressProxy? = nil
        var housekeepingInterval: TimeAmount = .milliseconds(250)
        /// The HTTP/2 engine (libnghttp2) under the connection: Herald's SETTINGS (no server
        /// push, no streams from the server, modest windows: APNs answers are small), bounds on
        /// what the server may send, and nghttp2's checks of the answers' HTTP semantics.
        var engine = HTTP2EngineHandler.Configuration(
            mode: .client,
            initialSettings: [.enablePush(0), .maxConcurrentStreams(0), .initialWindowSize(1 << 20), .maxHeaderListSize(16 * 1024)],
            connectionWindowSize: 1 << 20,
            maxHeaderListSize: 16 * 1024,
            maxBodySize: 64 * 1024,
            maxTrackedStreams: 2 * 1024,
            maxBytesPerFlush: 256 * 1024,
            validatesHTTPMessaging: true)
    }

    private struct LoopState {
        var handler: APNsConnectionHandler?
        var channel: (any Channel)?
        var closeRequested = false
        var drainRequested = false
    }

    let id: Int
    let eventLoop: any EventLoop
    private let endpoint: APNsEndpoint
    private let sslContext: NIOSSLContext
    private let configuration: Configuration
    private let delegate: any APNsConnectionDelegate
    private let logger: Logger
    private let state: NIOLoopBoundBox<LoopState>
    /// Requests handed over from other threads and not yet taken up by the loop. Bounded by the
    /// pool: it hands a connection a request only for a stream the connection has free.
    private let incoming = LoopHandOff<APNsRequest>()

    init(
        id: Int, endpoint: APNsEndpoint, sslContext: NIOSSLContext, configuration: Configuration,
        eventLoop: any EventLoop, delegate: any APNsConnectionDelegate, logger: Logger
    ) {
        self.id = id
        self.endpoint = endpoint
        self.sslContext = sslContext
        self.configuration = configuration
        self.eventLoop = eventLoop
        self.delegate = delegate
        self.logger = logger
        self.state = NIOLoopBoundBox.makeBoxSendingValue(LoopState(), eventLoop: eventLoop)
    }

    /// Connects. The outcome arrives through the delegate (`connectionReady` or `connectionClosed`).
    func start() {
        let host = endpoint.host
        let serverHostname: String? = Self.isIPAddress(host) ? nil : host
        let sslContext = self.sslContext
        let configuration = self.configuration
        let delegate = self.delegate
        let logger = self.logger
        let id = self.id
        let port = endpoint.port
        let proxy = configuration.proxy.flatMap { $0.applies(to: host) ? $0 : nil }
        // The handlers the initializer made, by channel (a name with several addresses may start
        // more than one), kept here rather than looked up in the pipeline later: a channel the
        // peer closed before the connect callback ran has an empty pipeline, and its handler is
        // what reports why it closed.
        let made = NIOLoopBoundBox.makeBoxSendingValue([ObjectIdentifier: APNsConnectionHandler](), eventLoop: eventLoop)
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(configuration.connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                do {
                    let tls = try NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname)
                    let engine = HTTP2EngineHandler(configuration: configuration.engine)
                    let handler = APNsConnectionHandler(
                        connectionID: id, host: host, configuration: configuration.stateMachine,
                        housekeepingInterval: configuration.housekeepingInterval, engine: engine, delegate: delegate, logger: logger)
                    if let proxy {
                        try channel.pipeline.syncOperations.addHandlers(
                            ProxyTunnel.handlers(proxy, host: host, port: port, timeout: configuration.connectTimeout))
                    }
                    try channel.pipeline.syncOperations.addHandlers([tls, engine, handler])
                    made.value[ObjectIdentifier(channel)] = handler
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let (connectHost, connectPort) = proxy.map { ($0.host, $0.port) } ?? (host, port)
        bootstrap.connect(host: connectHost, port: connectPort).whenComplete { result in
            switch result {
            case .success(let channel):
                let handler = made.value[ObjectIdentifier(channel)]
                made.value.removeAll()
                guard let handler else {
                    channel.close(promise: nil)
                    delegate.connectionClosed(id, failed: true, error: APNsTransportError.protocolError("the connection pipeline is incomplete", mayHaveBeenProcessed: false))
                    return
                }
                handler.isChosen = true
                self.state.value.handler = handler
                self.state.value.channel = channel
                if !channel.isActive {
                    handler.connectionGone()
                } else if self.state.value.closeRequested {
                    handler.close()
                } else if self.state.value.drainRequested {
                    handler.drain()
                }
            case .failure(let error):
                let reported: any Error = proxy.map { ProxyTunnel.unreachable($0, error) } ?? error
                logger.debug("APNs connect failed", metadata: ["herald.error": "\(reported)"])
                delegate.connectionClosed(id, failed: true, error: reported)
            }
        }
    }

    /// Runs the request on this connection (or hands it back to the pool if it cannot).
    func execute(_ request: APNsRequest) {
        if eventLoop.inEventLoop {
            executeOnLoop(request)
            return
        }
        // From another thread: queued for the loop, with one loop task for all the requests
        // that arrive before it runs (not a task, a closure and a wake-up per request).
        if incoming.append(request) { eventLoop.execute { self.runIncoming() } }
    }

    /// Runs the requests queued from other threads, in the order they came.
    private func runIncoming() {
        incoming.runQueued { request in executeOnLoop(request) }
    }

    func execute(_ requests: [APNsRequest]) {
        if eventLoop.inEventLoop {
            for request in requests { executeOnLoop(request) }
        } else {
            eventLoop.execute {
                for request in requests { self.executeOnLoop(request) }
            }
        }
    }

    private func executeOnLoop(_ request: APNsRequest) {
        if let handler = state.value.handler {
            handler.write(request)
        } else {
            delegate.connectionHandBack(request, from: id)
        }
    }

    /// Finish the open streams, then close.
    func drain() {
        eventLoop.execute {
            if let handler = self.state.value.handler {
                handler.drain()
            } else {
                self.state.value.drainRequested = true
            }
        }
    }

    /// Close now; open streams fail.
    func close() {
        eventLoop.execute {
            if let handler = self.state.value.handler {
                handler.close()
            } else {
                self.state.value.closeRequested = true
            }
        }
    }

    static func isIPAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}
