import NIOCore
import NIOPosix
import Synchronization

/// A TCP relay on 127.0.0.1 in front of a server that can go silent: while silent it forwards
/// no byte in either direction and closes nothing, like a peer that vanished without a FIN (a
/// NAT that dropped the flow, a pulled cable). Closing either side still closes the other.
final class SilentRelay: Sendable {
    let port: Int
    private let listener: any Channel
    private let box: RelayBox

    private init(port: Int, listener: any Channel, box: RelayBox) {
        self.port = port
        self.listener = listener
        self.box = box
    }

    /// How many reads from the server the relay has passed on to the client: on an idle HTTP/2
    /// connection, the server's frames (PING acknowledgements) one read each.
    var serverReadsRelayed: Int { box.serverReads.load(ordering: .relaxed) }

    var isSilent: Bool { box.silent.load(ordering: .relaxed) }
    func goSilent() { box.silent.store(true, ordering: .relaxed) }
    func resume() { box.silent.store(false, ordering: .relaxed) }

    /// Listens on a free port of 127.0.0.1 and relays each connection to `targetPort`.
    static func start(to targetPort: Int) async throws -> SilentRelay {
        let box = RelayBox()
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                ClientBootstrap(group: inbound.eventLoop)
                    .channelInitializer { outbound in
                        outbound.eventLoop.makeCompletedFuture {
                            try outbound.pipeline.syncOperations.addHandler(Forwarder(partner: inbound, box: box, fromServer: true))
                        }
                    }
                    .connect(host: "127.0.0.1", port: targetPort)
                    .flatMapThrowing { outbound in
                        try inbound.pipeline.syncOperations.addHandler(Forwarder(partner: outbound, box: box, fromServer: false))
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        guard let port = listener.localAddress?.port else { throw RelayError.noPort }
        return SilentRelay(port: port, listener: listener, box: box)
    }

    func close() async {
        try? await listener.close()
    }

    enum RelayError: Error { case noPort }

    /// What the relay and its handlers share.
    private final class RelayBox: Sendable {
        let silent = Atomic<Bool>(false)
        let serverReads = Atomic<Int>(0)
        var isSilent: Bool { silent.load(ordering: .relaxed) }
    }

    /// Writes what one side reads to the other, unless the relay is silent.
    private final class Forwarder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let partner: any Channel
        let box: RelayBox
        /// Reads the server's side (its reads are counted).
        let fromServer: Bool

        init(partner: any Channel, box: RelayBox, fromServer: Bool) {
            self.partner = partner
            self.box = box
            self.fromServer = fromServer
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !box.isSilent else { return }
            if fromServer { box.serverReads.wrappingAdd(1, ordering: .relaxed) }
            partner.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            partner.close(promise: nil)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
