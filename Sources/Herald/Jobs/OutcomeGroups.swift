import HeraldCore
import HeraldStore
import Synchronization

/// The outcomes (and next attempts) of one job run's sends, written to the store in commit groups
/// by one writer (``runWriter(_:)``) while the send tasks go on sending.
///
/// A send task does not wait for its item's outcome to be durable; instead it reserves a slot
/// (``reserveIfFree()``, else ``waitForSlot()``) before it sends an item, and a slot is freed
/// only when that item's change is committed (or the item was not sent). At most ``limit``
/// items of the job are sent and not durable at once: those on the wire (bounded by the tenant's
/// permits) plus the outcomes waiting for, or in, the next write (``groupSize`` a write). That is the duplicate window after a crash
/// under at-least-once: the items on the wire and one commit group, never more.
///
/// A failed write stops the job's run (its send tasks send nothing more): the items of that group
/// stay pending in the store and are sent again (at-least-once) or reported `unknown` from
/// their wire mark (at-most-once) when the job resumes.
final class OutcomeGroups: Sendable {
    private struct State {
        var waiting: [JobItemChange] = []
        /// Of `waiting`, which are changes of watched items (``add(_:watched:)``).
        var waitingWatched: [Bool] = []
        /// Items taken (a slot reserved) whose change is not committed yet.
        var undurable = 0
        /// Set when every send task ended: the writer writes what is left and returns.
        var closed = false
        /// Set when a write failed: no slot is handed out any more.
        var failed = false
        var writer: CheckedContinuation<Void, Never>?
        var slotWaiters: [CheckedContinuation<Bool, Never>] = []
        /// Waiting for every taken item's change to be committed (``waitUntilDurable()``).
        var durableWaiters: [CheckedContinuation<Bool, Never>] = []
        /// Watched items (``watch(_:)``) whose change is not committed yet and that were not
        /// given up.
        var watched = 0
        /// Waiting for the watched items (``waitUntilWatchedDurable()``).
        var watchWaiters: [CheckedContinuation<Bool, Never>] = []
        /// Set when the job's feed stopped (``endWatch()``): watched items it never handed out
        /// will not report, so nobody waits for them any more.
        var watchEnded = false

        /// `count` watched items' changes are committed, or they were not sent: the
        /// watch-waiters wake once none is left.
        mutating func unwatch(_ count: Int, into wakes: inout Wakes) {
            guard count > 0 else { return }
            // Every watched item reports once (`add` or `cancel` with `watched: true`): more
            // reports than watches is a bug in the runner, caught by the tests (debug builds);
            // a release build clamps at zero rather than trap.
            assert(watched >= count, "more watched items reported (\(count)) than watched (\(watched))")
            watched -= count
            if watched <= 0 {
                watched = 0
                for waiter in watchWaiters { wakes.add(waiter, true) }
                watchWaiters.removeAll()
            }
        }

        /// `count` reserved slots are free again (their changes committed, or their items not
        /// sent): hands them to the slot waiters, longest first, and wakes the durable-waiters
        /// once nothing is left undurable.
        mutating func release(_ count: Int, limit: Int) -> Wakes {
            undurable -= count
            var wakes = Wakes()
            while !failed, undurable < limit, !slotWaiters.isEmpty {
                undurable += 1
                wakes.add(slotWaiters.removeFirst(), true)
            }
            if undurable == 0 {
                for waiter in durableWaiters { wakes.add(waiter, true) }
                durableWaiters.removeAll()
            }
            return wakes
        }

        /// A write failed: every waiter is answered false, and no slot is handed out any more.
        mutating func fail() -> Wakes {
            failed = true
            var wakes = Wakes()
            for waiter in slotWaiters + durableWaiters + watchWaiters { wakes.add(waiter, false) }
            slotWaiters.removeAll()
            durableWaiters.removeAll()
            watchWaiters.removeAll()
            return wakes
        }
    }

    /// Waiters to resume once the lock is released, each with its answer.
    private struct Wakes {
        private var waiters: [(CheckedContinuation<Bool, Never>, Bool)] = []

        mutating func add(_ waiter: CheckedContinuation<Bool, Never>, _ answer: Bool) { waiters.append((waiter, answer)) }

        func resume() {
            for (waiter, answer) in waiters { waiter.resume(returning: answer) }
        }
    }

    /// Items taken and not durable at once, at most.
    let limit: Int
    /// Changes written in one store call, at most.
    let groupSize: Int
    private let state = Mutex(State())

    /// - Parameters:
    ///   - inFlight: the job's send tasks (each has at most one item on the wire).
    ///   - groupSize: changes written in one store call, at most.
    init(inFlight: Int, groupSize: Int) {
        self.groupSize = max(1, groupSize)
        self.limit = max(1, inFlight) + self.groupSize
    }

