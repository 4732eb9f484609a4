import Foundation
import HeraldCore
import NIOCore
import NIOHTTP1
import NIOSOCKS

/// Why a connection through the tenant's proxy did not open. Names the proxy by its address,
/// never by its credentials.
public struct ProxyError: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The proxy itself could not be reached.
        case unreachable
        /// The proxy wants credentials, or refused the ones given (HTTP 407, or 401 from some proxies).
        case authenticationRequired
        /// The proxy refused the tunnel (HTTP 403 or another status; SOCKS "not allowed").
        case refused
        /// The proxy could not reach APNs (HTTP 502 or 504; SOCKS host or network unreachable).
        case targetUnreachable
        /// The tunnel did not open in time.
        case timedOut
        /// The proxy broke its protocol.
        case protocolError
    }

    public let kind: Kind
    /// `scheme://host:port` of the proxy.
    public let proxy: String
    public let detail: String

    public init(_ kind: Kind, proxy: String, detail: String) {
        self.kind = kind
        self.proxy = proxy
        self.detail = detail
    }

    public var description: String { "the proxy \(proxy): \(detail)" }
}

enum ProxyTunnel {
    /// The handlers that open the tunnel to `host:port` through `proxy`, to go first in a new
    /// channel's pipeline. What comes after them (TLS) sees `channelActive` once the tunnel is
    /// open, and its bytes then go to the target.
    static func handlers(
        _ proxy: EgressProxy, host: String, port: Int, timeout: TimeAmount
    ) -> [any ChannelHandler] {
        switch proxy.scheme {
        case .http:
            let encoder = HTTPRequestEncoder()
            let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes))
            let tunnel = HTTPConnectTunnelHandler(
                proxy: proxy, host: host, port: port, timeout: timeout, encoder: encoder, decoder: decoder)
            return [encoder, decoder, tunnel]
        case .socks5:
            return [
                SOCKSClientHandler(targetAddress: .domain(host, port: port)),
                SOCKSTunnelWatcher(proxy: proxy.address, timeout: timeout),
            ]
        }
    }

    /// A connect to the proxy itself that failed.
    static func unreachable(_ proxy: EgressProxy, _ error: any Error) -> ProxyError {
        ProxyError(.unreachable, proxy: proxy.address, detail: "cannot connect to the proxy (\(error))")
    }
}

