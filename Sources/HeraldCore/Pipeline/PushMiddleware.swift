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
///
/// `send` runs on its caller's executor (`nonisolated(nonsending)`): a pipeline's steps follow one
/// another without an executor switch at each step. A plugin written without the attribute still
/// conforms (its steps then switch to the global executor, as plain async functions do).
public protocol PushMiddleware: Sendable {
    nonisolated(nonsending) func send(_ notification: Notification, context: PushContext, next: PushHandler) async throws -> PushResult
}

/// The rest of the pipeline, as seen from one middleware: the next middlewares and, at the end,
/// the transport.
public struct PushHandler: Sendable {
    private let body: nonisolated(nonsending) @Sendable (Notification, PushContext) async throws -> PushResult

    public init(_ body: nonisolated(nonsending) @escaping @Sendable (Notification, PushContext) async throws -> PushResult) {
        self.body = body
    }

    nonisolated(nonsending) public func send(_ notification: Notification, context: PushContext) async throws -> PushResult {
        try await body(notification, context)
    }
}
