/// A tenant's middlewares, composed in the order its YAML lists them, ending in the transport.
///
/// The first middleware is the outermost: it sees the notification first and the result last.
///
/// ```swift
/// let pipeline = SendPipeline([retry, rateLimit, feedback], terminal: transportHandler)
/// let result = try await pipeline.send(notification, context: context)
/// ```
public struct SendPipeline: Sendable {
    /// The middlewares, outermost first.
    public let middlewares: [any PushMiddleware]
    private let entry: PushHandler

    public init(_ middlewares: [any PushMiddleware], terminal: PushHandler) {
        self.middlewares = middlewares
        var handler = terminal
        for middleware in middlewares.reversed() {
            let next = handler
            handler = PushHandler { notification, context in
                try await middleware.send(notification, context: context, next: next)
            }
        }
        self.entry = handler
    }

    nonisolated(nonsending) public func send(_ notification: Notification, context: PushContext) async throws -> PushResult {
        try await entry.send(notification, context: context)
    }
}
