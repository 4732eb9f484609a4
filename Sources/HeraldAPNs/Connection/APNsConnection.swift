import HeraldCore
import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL

/// One HTTP/2 connection to an APNs endpoint: TCP, TLS 1.2+ with ALPN `h2`, the HTTP/2
/// preface, then one stream per notification. The pool creates it, starts it, hands it
/// requests, and hears back through ``APNsConnectionDelegate``.
final class APNsConnection: Sendable {
    struct Configuration: Sendable {
        var stateMachine = APNsConnectionStateMachine.Configuration()
        var connectTimeout: TimeAmount = .seconds(10)
        var housekeepingInterval: TimeAmount = .milliseconds(250)
        /// Let swift-nio-http2 validate every header block, both ways. Off by default: Herald
        /// builds its request headers from checked values (``TenantTransport`` rejects bad
        /// caller-chosen values) and reads only `:status` and `apns-id` from answers, so the
        /// check only cost time (about 7% of the client's CPU per notification).
        var validateHeaderBlocks = false
        /// The SETTINGS Herald sends: no server push, modest windows (APNs answers are small).
        var initialSettings: HTTP2Settings = [
            HTTP2Setting(parameter: .enablePush, value: 0),
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 0),
            HTTP2Setting(parameter: .initialWindowSize, value: 1 << 20),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16 * 1024),
        ]
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
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(configuration.connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                do {
                    let tls = try NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname)
                    let handler = APNsConnectionHandler(
                        connectionID: id, host: host, configuration: configuration.stateMachine,
                        housekeepingInterval: configuration.housekeepingInterval, delegate: delegate, logger: logger)
                    let http2 = NIOHTTP2Handler(
                        mode: .client, initialSettings: configuration.initialSettings,
                        headerBlockValidation: configuration.validateHeaderBlocks ? .enabled : .disabled)
                    try channel.pipeline.syncOperations.addHandlers([tls, http2, handler])
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        bootstrap.connect(host: host, port: endpoint.port).whenComplete { result in
            switch result {
            case .success(let channel):
                guard let handler = try? channel.pipeline.syncOperations.handler(type: APNsConnectionHandler.self) else {
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
                logger.debug("APNs connect failed", metadata: ["herald.error": "\(error)"])
                delegate.connectionClosed(id, failed: true, error: error)
            }
        }
    }

    /// Runs the request on this connection (or hands it back to the pool if it cannot).
    func execute(_ request: APNsRequest) {
        if eventLoop.inEventLoop {
            executeOnLoop(request)
        } else {
            eventLoop.execute { self.executeOnLoop(request) }
        }
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
