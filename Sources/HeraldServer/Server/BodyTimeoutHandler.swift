import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request body does not finish arriving within `timeout` of its
/// head, so that a caller trickling a body (or promising a `Content-Length` it never sends)
/// cannot hold a connection and a handler forever. A head that never finishes is Hummingbird's
/// idle timeout's business (a connection with no whole request is idle).
final class BodyTimeoutHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            timer?.cancel()
            timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
                context.close(promise: nil)
            }
        case .body:
            break
        case .end:
            timer?.cancel()
            timer = nil
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }
}
