import HeraldCore
import HeraldStore
import Synchronization

/// The outcomes (and next attempts) of one job run's sends, written to the store in commit groups
/// by one writer (``runWriter(_:)``) while the send tasks go on sending.
///
/// A send task does not wait for its item's outcome to be durable; instead it reserves a slot
/// (``reserve()``) before it sends an item, and a slot is freed only when that item's change is
/// committed (or the item was not sent). At most ``limit`` items of the job are sent and not
/// durable at once: those on the wire (bounded by the tenant's permits) plus the outcomes waiting
/// for, or in, the next write (``groupSize`` a write). That is the duplicate window after a crash
/// under at-least-once: the items on the wire and one commit group, never more.
///
/// A failed write stops the job's run (its send tasks send nothing more): the items of that group
/// stay pending in the store and are sent again (at-least-once) or reported `unknown` from
/// their wire mark (at-most-once) when the job resumes.
final class OutcomeGroups: Sendable {
    private struct State {
        var waiting: [JobItemChange] = []
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
            for waiter in slotWaiters + durableWaiters { wakes.add(waiter, false) }
            slotWaiters.removeAll()
            durableWaiters.removeAll()
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

    /// Reserves a slot for one item about to be taken: waits while ``limit`` items are taken and
    /// not durable. Every `true` must be matched by one ``add(_:)`` or ``cancel()``.
    /// - Returns: false when a write failed (take nothing more).
    nonisolated(nonsending) func reserve() async -> Bool {
        let now = state.withLock { state -> Bool? in
            if state.failed { return false }
            guard state.undurable < limit else { return nil }
            state.undurable += 1
            return true
        }
        if let now { return now }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
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

    /// A reserved slot whose item was not sent (none left, stopped, not ours): frees it.
    func cancel() {
        state.withLock { $0.release(1, limit: limit) }.resume()
    }

    /// Waits until the change of every item taken so far is committed (nothing reserved is left
    /// undurable), so that a claim made now sees every outcome and next attempt.
    /// - Returns: false when a write failed.
    func waitUntilDurable() async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> Bool? in
                if state.failed { return false }
                if state.undurable == 0 { return true }
                state.durableWaiters.append(continuation)
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }

    /// The change of an item taken under a reserved slot: the writer writes it with the next group.
    func add(_ change: JobItemChange) {
        let writer = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.waiting.append(change)
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
        while let group = await nextGroup() {
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
            state.withLock { $0.release(group.count, limit: limit) }.resume()
        }
        return firstError
    }

    /// The next group to write, waiting for one; nil once closed and drained.
    private func nextGroup() async -> [JobItemChange]? {
        while true {
            enum Next {
                case group([JobItemChange])
                case done
                case wait
            }
            let next = state.withLock { state -> Next in
                if !state.waiting.isEmpty {
                    let count = min(groupSize, state.waiting.count)
                    let group = Array(state.waiting.prefix(count))
                    state.waiting.removeFirst(count)
                    return .group(group)
                }
                return state.closed ? .done : .wait
            }
            switch next {
            case .group(let group): return group
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
