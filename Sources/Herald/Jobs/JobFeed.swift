import HeraldStore
import Synchronization

/// The claimed items of one job being worked on, handed out one at a time to the job's send
/// tasks. The job's feeder (``JobFeeder``) adds the next claim once few of the last claim's items
/// are left to hand out (``waitUntilRemaining(atMost:)``), while the others are on the wire: the
/// sends do not stop at each claim's end to wait for the claim that follows.
///
/// What it holds is bounded: the items not handed out yet — at most the low-water mark the feeder
/// waits for plus one claim — and the items its send tasks took (one each). Once stopped (a failed
/// outcome write, a paused tenant, shutdown) it hands out nothing more: the rest stay pending in
/// the store, leased to this runner.
final class JobFeed: Sendable {
    enum StopReason: Sendable {
        case stopping
        case pause
        /// The job was cancelled (``JobRunner/jobCancelled(tenant:id:)``).
        case cancelled
    }

    /// What the feeder waits for.
    private enum Wait {
        /// At most this many items left to hand out (time to claim the next ones), or stopped.
        case remaining(Int)
        /// Every item handed out, or stopped.
        case handedOut
        /// No item taken by a send task (every taken item handed back), or stopped.
        case idle
    }

    /// The feeder to wake, with its answer (false: the feed stopped).
    private typealias FeederWake = (continuation: CheckedContinuation<Bool, Never>, answer: Bool)

    private struct State {
        /// The claimed items; those handed out are moved out (nil), not copied.
        var items: [JobItem?] = []
        var next = 0
        var stopReason: StopReason?
        /// The feeder claims no more: send tasks end once the items run out.
        var finished = false
        /// Items handed out whose send task has not handed them back.
        var taken = 0
        /// Send tasks waiting for an item.
        var takers: [CheckedContinuation<JobItem?, Never>] = []
        var feeder: (wait: Wait, continuation: CheckedContinuation<Bool, Never>)?

        var isHandedOut: Bool { next >= items.count }
        /// Items not handed out yet.
        var remaining: Int { items.count - next }

        /// Takes the next item for a send task (counted as taken).
        mutating func take() -> JobItem? {
            guard stopReason == nil, next < items.count else { return nil }
            let item = items[next].take()
            next += 1
            taken += 1
            return item
        }

        /// The feeder's continuation and its answer when what it waits for has come.
        mutating func feederToResume() -> FeederWake? {
            guard let feeder else { return nil }
            let ready: Bool
            switch feeder.wait {
            case .remaining(let most): ready = stopReason != nil || remaining <= most
            case .handedOut: ready = stopReason != nil || isHandedOut
            case .idle: ready = stopReason != nil || taken == 0
            }
            guard ready else { return nil }
            self.feeder = nil
            return (feeder.continuation, stopReason == nil)
        }
    }

    private let state = Mutex(State())

    private static func wake(_ feeder: FeederWake?) {
        if let feeder { feeder.continuation.resume(returning: feeder.answer) }
    }
    /// Marks the job's items on the wire before they are sent.
    let marks: WireMarks
    /// The job's policy and circuit per tenant runtime.
    let routes: BatchItemDelivery.Routes
    /// Told once, when the feed first stops.
    private let stopped: @Sendable () -> Void

    /// - Parameter stopped: called once, when the feed first stops (``stop(_:)``), after the
    ///   send tasks and the feeder waiting on the feed were woken: the items not handed out are
    ///   never sent, so whoever waits for them must stop waiting
    ///   (``OutcomeGroups/endWatch()``).
    init(marks: WireMarks, routes: BatchItemDelivery.Routes, stopped: @escaping @Sendable () -> Void) {
        self.marks = marks
        self.routes = routes
        self.stopped = stopped
    }

    // MARK: Send tasks

