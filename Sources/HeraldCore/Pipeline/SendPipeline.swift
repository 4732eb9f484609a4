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
/// (``PushDecision/notBefore(_:)``) or checks (``PushDecision/check(_:)``), and to run follow-ups.
public struct SendPipeline: Sendable {
    /// The middlewares, outermost first.
    public let middlewares: [any PushMiddleware]
    private let clock: any PushClock

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
                race.start(
                    check: Task {
                        let answer: Result<Void, any Error>
                        do {
                            try await check()
                            answer = .success(())
                        } catch {
                            answer = .failure(error)
                        }
                        guard race.settle(byCheck: true) else { return }
                        switch answer {
                        case .success:
                            run(from: next, notification, context: context, startedAt: startedAt, terminal: terminal, completion: completion)
                        case .failure(let error):
                            // The middleware that asked refused: it is not asked after the send.
                            finish(notification, context: context, startedAt: startedAt, outcome: .failure(error), ran: next - 1, completion: completion)
                        }
                    },
                    timer: Task {
                        do {
                            try await Task.sleep(until: context.deadline, clock: .continuous)
                        } catch {
                            return  // the check answered first
                        }
                        guard race.settle(byCheck: false) else { return }
                        let late = PushError.deadlineExceeded(
                            "a plugin's check did not answer before the deadline; the notification did not go out",
                            mayHaveReachedAPNs: false)
                        finish(notification, context: context, startedAt: startedAt, outcome: .failure(late), ran: next - 1, completion: completion)
                    })
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

/// A check and its deadline: whichever ends first settles the send, once. The check's answer
/// cancels the deadline's timer (no sleeping task outlives its check); the deadline cancels the
/// check (a check that honours cancellation ends then).
private final class CheckRace: Sendable {
    private struct State {
        var settled = false
        var check: Task<Void, Never>?
        var timer: Task<Void, Never>?
    }
    private let state = Mutex(State())

    /// Keeps the two tasks, to cancel the loser (at once when the race is already settled).
    func start(check: Task<Void, Never>, timer: Task<Void, Never>) {
        let settled = state.withLock { state -> Bool in
            if !state.settled { (state.check, state.timer) = (check, timer) }
            return state.settled
        }
        // Settled before the tasks were kept: the winner has ended; the loser is cancelled.
        if settled {
            check.cancel()
            timer.cancel()
        }
    }

    /// True for the first caller, which settles the send; the other task is cancelled then.
    func settle(byCheck: Bool) -> Bool {
        let (first, loser) = state.withLock { state -> (Bool, Task<Void, Never>?) in
            guard !state.settled else { return (false, nil) }
            state.settled = true
            defer { (state.check, state.timer) = (nil, nil) }
            return (true, byCheck ? state.timer : state.check)
        }
        loser?.cancel()
        return first
    }
}
