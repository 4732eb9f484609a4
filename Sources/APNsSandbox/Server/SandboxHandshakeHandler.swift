import Foundation
import HTTP2Engine
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import X509

/// Waits for the TLS handshake, then sets the connection up as APNs would: `h2` only; a client
/// certificate makes it a certificate connection (topics from its extension), no certificate a
/// token connection that starts with one concurrent stream.
final class SandboxHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let core: SandboxCore
    private let service: SandboxService

    init(core: SandboxCore, service: SandboxService) {
        self.core = core
        self.service = service
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        guard negotiated == "h2" else {
            core.logger.debug("sandbox refused a connection without ALPN h2")
            context.close(promise: nil)
            return
        }
        do {
            try configureHTTP2(context: context)
        } catch {
            core.logger.debug("sandbox could not set up a connection", metadata: ["herald.error": "\(error)"])
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func configureHTTP2(context: ChannelHandlerContext) throws {
        let pipeline = context.pipeline.syncOperations
        let tls = try pipeline.handler(type: NIOSSLServerHandler.self)
        let auth: SandboxConnectionHandler.Auth
        if let peer = tls.peerCertificate {
            let certificate = try Certificate(derEncoded: try peer.toDERBytes())
            auth = .certificate(topics: try APNsTopicsExtension.topics(of: certificate))
        } else {
            auth = .token
        }
        let limit: Int
        switch auth {
        case .token: limit = 1
        case .certificate: limit = core.maxConcurrentStreams
        }

        let id = core.nextConnectionID()
        // TLS → wire audit (a look at the raw frames) → HTTP/2 engine → the sandbox's answers.
        let audit = SandboxWireAuditHandler(recorder: core.recorder, connectionID: id)
        let engine = SandboxConnectionHandler.makeEngine(core: core, initialLimit: limit)
        let handler = SandboxConnectionHandler(
            core: core, connectionID: id, auth: auth, service: service, initialLimit: limit, engine: engine, auditor: audit.auditor)
        engine.delegate = handler
        audit.connection = handler
        try pipeline.addHandler(audit, position: .after(self))
        try pipeline.addHandler(engine, position: .after(audit))
        try pipeline.addHandler(handler, position: .after(engine))
        core.register(
            id,
            SandboxCore.ConnectionRef(channel: context.channel, handler: NIOLoopBound(handler, eventLoop: context.eventLoop)))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A failed handshake (for example a client certificate the CA did not sign).
        core.logger.debug("sandbox TLS handshake failed", metadata: ["herald.error": "\(error)"])
        context.close(promise: nil)
    }
}
