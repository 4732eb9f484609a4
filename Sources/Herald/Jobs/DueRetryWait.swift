import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// The wait of a job whose only unfinished items wait for a retry (``JobFeeder``): it reads the
/// earliest next attempt and sleeps on the runner's clock until that is due; then the feeder
/// claims again.
///
/// While it waits this runner holds none of the job's items (every send ended and its change is
/// written), so no retry of the job becomes due sooner through this runner. What changes in the
/// store unseen (on a shared store, another instance's retries of the job and leases released
/// elsewhere; a cancel made through an instance that did not tell this one) is found by a sleep
/// of at most `longest` (the rescan interval). What ends the job's run wakes it at once: a cancel
/// or a pause stops the job's feed, and the feed's stop and the runner's ``JobRunner/stop()``
/// call ``end()``.
final class DueRetryWait: Sendable {
    private enum State {
        case idle
        /// A wait is under way: ``end()`` resumes it.
        case sleeping(CheckedContinuation<Void, Never>)
        case ended
    }

    private let state = Mutex(State.idle)
    let job: Job
    let store: any PushStore
    let clock: any PushClock
    /// The longest sleep (the runner's rescan interval).
    let longest: Duration
    let logger: Logger

    init(job: Job, store: any PushStore, clock: any PushClock, longest: Duration, logger: Logger) {
        self.job = job
        self.store = store
        self.clock = clock
        self.longest = longest
        self.logger = logger
    }

    /// Ends the wait under way, if any, and every later one: they return false at once.
    func end() {
        let sleeper = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state = .ended }
            guard case .sleeping(let continuation) = state else { return nil }
            return continuation
        }
        sleeper?.resume()
    }

    var hasEnded: Bool {
        state.withLock {
            guard case .ended = $0 else { return false }
            return true
        }
    }

    /// Sleeps until the job's earliest next attempt is due (at most `longest`).
    /// - Returns: true to claim again; false when no item waits for a retry, the read failed,
    ///   or the wait was ended.
    func wait() async -> Bool {
        let next: Date?
        do {
            next = try await store.nextAttempt(tenant: job.tenant, job: job.id)
        } catch {
            logger.storeFailure("cannot read the job's next retry time", error: error)
            return false
        }
        guard let next else { return false }
        let seconds = min(max(0, next.timeIntervalSince(clock.date)), longest.secondsValue)
        guard seconds > 0 else { return !hasEnded }
        // Whole milliseconds, rounded up: the claim that follows finds the retry due.
        return await sleep(until: clock.now.advanced(by: .milliseconds(Int64((seconds * 1000).rounded(.up)))))
    }

    /// Sleeps on the clock until `deadline`, or until ``end()``.
    /// - Returns: true when the deadline came, false when the wait was ended.
    private func sleep(until deadline: PushInstant) async -> Bool {
        let clock = self.clock
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                do {
                    try await clock.sleep(until: deadline)
                    return true
                } catch {
                    return false
                }
            }
            group.addTask {
                await self.untilEnded()
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first && !hasEnded
        }
    }

    /// Returns once ``end()`` is called, or when the task is cancelled.
    private func untilEnded() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    switch state {
                    case .ended:
                        return true
                    case .sleeping:
                        assertionFailure("a job's retry wait has one sleeper at a time")
                        return true
                    case .idle:
                        // Checked under the lock that the cancellation handler takes after the
                        // task is marked cancelled: one of the two resumes the continuation.
                        guard !Task.isCancelled else { return true }
                        state = .sleeping(continuation)
                        return false
                    }
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard case .sleeping(let continuation) = state else { return nil }
                state = .idle
                return continuation
            }
            sleeper?.resume()
        }
    }
}
