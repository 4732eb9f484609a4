/// One step of a tenant's send pipeline: it may look at or change the notification, refuse it,
/// wait, call `next` (once or, for retry, several times) and look at the result.
///
/// ```swift
/// struct StampMiddleware: PushMiddleware {
///     func send(_ notification: Notification, context: PushContext, next: PushHandler) async throws -> PushResult {
///         context.logger.debug("sending")
///         let result = try await next.send(notification, context: context)
///         context.logger.debug("answered", metadata: ["herald.status": "\(result.status)"])
///         return result
///     }
/// }
/// ```
public protocol PushMiddleware: Sendable {
    func send(_ notification: Notification, context: PushContext, next: PushHandler) async throws -> PushResult
}

/// The rest of the pipeline, as seen from one middleware: the next middlewares and, at the end,
/// the transport.
public struct PushHandler: Sendable {
    private let body: @Sendable (Notification, PushContext) async throws -> PushResult

    public init(_ body: @escaping @Sendable (Notification, PushContext) async throws -> PushResult) {
        self.body = body
    }

    public func send(_ notification: Notification, context: PushContext) async throws -> PushResult {
        try await body(notification, context)
    }
}
