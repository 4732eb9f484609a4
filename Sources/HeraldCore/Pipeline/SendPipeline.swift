import Synchronization

/// A tenant's middlewares, run in the order its YAML lists them around the send.
///
/// The first middleware is the outermost: its ``PushMiddleware/willSend(_:context:)`` runs first
/// and its ``PushMiddleware/didSend(_:context:startedAt:outcome:)`` last. The send itself is the
/// caller's (`terminal`: the tenant's transport), started once every middleware has let the
/// notification go on, unless the deadline has passed by then.
///
/// ```swift
/// let pipeline = SendPipeline([rateLimit, feedback, metrics], clock: clock)
/// pipeline.start(notification, context: context, terminal: send) { outcome in … }
/// ```
///
/// A send goes through without a task of its own: a task is made only while a decision waits
/// (``PushDecision/notBefore(_:)``) or an `async` check runs (``PushDecision/check(_:)``; a check
/// that answers by callback needs none), and to run follow-ups. The checks' deadlines are watched
/// together (``CheckDeadlines``).
public struct SendPipeline: Sendable {
    /// The middlewares, outermost first.
    public let middlewares: [any PushMiddleware]
    private let clock: any PushClock
    private let deadlines = CheckDeadlines()

    /// The send at the end of the pipeline: it gets the admitted notification once every
    /// middleware let it go on, and calls its completion exactly once, possibly on another thread.
    public typealias Terminal = @Sendable (
        _ notification: AdmittedNotification, _ context: PushContext,
        _ completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) -> Void

    public init(_ middlewares: [any PushMiddleware], clock: any PushClock = SystemPushClock()) {
        self.middlewares = middlewares
        self.clock = clock
    }

    /// Runs the middlewares and the send, and calls `completion` exactly once with the outcome
    /// (possibly on a connection's event loop: it must not block).
    public func start(
        _ notification: AdmittedNotification, context: PushContext, terminal: @escaping Terminal,
        completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        run(from: 0, notification, context: context, startedAt: clock.now, terminal: terminal, completion: completion)
    }

    /// ``start(_:context:terminal:completion:)``, awaited (its completion is called exactly once).
    public func send(_ notification: AdmittedNotification, context: PushContext, terminal: @escaping Terminal) async throws -> PushResult {
        try await withUnsafeThrowingContinuation { continuation in
            start(notification, context: context, terminal: terminal) { continuation.resume(with: $0) }
        }
    }

    /// The `willSend`s from middleware `first` on, then the send; it stops at a decision that
    /// waits or checks and goes on from the next middleware in a task once that is done.
    private func run(
        from first: Int, _ notification: AdmittedNotification, context: PushContext, startedAt: ContinuousClock.Instant,
        terminal: @escaping Terminal, completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        var index = first
        while index < middlewares.count {
            let decision: PushDecision
            do {
                decision = try middlewares[index].willSend(notification, context: context)
            } catch {
                finish(notification, context: context, startedAt: startedAt, outcome: .failure(error), ran: index, completion: completion)
                return
            }
            index += 1
            let next = index
            switch decision {
            case .proceed:
                continue
            case .notBefore(let instant):
                guard instant > clock.now else { continue }
                guard instant < context.deadline else {
                    // Not worth the wait: the send could not go out before its deadline.
                    let late = PushError.deadlineExceeded(
                        "a plugin's wait would pass the deadline; the notification did not go out", mayHaveReachedAPNs: false)
                    finish(notification, context: context, startedAt: startedAt, outcome: .failure(late), ran: next, completion: completion)
                    return
                }
                let clock = clock
                Task {
                    do {
                        try await clock.sleep(until: instant)
                    } catch {
                        finish(notification, context: context, startedAt: startedAt, outcome: .failure(error), ran: next, completion: completion)
                        return
                    }
                    run(from: next, notification, context: context, startedAt: startedAt, terminal: terminal, completion: completion)
                }
                return
            case .check(let check):
                // The check is bounded by the send's deadline: one that never answers (a plugin
                // waiting on a store that lost the call) ends the send there, not never.
                let race = CheckRace()
                let deadlines = deadlines
                let watched = deadlines.watch(until: context.deadline) {
                    guard race.expire() else { return }
                    let late = PushError.deadlineExceeded(
                        "a plugin's check did not answer before the deadline; the notification did not go out",
                        mayHaveReachedAPNs: false)
                    finish(notification, context: context, startedAt: startedAt, outcome: .failure(late), ran: next - 1, completion: completion)
                }
                let cancel = check.start { answer in
                    guard race.answer() else { return }  // the deadline passed first
                    deadlines.settle(watched)
                    switch answer {
                    case .success:
                        run(from: next, notification, context: context, startedAt: startedAt, terminal: terminal, completion: completion)
                    case .failure(let error):
                        // The middleware that asked refused: it is not asked after the send.
                        finish(notification, context: context, startedAt: startedAt, outcome: .failure(error), ran: next - 1, completion: completion)
                    }
                }
                race.keep(cancel)
                return
            }
        }
        // Nothing waited since the start (the usual case): the start's reading of the clock holds.
        guard (first == 0 ? startedAt : clock.now) < context.deadline else {
            let late = PushError.deadlineExceeded("the deadline passed before the notification went out", mayHaveReachedAPNs: false)
            finish(notification, context: context, startedAt: startedAt, outcome: .failure(late), ran: index, completion: completion)
            return
        }
        terminal(notification, context) { outcome in
            finish(notification, context: context, startedAt: startedAt, outcome: outcome, ran: middlewares.count, completion: completion)
        }
    }

    /// The `didSend`s of the first `ran` middlewares, innermost first; then their follow-ups (in
    /// a task, when there are any); then `completion`.
    private func finish(
        _ notification: AdmittedNotification, context: PushContext, startedAt: ContinuousClock.Instant,
        outcome: Result<PushResult, any Error>, ran: Int, completion: @escaping @Sendable (Result<PushResult, any Error>) -> Void
    ) {
        var followUps: [PushFollowUp] = []
        for middleware in middlewares.prefix(ran).reversed() {
            if let followUp = middleware.didSend(notification, context: context, startedAt: startedAt, outcome: outcome) {
                followUps.append(followUp)
            }
        }
        guard !followUps.isEmpty else { return completion(outcome) }
        Task {
            for followUp in followUps { await followUp() }
            completion(outcome)
        }
    }
}

/// A check and its deadline: whichever ends first settles the send, once. The deadline cancels
/// the check (one that honours cancellation ends then).
private final class CheckRace: Sendable {
    private enum State {
        case running(cancel: (@Sendable () -> Void)?)
        case answered
        case expired
    }
    private let state = Mutex(State.running(cancel: nil))

    /// Keeps what cancels the check (cancelled at once when the deadline has already passed).
    func keep(_ cancel: (@Sendable () -> Void)?) {
        guard let cancel else { return }
        let expired = state.withLock { state -> Bool in
            switch state {
            case .running:
                state = .running(cancel: cancel)
                return false
            case .answered: return false
            case .expired: return true
            }
        }
        if expired { cancel() }
    }

    /// True when the check answered first.
    func answer() -> Bool {
        state.withLock { state in
            guard case .running = state else { return false }
            state = .answered
            return true
        }
    }

    /// True when the deadline passed first; the check is cancelled then.
    func expire() -> Bool {
        let (first, cancel) = state.withLock { state -> (Bool, (@Sendable () -> Void)?) in
            guard case .running(let cancel) = state else { return (false, nil) }
            state = .expired
            return (true, cancel)
        }
        cancel?()
        return first
    }
}