    /// Reserves a slot for one item about to be taken, once ``reserveIfFree()`` found none: waits
    /// while ``limit`` items are taken and not durable. Every `true` must be matched by one
    /// ``add(_:watched:)`` or ``cancel(watched:)``.
    /// - Returns: false when a write failed (take nothing more).
    nonisolated(nonsending) func waitForSlot() async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> Bool? in
                if state.failed { return false }
                guard state.undurable < limit else {
                    state.slotWaiters.append(continuation)
                    return nil
                }
                state.undurable += 1
                return true
            }
            if let now { continuation.resume(returning: now) }
        }
    }

    /// Reserves a slot without waiting (see ``waitForSlot()``): nil when no slot is free now
    /// (nothing reserved).
    func reserveIfFree() -> Bool? {
        state.withLock { state -> Bool? in
            if state.failed { return false }
            guard state.undurable < limit else { return nil }
            state.undurable += 1
            return true
        }
    }

    /// A reserved slot whose item was not sent (stopped, not ours): frees it; a watched item
    /// (`watched`) is not waited for any more.
    func cancel(watched: Bool) {
        state.withLock { state -> Wakes in
            var wakes = state.release(1, limit: limit)
            state.unwatch(watched ? 1 : 0, into: &wakes)
            return wakes
        }.resume()
    }

    /// Watches `count` more items, about to be handed out: ``waitUntilWatchedDurable()`` waits
    /// until each one's change, added with `watched: true`, is committed, or it was given up
    /// (``cancel(watched:)`` with `true`). The feeder watches the due retries of a claim: the
    /// store holds such an item as a due retry until its change is committed, so a claim made
    /// before that would return it again.
    ///
    /// The watch is a count, not a set of indexes: the same item's earlier change (the next
    /// attempt that made it a due retry) may be committed after the claim returned it, and must
    /// not end the wait.
    func watch(_ count: Int) {
        guard count > 0 else { return }
        state.withLock { $0.watched += count }
    }

    /// Waits until every watched item's change is committed or the item was given up.
    /// - Returns: false when a write failed or the watch ended (``endWatch()``).
    func waitUntilWatchedDurable() async -> Bool {
        await wait(until: { $0.watched == 0 }, unless: { $0.failed || $0.watchEnded }, joining: \.watchWaiters)
    }

    /// The job's feed stopped (``JobFeed/stop(_:)``): the watched items it had not handed out
    /// are never sent, so they never report. The feeder, which claims nothing more after a stop,
    /// stops waiting for them: ``waitUntilWatchedDurable()`` answers false from now on.
    func endWatch() {
        state.withLock { state -> Wakes in
            state.watchEnded = true
            var wakes = Wakes()
            for waiter in state.watchWaiters { wakes.add(waiter, false) }
            state.watchWaiters.removeAll()
            return wakes
        }.resume()
    }

    /// Waits until the change of every item taken so far is committed (nothing reserved is left
    /// undurable), so that a claim made now sees every outcome and next attempt.
    /// - Returns: false when a write failed.
    func waitUntilDurable() async -> Bool {
        await wait(until: { $0.undurable == 0 }, unless: { $0.failed }, joining: \.durableWaiters)
    }

    /// Waits until `done` holds (true) or `given up` does (false: a write failed, or the wait
    /// ended); the waiters in `waiters` are woken by whoever makes either hold.
    private func wait(
        until done: (State) -> Bool, unless givenUp: (State) -> Bool,
        joining waiters: WritableKeyPath<State, [CheckedContinuation<Bool, Never>]>
    ) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> Bool? in
                if givenUp(state) { return false }
                if done(state) { return true }
                state[keyPath: waiters].append(continuation)
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }

    /// The change of an item taken under a reserved slot: the writer writes it with the next
    /// group. `watched`: the item is one of those watched (``watch(_:)``).
    func add(_ change: consuming JobItemChange, watched: Bool) {
        // Moved into the group, not copied (the lock's closure would copy what it captures).
        var moving = Optional(change)
        let writer = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let change = moving.take() { state.waiting.append(change) }
            state.waitingWatched.append(watched)
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
    }

    /// Every send task ended: the writer writes what is left and returns.
    func close() {
        let writer = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.closed = true
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
    }

    /// Writes the changes in groups of at most ``groupSize``, as they come, until ``close()``
    /// and nothing is left. After a failed write nothing more is written (the job's run stops, its
    /// send tasks get no slot): those items stay as the store has them.
    /// - Parameter write: writes one group durably (one store call).
    /// - Returns: the first write error, if any.
    func runWriter(_ write: @Sendable ([JobItemChange]) async throws -> Void) async -> (any Error)? {
        var firstError: (any Error)? = nil
        while let (group, watched) = await nextGroup() {
            // After a failed write nothing more is written: the job pauses, and what its items
            // became is decided again when it resumes (as for the failed group).
            if firstError == nil {
                do {
                    try await write(group)
                } catch {
                    if firstError == nil { firstError = error }
                    state.withLock { $0.fail() }.resume()
                }
            }
            let written = firstError == nil
            state.withLock { state -> Wakes in
                var wakes = state.release(group.count, limit: limit)
                if written { state.unwatch(watched, into: &wakes) }
                return wakes
            }.resume()
        }
        return firstError
    }

    /// The next group to write, with how many of its changes are of watched items, waiting for
    /// one; nil once closed and drained.
    private func nextGroup() async -> ([JobItemChange], watched: Int)? {
        while true {
            enum Next {
                case group([JobItemChange], Int)
                case done
                case wait
            }
            let next = state.withLock { state -> Next in
                if !state.waiting.isEmpty {
                    let count = min(groupSize, state.waiting.count)
                    let watched = state.waitingWatched.prefix(count).lazy.filter { $0 }.count
                    guard count < state.waiting.count else {
                        // All of it (most groups): handed over whole, not copied.
                        let group = state.waiting
                        state.waiting = []
                        state.waitingWatched.removeAll(keepingCapacity: true)
                        return .group(group, watched)
                    }
                    let group = Array(state.waiting.prefix(count))
                    state.waiting.removeFirst(count)
                    state.waitingWatched.removeFirst(count)
                    return .group(group, watched)
                }
                return state.closed ? .done : .wait
            }
            switch next {
            case .group(let group, let watched): return (group, watched)
            case .done: return nil
            case .wait:
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { state -> Bool in
                        guard state.waiting.isEmpty, !state.closed else { return true }
                        state.writer = continuation
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
        }
    }
}
