import NIOCore
import NIOPosix
import Synchronization

/// A TCP proxy on 127.0.0.1 in front of a server, for the tests of what a store does when its
/// server stops answering: while ``silent`` is set it forwards nothing either way and keeps every
/// connection open (a network partition, or a query the client lost: the call waits for an
/// answer that never comes); ``cutConnections()`` closes what is open (the server went away).
public final class SilentLinkProxy: Sendable {
    public let port: Int
    private let server: any Channel
    private let state = Mutex(State())

    private struct State {
        var silent = false
        var open: [any Channel] = []
        var heldBack = 0
    }

    public var silent: Bool {
        get { state.withLock { $0.silent } }
        set { state.withLock { $0.silent = newValue } }
    }

    /// Bytes either side sent while the link was silent (never forwarded): a call's request
    /// reached the link once this grows.
    public var heldBackBytes: Int { state.withLock { $0.heldBack } }

    /// True (and the bytes counted) when the link is silent.
    fileprivate func holdBack(_ count: Int) -> Bool {
        state.withLock { state in
            guard state.silent else { return false }
            state.heldBack += count
            return true
        }
    }

    private init(server: any Channel, port: Int) {
        self.server = server
        self.port = port
    }

    public static func start(targetHost: String, targetPort: Int) async throws -> SilentLinkProxy {
        let group = MultiThreadedEventLoopGroup.singleton
        let proxy = Box()
        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                ClientBootstrap(group: inbound.eventLoop).connect(host: targetHost, port: targetPort).flatMap { outbound in
                    proxy.value?.track(inbound, outbound)
                    return inbound.pipeline.addHandler(Forward(to: outbound, proxy: proxy)).flatMap {
                        outbound.pipeline.addHandler(Forward(to: inbound, proxy: proxy))
                    }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = server.localAddress?.port else { throw ProxyError() }
        let started = SilentLinkProxy(server: server, port: port)
        proxy.value = started
        return started
    }

    /// Closes every proxied connection (both sides); new ones are accepted as before.
    public func cutConnections() {
        let open = state.withLock { state -> [any Channel] in
            defer { state.open.removeAll() }
            return state.open
        }
        for channel in open { channel.close(promise: nil) }
    }

    public func stop() async {
        cutConnections()
        try? await server.close()
    }

    private func track(_ channels: any Channel...) {
        state.withLock { $0.open.append(contentsOf: channels) }
    }

    private struct ProxyError: Error {}

    /// The proxy, set once it is listening (the initializer runs only for connections after that).
    private final class Box: Sendable {
        private let slot = Mutex<SilentLinkProxy?>(nil)
        var value: SilentLinkProxy? {
            get { slot.withLock { $0 } }
            set { slot.withLock { $0 = newValue } }
        }
    }

    /// Forwards what one side sends to the other, unless the link is silent; closing one side
    /// closes the other.
    private final class Forward: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let partner: any Channel
        let proxy: Box

        init(to partner: any Channel, proxy: Box) {
            self.partner = partner
            self.proxy = proxy
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            if proxy.value?.holdBack(bytes.readableBytes) == true { return }
            partner.writeAndFlush(bytes, promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            partner.close(promise: nil)
            context.fireChannelInactive()
        }
    }
}
