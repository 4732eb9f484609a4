import NIOCore

/// Joins the small buffers swift-nio-http2 writes (one per frame) into one buffer per flush, so
/// TLS seals one record per flush instead of one per frame. Sits between TLS and HTTP/2.
final class SandboxWriteCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var pending: ByteBuffer? = nil
    private var promises: [EventLoopPromise<Void>] = []
    /// Buffers larger than this go through as they are (after what is pending).
    private static let largeWrite = 16 * 1024

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .byteBuffer(var buffer) where buffer.readableBytes < Self.largeWrite:
            if pending == nil {
                pending = context.channel.allocator.buffer(capacity: max(1024, buffer.readableBytes))
            }
            pending!.writeBuffer(&buffer)
            if let promise { promises.append(promise) }
        default:
            writePending(context: context)
            context.write(data, promise: promise)
        }
    }

    func flush(context: ChannelHandlerContext) {
        writePending(context: context)
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        writePending(context: context)
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        writePending(context: context)
    }

    private func writePending(context: ChannelHandlerContext) {
        guard let buffer = pending else { return }
        pending = nil
        let waiting = promises
        promises.removeAll(keepingCapacity: true)
        switch waiting.count {
        case 0:
            context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: nil)
        case 1:
            context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: waiting[0])
        default:
            let combined = context.eventLoop.makePromise(of: Void.self)
            for promise in waiting { combined.futureResult.cascade(to: promise) }
            context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: combined)
        }
    }
}
