import Synchronization

/// A tenant's middlewares, run in the order its YAML lists them around the send.
///
/// The first middleware is the outermost: its ``PushMiddleware/willSend(_:context:)`` runs first
/// and its ``PushMiddleware/didSend(_:context:startedAt:outcome:)`` last. The send itself is the
/// caller's (`terminal`: the tenant's transport), started once every middleware has let the
/// notification go on, unless the deadline has passed by then.
///
/// ```swift
/// let pipeline = SendPipeline([rateLimit, feedback, metrics], clock: clock, terminal: send)
/// pipeline.start(notification, context: context) { outcome in … }
/// ```
///
/// A send goes through without a task of its own: a task is made only while a decision waits
/// (``PushDecision/notBefore(_:)``) or an `async` check runs (``PushDecision/check(_:)``; a check
/// that answers by callback needs none), and to run follow-ups. The checks' deadlines are watched
/// together (``DeadlineWatch``).
public struct SendPipeline: Sendable {
    /// The middlewares, outermost first.
    public var middlewares: [any PushMiddleware] { stages.middlewares }
    /// What every send of this pipeline shares, held once: a send holds one reference to it.
    private let stages: Stages

    /// The send at the end of the pipeline: it gets the admitted notification once every
    /// middleware let it go on, and calls its completion exactly once, possibly on another thread,
    /// with APNs' answer or the failure (a transport's
    /// ``PushTransport/startSend(_:deadline:completion:)``). The pipeline makes the attempt's
    /// ``PushResult`` from the answer, so the send needs no callback of its own around its
    /// transport's.
    public typealias Terminal = @Sendable (
        _ notification: AdmittedNotification, _ context: PushContext,
        _ completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void
    ) -> Void

    /// - Parameter terminal: the send at the end of every run of this pipeline (a tenant's
    ///   transport), held once by the pipeline rather than by each send.
    public init(_ middlewares: [any PushMiddleware], clock: any PushClock = SystemPushClock(), terminal: @escaping Terminal) {
        stages = Stages(middlewares: middlewares, clock: clock, terminal: terminal)
    }

    /// Runs the middlewares and the send, and calls `completion` exactly once with the outcome
    /// (possibly on a connection's event loop: it must not block).
    public func start(
        _ notification: consuming AdmittedNotification, context: consuming PushContext,
        completion: @escaping @Sendable (consuming Result<PushResult, any Error>) -> Void
    ) {
        Run(stages: stages, notification: notification, context: context, completion: completion).run(from: 0)
    }

    /// ``start(_:context:completion:)``, awaited (its completion is called exactly once).
    nonisolated(nonsending) public func send(_ notification: AdmittedNotification, context: PushContext) async throws -> PushResult {
        try await withUnsafeThrowingContinuation { continuation in
            start(notification, context: context) { continuation.resume(with: $0) }
        }
    }

    /// What every run of the pipeline shares: the middlewares, the clock, the terminal and the
    /// checks' deadlines.
    private final class Stages: Sendable {
        let middlewares: [any PushMiddleware]
        let clock: any PushClock
        let terminal: Terminal
        let deadlines = DeadlineWatch()

        init(middlewares: [any PushMiddleware], clock: any PushClock, terminal: @escaping Terminal) {
            self.middlewares = middlewares
            self.clock = clock
            self.terminal = terminal
        }

        /// Middleware `index`'s `willSend` (`index` below `middlewares.count`).
        func willSend(_ index: Int, _ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
            try middlewares[index].willSend(notification, context: context)
        }

        /// Middleware `index`'s `didSend` (`index` below `middlewares.count`).
        func didSend(
            _ index: Int, _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
            outcome: Result<PushResult, any Error>
        ) -> PushFollowUp? {
            middlewares[index].didSend(notification, context: context, startedAt: startedAt, outcome: outcome)
        }
    }

    /// One send through the pipeline: everything its steps need, in one object, so that each
    /// callback on its way (the send's answer, a check's answer, the end of a wait) holds one
    /// reference instead of a copy of each value. What all sends share is in ``Stages``: a run
    /// holds only its own values, which keeps it within the allocator's smallest size classes
    /// (120 bytes: one is made for every send).
    private final class Run: Sendable {
        let stages: Stages
        let notification: AdmittedNotification
        let context: PushContext
        /// When the pipeline began (before the first `willSend`).
        let startedAt: PushInstant
        let completion: @Sendable (consuming Result<PushResult, any Error>) -> Void

