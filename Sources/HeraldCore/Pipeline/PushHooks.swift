/// A middleware that can also act without suspending, as two hooks around a send: for callers
/// that keep many notifications in flight without a task each (the job runner's batch items).
///
/// A tenant's runtime sends through the hooks only when every middleware of its pipeline has
/// them and each agrees for the send at hand (``hooksApply(to:)``); otherwise the send takes the
/// `async` pipeline (``PushMiddleware/send(_:context:next:)``). Both forms of a middleware must do
/// the same: the hooks run in the pipeline's order — every ``willSend(_:context:)`` outermost
/// first, then the send, then every ``didSend(_:context:startedAt:outcome:)`` innermost first — and
/// a refusal by one middleware is seen by the ``didSend(_:context:startedAt:outcome:)`` of those
/// before it, as an error thrown by `next` would be.
///
/// The hooks run on the caller's thread or on a connection's event loop: they must not block.
/// They cannot change the notification (a middleware that does keeps its `async` form alone).
///
/// ```swift
/// struct CountingMiddleware: SynchronousPushMiddleware {
///     let sent: Counter
///     func send(_ notification: Notification, context: PushContext, next: PushHandler) async throws -> PushResult {
///         let result = try await next.send(notification, context: context)
///         sent.increment()
///         return result
///     }
///     func didSend(_ notification: Notification, context: PushContext, startedAt: ContinuousClock.Instant,
///                  outcome: Result<PushResult, any Error>) -> PushFollowUp? {
///         if case .success = outcome { sent.increment() }
///         return nil
///     }
/// }
/// ```
public protocol SynchronousPushMiddleware: PushMiddleware {
    /// False when this middleware, as configured, needs its `async` form for every send (the
    /// tenant's sends then never take the hooks). Defaults to true.
    var offersHooks: Bool { get }
    /// True when this send may take the hooks; false sends it through the `async` form (for a
    /// send that must wait, or read something only an `async` call gives). Defaults to true.
    func hooksApply(to context: PushContext) -> Bool
    /// Before the send; throws (a ``PushError``) to refuse it. Defaults to nothing.
    func willSend(_ notification: Notification, context: PushContext) throws
    /// After the send (or a refusal by a later middleware), with its outcome. Returns the work
    /// that must end before the outcome is handed on (recording it somewhere `async`), or nil.
    /// - Parameter startedAt: when the hooks began (the first ``willSend(_:context:)``).
    func didSend(
        _ notification: Notification, context: PushContext, startedAt: ContinuousClock.Instant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp?
}

/// Work a ``SynchronousPushMiddleware/didSend(_:context:startedAt:outcome:)`` leaves to do before
/// the send's outcome is handed on.
public typealias PushFollowUp = @Sendable () async -> Void

extension SynchronousPushMiddleware {
    public var offersHooks: Bool { true }
    public func hooksApply(to context: PushContext) -> Bool { true }
    public func willSend(_ notification: Notification, context: PushContext) throws {}
}

/// A tenant's middlewares as hooks, in the pipeline's order (``SynchronousPushMiddleware``).
public struct PushHooks: Sendable {
    public let middlewares: [any SynchronousPushMiddleware]

    /// The hooks of `middlewares`, or nil when one of them has only the `async` form (or, as
    /// configured, needs it: ``SynchronousPushMiddleware/offersHooks``).
    public init?(_ middlewares: [any PushMiddleware]) {
        var hooks: [any SynchronousPushMiddleware] = []
        hooks.reserveCapacity(middlewares.count)
        for middleware in middlewares {
            guard let hooked = middleware as? any SynchronousPushMiddleware, hooked.offersHooks else { return nil }
            hooks.append(hooked)
        }
        self.middlewares = hooks
    }

    /// True when every middleware agrees to take this send by its hooks.
    public func apply(to context: PushContext) -> Bool {
        for middleware in middlewares where !middleware.hooksApply(to: context) { return false }
        return true
    }

    /// Runs every ``SynchronousPushMiddleware/willSend(_:context:)`` in order.
    /// - Returns: how many ran without refusing, and the refusal (nil: none refused).
    public func willSend(_ notification: Notification, context: PushContext) -> (ran: Int, refusal: (any Error)?) {
        for (index, middleware) in middlewares.enumerated() {
            do {
                try middleware.willSend(notification, context: context)
            } catch {
                return (index, error)
            }
        }
        return (middlewares.count, nil)
    }

    /// Runs the ``SynchronousPushMiddleware/didSend(_:context:startedAt:outcome:)`` of the first
    /// `ran` middlewares, innermost first, and returns their follow-ups in that order.
    public func didSend(
        _ notification: Notification, context: PushContext, startedAt: ContinuousClock.Instant,
        outcome: Result<PushResult, any Error>, ran: Int
    ) -> [PushFollowUp] {
        var followUps: [PushFollowUp] = []
        for middleware in middlewares.prefix(ran).reversed() {
            if let followUp = middleware.didSend(notification, context: context, startedAt: startedAt, outcome: outcome) {
                followUps.append(followUp)
            }
        }
        return followUps
    }
}
