/// One step of a tenant's send pipeline, as two hooks around the send: ``willSend(_:context:)``
/// before it, ``didSend(_:context:startedAt:outcome:)`` after it.
///
/// Before the send a middleware may look at the notification as its tenant admitted it
/// (``AdmittedNotification``: it does not change it), refuse it (throw a ``PushError``), ask the
/// caller not to send it before a given time (``PushDecision/notBefore(_:)``, the rate limit's
/// answer: the caller waits, no middleware sleeps), or ask for something only an `async` call
/// gives (``PushDecision/check(_:)``, a store read that may refuse). After the send it sees the
/// outcome and may leave work that must end before the outcome is handed on (recording an
/// invalid token), as a ``PushFollowUp``.
///
/// ```swift
/// struct CountingMiddleware: PushMiddleware {
///     let delivered: Counter
///     func didSend(_ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
///                  outcome: Result<PushResult, any Error>) -> PushFollowUp? {
///         if case .success(let result) = outcome, result.isSuccess { delivered.increment() }
///         return nil
///     }
/// }
/// ```
///
/// The hooks run in the pipeline's order (``SendPipeline``): every `willSend` outermost first,
/// then the send, then every `didSend` innermost first. A middleware whose `willSend` refused is
/// not asked after the send; those before it see the refusal as the outcome. Every attempt of a
/// resend passes through every middleware again, with ``PushContext/attempt`` raised.
///
/// Both hooks run on the caller's thread or on a connection's event loop: they must not block,
/// sleep or wait for a lock held across a suspension. Many sends are in flight at once without a
/// task each; a task is made only for a decision that waits or checks, and for follow-ups.
public protocol PushMiddleware: Sendable {
    /// Before the send. Defaults to ``PushDecision/proceed``.
    /// - Throws: a ``PushError`` to refuse the send (it never reaches APNs).
    func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision
    /// After the send (or a refusal by a later middleware), with its outcome. Returns the work
    /// that must end before the outcome is handed on, or nil (the default).
    /// - Parameter startedAt: when the pipeline began (before the first `willSend`).
    func didSend(
        _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp?
}

extension PushMiddleware {
    public func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision { .proceed }

    public func didSend(
        _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp? { nil }
}

/// What a middleware's ``PushMiddleware/willSend(_:context:)`` decides about a send it lets go on.
public enum PushDecision: Sendable {
    /// Go on to the next middleware now.
    case proceed
    /// Go on, but not before this instant (a slot the middleware has reserved). The pipeline
    /// waits without blocking a thread; an instant at or past the send's deadline fails the send
    /// at once with `DeadlineExceeded` (a middleware that knows it refuses instead, with its reason).
    case notBefore(PushInstant)
    /// Go on once this check has answered; a refusal is a ``PushError``. A check still running at
    /// the send's deadline is cancelled (when it can be) and the send fails `DeadlineExceeded` (it
    /// did not go out). Made by ``check(_:)`` (an `async` check) or ``check(answering:)``.
    case check(PushCheck)

    /// Go on once `body` has returned; it throws a ``PushError`` to refuse the send. It runs in a
    /// task of its own, cancelled at the send's deadline.
    public static func check(_ body: @escaping @Sendable () async throws -> Void) -> PushDecision {
        .check(PushCheck(body))
    }

    /// Go on once `start` has called its answer, which it calls exactly once, on any thread,
    /// with `.success` or the ``PushError`` that refuses the send. No task is made for it: for a
    /// check that many sends ask at once and that is answered together (the invalid-token lookups).
    public static func check(answering start: @escaping PushCheck.Start) -> PushDecision {
        .check(PushCheck(answering: start))
    }
}

/// Something a middleware asks before a send that it cannot answer at once (a store read).
public struct PushCheck: Sendable {
    /// The check's answer: `.success`, or the error that refuses the send.
    public typealias Answer = @Sendable (Result<Void, any Error>) -> Void
    /// Starts a check that answers by callback.
    public typealias Start = @Sendable (_ answer: @escaping Answer) -> Void

    /// Starts the check; returns what cancels it, if it can be cancelled.
    let start: @Sendable (_ answer: @escaping Answer) -> (@Sendable () -> Void)?

    /// An `async` check, run in a task of its own; cancelling the check cancels the task.
    public init(_ body: @escaping @Sendable () async throws -> Void) {
        start = { answer in
            let task = Task {
                do {
                    try await body()
                    answer(.success(()))
                } catch {
                    answer(.failure(error))
                }
            }
            return { task.cancel() }
        }
    }

    /// A check that calls `answer` exactly once when it is done.
    public init(answering start: @escaping Start) {
        self.start = { answer in
            start(answer)
            return nil
        }
    }
}

/// Work a ``PushMiddleware/didSend(_:context:startedAt:outcome:)`` leaves to do before the send's
/// outcome is handed on.
public typealias PushFollowUp = @Sendable () async -> Void