    /// The next item to send: waits while the feeder claims; nil when the job's items ran out
    /// (``finish()``) or the feed stopped. Every item returned is handed back with ``handBack()``.
    nonisolated(nonsending) func next() async -> JobItem? {
        enum Now {
            case item(JobItem)
            case none
            case wait
        }
        let now = state.withLock { state -> (Now, FeederWake?) in
            if let item = state.take() { return (.item(item), state.feederToResume()) }
            return (state.stopReason != nil || state.finished ? .none : .wait, nil)
        }
        Self.wake(now.1)
        switch now.0 {
        case .item(let item): return item
        case .none: return nil
        case .wait: break
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<JobItem?, Never>) in
            let now = state.withLock { state -> (JobItem??, FeederWake?) in
                if let item = state.take() { return (.some(item), state.feederToResume()) }
                if state.stopReason != nil || state.finished { return (.some(nil), nil) }
                state.takers.append(continuation)
                return (nil, nil)
            }
            Self.wake(now.1)
            if let item = now.0 { continuation.resume(returning: item) }
        }
    }

    /// The next item if one is ready now, without waiting (nil when none is, or the feed ran out
    /// or stopped). Handed back with ``handBack()`` like one from ``next()``.
    func nextIfReady() -> JobItem? {
        let now = state.withLock { state -> (JobItem?, FeederWake?) in
            guard let item = state.take() else { return (nil, nil) }
            return (item, state.feederToResume())
        }
        Self.wake(now.1)
        return now.0
    }

    /// A send task is done with an item ``next()`` gave it: its change was handed to the writer,
    /// or it was not sent.
    func handBack(_ count: Int = 1) {
        let feeder = state.withLock { state -> FeederWake? in
            state.taken -= count
            return state.feederToResume()
        }
        Self.wake(feeder)
    }

    /// Stops the feed: nothing more is handed out. A pause (a failure) or a cancel outranks a stop.
    func stop(_ reason: StopReason) {
        let (first, takers, feeder) = state.withLock { state -> (Bool, [CheckedContinuation<JobItem?, Never>], FeederWake?) in
            let first = state.stopReason == nil
            if first || reason != .stopping { state.stopReason = reason }
            defer { state.takers.removeAll() }
            return (first, state.takers, state.feederToResume())
        }
        for taker in takers { taker.resume(returning: nil) }
        Self.wake(feeder)
        if first { stopped() }
    }

    var stopReason: StopReason? { state.withLock { $0.stopReason } }

    // MARK: The feeder

    /// The next claim's items, after those of the last claim not handed out yet: the send tasks
    /// waiting get theirs at once.
    func refill(_ items: consuming [JobItem]) {
        // Each item is moved into the feed, not copied (a copy retains every string and array
        // it holds): taken off the claim's end into its place.
        var items = items
        let handed = state.withLock { state -> [(CheckedContinuation<JobItem?, Never>, JobItem?)] in
            state.items.removeFirst(state.next)
            var place = state.items.count + items.count
            state.items.append(contentsOf: repeatElement(nil, count: items.count))
            while let item = items.popLast() {
                place -= 1
                state.items[place] = item
            }
            state.next = 0
            var handed: [(CheckedContinuation<JobItem?, Never>, JobItem?)] = []
            while !state.takers.isEmpty, let item = state.take() {
                handed.append((state.takers.removeFirst(), item))
            }
            return handed
        }
        for (taker, item) in handed { taker.resume(returning: item) }
    }

    /// No more claims: send tasks waiting for an item end, the others once the items run out.
    /// - Returns: the items claimed and never handed out (they stay pending, leased).
    func finish() -> Int {
        let (takers, left) = state.withLock { state -> ([CheckedContinuation<JobItem?, Never>], Int) in
            state.finished = true
            let left = state.items.count - state.next
            state.items = []
            state.next = 0
            defer { state.takers.removeAll() }
            return (state.takers, left)
        }
        for taker in takers { taker.resume(returning: nil) }
        return left
    }

    /// Waits until at most `most` items are left to hand out.
    /// - Returns: false when the feed stopped.
    func waitUntilRemaining(atMost most: Int) async -> Bool {
        await wait(for: .remaining(most))
    }

    /// Waits until every item is handed out.
    /// - Returns: false when the feed stopped.
    func waitUntilHandedOut() async -> Bool {
        await wait(for: .handedOut)
    }

    /// Waits until the send tasks handed back every item they took.
    /// - Returns: false when the feed stopped.
    func waitUntilIdle() async -> Bool {
        await wait(for: .idle)
    }

    private func wait(for wait: Wait) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> FeederWake? in
                state.feeder = (wait, continuation)
                return state.feederToResume()
            }
            Self.wake(now)
        }
    }
}
