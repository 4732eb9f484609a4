import HeraldCore
import Synchronization

/// Runs store calls, each with a bound on how long its caller waits for it.
///
/// For a store across the network (PostgreSQL): a call whose answer never comes must not hold up
/// its caller for ever. postgres-nio 1.33.2 can lose a query written to a connection whose channel
/// closed at that moment (a server restart or failover): the query's promise is never completed,
/// so the call never returns: unbounded, a job runner would stop for good after a PostgreSQL
/// restart (its scan, a claim or an outcome write waiting). A half-open TCP connection after a
/// network partition has the same effect until the kernel gives up on it (many minutes).
///
/// A call runs in a task of its own, started on the caller's thread (it runs there until it
/// first waits), on the caller's chosen executor when it names one (a PostgreSQL call's
/// connection's event loop): the call then ends where its answer came in, and hands the
/// result over from there. When its limit passes first, the caller gets `timeout()` and the call's task is
/// cancelled; if it still never returns, that task stays suspended with what it holds (one call's
/// memory), while the caller goes on. A caller that is cancelled cancels the call and goes on at
/// once with `CancellationError`, whatever the call does then.
///
/// The limits are watched together (``HeraldCore/DeadlineWatch``: one sleeping task until the
/// earliest deadline; a call adds its deadline to a table and takes it out). A timer a call (a
/// task, a sleep and its cancellation each) would cost more thread wake-ups than the call's own
/// round trip.
public final class StoreDeadline: Sendable {
    /// What the limits are measured on (the system's clock; tests step theirs).
    public let clock: any PushClock
    private let watch: DeadlineWatch

    public init(clock: any PushClock = SystemPushClock()) {
        self.clock = clock
        self.watch = DeadlineWatch(clock: clock)
    }

    /// The deadlines of the calls under way, earliest first (for tests).
    public var pendingDeadlines: [PushInstant] { watch.deadlines }

    /// The result of `operation`, or `timeout()` thrown once `limit` has passed on ``clock``
    /// without it.
    /// - Parameter executor: where `operation`'s task runs (nil: the global executor, once it
    ///   first waits).
    public func run<T: Sendable>(
        limit: Duration, on executor: (any TaskExecutor)? = nil, timeout: @escaping @Sendable () -> any Error,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let call = Call<T>()
        let work = Task.immediate(executorPreference: executor) { call.finish(await Result(catching: operation)) }
        let id = watch.watch(until: clock.now.advanced(by: limit)) {
            if call.finish(.failure(timeout())) { work.cancel() }
        }
        defer { watch.settle(id) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { call.attach($0) }
        } onCancel: {
            // The caller goes on at once, as at the deadline: a call that ignores cancellation
            // (a query postgres-nio lost) must not hold up a shutdown for the whole limit.
            work.cancel()
            call.finish(.failure(CancellationError()))
        }
    }

    /// The first outcome (the call's, or the deadline's) and the caller waiting for it.
    private final class Call<T: Sendable>: Sendable {
        private struct State {
            var waiter: CheckedContinuation<T, any Error>?
            var outcome: Result<T, any Error>?
        }
        private let state = Mutex(State())

        /// The caller waits: resumed at once when the outcome is already there.
        func attach(_ waiter: CheckedContinuation<T, any Error>) {
            let ready = state.withLock { state -> Result<T, any Error>? in
                if let outcome = state.outcome { return outcome }
                state.waiter = waiter
                return nil
            }
            if let ready { waiter.resume(with: ready) }
        }

        /// Sets the outcome if none is set yet and hands it to the waiting caller.
        /// - Returns: true when this outcome was the first.
        @discardableResult
        func finish(_ outcome: Result<T, any Error>) -> Bool {
            let (first, waiter) = state.withLock { state -> (Bool, CheckedContinuation<T, any Error>?) in
                guard state.outcome == nil else { return (false, nil) }
                state.outcome = outcome
                defer { state.waiter = nil }
                return (true, state.waiter)
            }
            waiter?.resume(with: outcome)
            return first
        }
    }
}

extension Result where Failure == any Error {
    /// The result of an `async` throwing body.
    fileprivate init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

/// Store calls that ended without the store's answer (``StoreError/timedOut(_:)``,
/// ``StoreError/unavailable(_:)``) since the store opened: what `/metrics` shows as
/// `herald_store_calls_unanswered_total`. A PostgreSQL store counts them; SQLite's calls are local.
public struct UnansweredStoreCalls: Sendable, Hashable {
    public var timedOut: Int
    public var unavailable: Int

    public init(timedOut: Int = 0, unavailable: Int = 0) {
        self.timedOut = timedOut
        self.unavailable = unavailable
    }
}

/// A store that counts its calls left without an answer.
public protocol UnansweredCallCounting: Sendable {
    var unansweredCalls: UnansweredStoreCalls { get }
}

/// The counts behind ``UnansweredCallCounting``: bumped where a call's failure is classified.
public final class UnansweredCallCounter: Sendable {
    private let timedOut = Atomic<Int>(0)
    private let unavailable = Atomic<Int>(0)

    public init() {}

    /// Counts `error` when it is a call left without an answer; other errors are not counted.
    public func count(_ error: any Error) {
        guard let error = error as? StoreError else { return }
        if error.isTimedOut {
            timedOut.wrappingAdd(1, ordering: .relaxed)
        } else if error.isUnavailable {
            unavailable.wrappingAdd(1, ordering: .relaxed)
        }
    }

    public var counts: UnansweredStoreCalls {
        UnansweredStoreCalls(timedOut: timedOut.load(ordering: .relaxed), unavailable: unavailable.load(ordering: .relaxed))
    }
}