        init(
            stages: Stages, notification: consuming AdmittedNotification, context: consuming PushContext,
            completion: @escaping @Sendable (consuming Result<PushResult, any Error>) -> Void
        ) {
            self.stages = stages
            self.notification = notification
            self.context = context
            self.startedAt = stages.clock.now
            self.completion = completion
        }

        /// The `willSend`s from middleware `first` on, then the send; it stops at a decision that
        /// waits or checks and goes on from the next middleware in a task once that is done.
        func run(from first: Int) {
            let count = stages.middlewares.count
            var index = first
            while index < count {
                let decision: PushDecision
                do {
                    decision = try stages.willSend(index, notification, context: context)
                } catch {
                    finish(.failure(error), ran: index)
                    return
                }
                index += 1
                let next = index
                switch decision {
                case .proceed:
                    continue
                case .notBefore(let instant):
                    let clock = stages.clock
                    guard instant > clock.now else { continue }
                    guard instant < context.deadline else {
                        // Not worth the wait: the send could not go out before its deadline.
                        let late = PushError.deadlineExceeded(
                            "a plugin's wait would pass the deadline; the notification did not go out", mayHaveReachedAPNs: false)
                        finish(.failure(late), ran: next)
                        return
                    }
                    Task {
                        do {
                            try await clock.sleep(until: instant)
                        } catch {
                            self.finish(.failure(error), ran: next)
                            return
                        }
                        self.run(from: next)
                    }
                    return
                case .check(let check):
                    // The check is bounded by the send's deadline: one that never answers (a plugin
                    // waiting on a store that lost the call) ends the send there, not never.
                    let race = CheckRace()
                    let deadlines = stages.deadlines
                    let watched = deadlines.watch(until: context.deadline) {
                        guard race.expire() else { return }
                        let late = PushError.deadlineExceeded(
                            "a plugin's check did not answer before the deadline; the notification did not go out",
                            mayHaveReachedAPNs: false)
                        self.finish(.failure(late), ran: next - 1)
                    }
                    let cancel = check.start { answer in
                        guard race.answer() else { return }  // the deadline passed first
                        deadlines.settle(watched)
                        switch answer {
                        case .success:
                            self.run(from: next)
                        case .failure(let error):
                            // The middleware that asked refused: it is not asked after the send.
                            self.finish(.failure(error), ran: next - 1)
                        }
                    }
                    race.keep(cancel)
                    return
                }
            }
            // Nothing waited since the start (the usual case): the start's reading of the clock holds.
            guard (first == 0 ? startedAt : stages.clock.now) < context.deadline else {
                let late = PushError.deadlineExceeded("the deadline passed before the notification went out", mayHaveReachedAPNs: false)
                finish(.failure(late), ran: index)
                return
            }
            stages.terminal(notification, context) { answer in
                self.answered(consume answer)
            }
        }

        /// The terminal's answer, as the attempt's outcome, through every middleware's `didSend`.
        private func answered(_ answer: consuming Result<APNsResponse, PushError>) {
            let ran = stages.middlewares.count
            switch consume answer {
            case .success(let response):
                finish(
                    .success(
                        PushResult(
                            notificationID: notification.id, environment: notification.environment, response: response,
                            attempts: context.attempt)), ran: ran)
            case .failure(let error):
                finish(.failure(error), ran: ran)
            }
        }

        /// The `didSend`s of the first `ran` middlewares, innermost first; then their follow-ups
        /// (in a task, when there are any); then `completion`.
        func finish(_ outcome: consuming Result<PushResult, any Error>, ran: Int) {
            var followUps: [PushFollowUp] = []
            var index = min(ran, stages.middlewares.count)
            while index > 0 {
                index -= 1
                if let followUp = stages.didSend(index, notification, context: context, startedAt: startedAt, outcome: outcome) {
                    followUps.append(followUp)
                }
            }
            guard !followUps.isEmpty else { return completion(consume outcome) }
            let settled = consume outcome
            Task {
                for followUp in followUps { await followUp() }
                self.completion(settled)
            }
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