/// Opens an HTTP `CONNECT` tunnel (NIO's HTTP/1 codec for the exchange), then takes itself and
/// the codec out of the pipeline and lets the handlers after it start (TLS to APNs).
final class HTTPConnectTunnelHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private let proxy: EgressProxy
    private let host: String
    private let port: Int
    private let timeout: TimeAmount
    private let encoder: HTTPRequestEncoder
    private let decoder: ByteToMessageHandler<HTTPResponseDecoder>
    private var timer: Scheduled<Void>?
    private var done = false

    init(
        proxy: EgressProxy, host: String, port: Int, timeout: TimeAmount, encoder: HTTPRequestEncoder,
        decoder: ByteToMessageHandler<HTTPResponseDecoder>
    ) {
        self.proxy = proxy
        self.host = host
        self.port = port
        self.timeout = timeout
        self.encoder = encoder
        self.decoder = decoder
    }

    func channelActive(context: ChannelHandlerContext) {
        // Held back: TLS starts once the tunnel is open.
        let authority = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        var head = HTTPRequestHead(version: .http1_1, method: .CONNECT, uri: authority)
        head.headers.add(name: "Host", value: authority)
        if let user = proxy.username, let password = proxy.password {
            let credentials = Data((Array(user.utf8) + [UInt8(ascii: ":")] + password.bytes)).base64EncodedString()
            head.headers.add(name: "Proxy-Authorization", value: "Basic " + credentials)
        }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.fail(context, .timedOut, "the tunnel did not open within \(handler.timeout.nanoseconds / 1_000_000) ms")
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After the answer's head only the decoder's end of that answer can come here: the
        // tunnel's first bytes are the server's TLS answer to the ClientHello, which is written
        // once the decoder and this handler are gone.
        guard !done else { return }
        // Decided on the answer's head: a CONNECT's 2xx has no body (an HTTP/1.0 answer without a
        // length would otherwise read as a body until the connection closes), and whatever the
        // proxy sends after it is the tunnel's.
        guard case .head(let head) = unwrapInboundIn(data) else { return }
        let status = head.status
        switch status.code {
        case 200..<300:
            established(context)
        case 407, 401:
            // 407 is the standard answer; tinyproxy, among others, answers 401.
            fail(
                context, .authenticationRequired,
                "\(status.code) \(status.reasonPhrase): "
                    + (proxy.username == nil ? "the proxy wants a username and password" : "the proxy refused the username and password"))
        case 502, 504:
            fail(context, .targetUnreachable, "\(status.code) \(status.reasonPhrase): the proxy cannot reach \(host):\(port)")
        default:
            fail(context, .refused, "\(status.code) \(status.reasonPhrase): the proxy refused the tunnel to \(host):\(port)")
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done { fail(context, .protocolError, "the proxy closed the connection before the tunnel opened") }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if done {
            context.fireErrorCaught(error)
        } else {
            fail(context, .protocolError, "the answer to CONNECT is not HTTP (\(error))")
        }
    }

    private func established(_ context: ChannelHandlerContext) {
        done = true
        timer?.cancel()
        // The codec goes first (the decoder reads every outbound write as an HTTP request: TLS's
        // bytes must not reach it), once the decoder's read that brought the answer has ended.
        // Then TLS is told the channel is active, and this handler leaves.
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = loopBound.value
            let pipeline = context.pipeline.syncOperations
            pipeline.removeHandler(handler.encoder).and(pipeline.removeHandler(handler.decoder)).whenComplete { result in
                let (_, context) = loopBound.value
                switch result {
                case .success:
                    context.fireChannelActive()
                    context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
                case .failure(let error):
                    context.fireErrorCaught(error)
                    context.close(promise: nil)
                }
            }
        }
    }

    private func fail(_ context: ChannelHandlerContext, _ kind: ProxyError.Kind, _ detail: String) {
        guard !done else { return }
        done = true
        timer?.cancel()
        context.fireErrorCaught(ProxyError(kind, proxy: proxy.address, detail: detail))
        context.close(promise: nil)
    }
}

/// Behind NIO's SOCKS client: turns its errors into ``ProxyError`` and gives the handshake a
/// deadline.
final class SOCKSTunnelWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let proxy: String
    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?
    private var done = false

    init(proxy: String, timeout: TimeAmount) {
        self.proxy = proxy
        self.timeout = timeout
    }

    func channelActive(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (watcher, context) = loopBound.value
            watcher.fail(context, ProxyError(.timedOut, proxy: watcher.proxy, detail: "the SOCKS5 handshake did not finish in time"))
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done {
            done = true
            timer?.cancel()
            context.fireErrorCaught(
                ProxyError(.protocolError, proxy: proxy, detail: "the proxy closed the connection before the tunnel opened"))
        }
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SOCKSProxyEstablishedEvent, !done {
            done = true
            timer?.cancel()
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard !done else {
            context.fireErrorCaught(error)
            return
        }
        let translated: ProxyError
        if let failed = error as? SOCKSError.ConnectionFailed {
            switch failed.reply {
            case .notAllowed:
                translated = ProxyError(.refused, proxy: proxy, detail: "the proxy does not allow the connection (SOCKS5 reply 2)")
            case .networkUnreachable, .hostUnreachable, .refused, .ttlExpired:
                translated = ProxyError(
                    .targetUnreachable, proxy: proxy, detail: "the proxy cannot reach the target (SOCKS5 reply \(failed.reply.value))")
            default:
                translated = ProxyError(.refused, proxy: proxy, detail: "the proxy failed the connection (SOCKS5 reply \(failed.reply.value))")
            }
        } else if error is SOCKSError.NoValidAuthenticationMethod || error is SOCKSError.InvalidAuthenticationSelection {
            translated = ProxyError(
                .authenticationRequired, proxy: proxy, detail: "the proxy wants an authentication method Herald's SOCKS5 client does not offer")
        } else {
            translated = ProxyError(.protocolError, proxy: proxy, detail: "the SOCKS5 handshake failed (\(error))")
        }
        fail(context, translated)
    }

    private func fail(_ context: ChannelHandlerContext, _ error: ProxyError) {
        guard !done else { return }
        done = true
        timer?.cancel()
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }
}
