import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue` with an interim `100 Continue` as soon as the request's head
/// arrives (RFC 9110 §10.1.1), so that a client waiting before it sends a large body (curl does
/// for any body over 1 MiB) sends it at once instead of after its own timeout, which would add
/// a second to every large batch POST made with curl.
/// Hummingbird does not answer the expectation itself. Any other expectation is left to the
/// route (nothing is sent).
final class ExpectContinueHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), Self.expectsContinue(head.headerFields) {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(data)
    }

    /// True when the only expectation is `100-continue` (case-insensitive, as the RFC says).
    static func expectsContinue(_ fields: HTTPFields) -> Bool {
        let values = fields[values: .expect]
        return values.count == 1 && values[0].lowercased() == "100-continue"
    }
}
