import Synchronization

/// Work a pipeline runs at given instants, on one clock, by one sleeping task at most instead
/// of a timer each: the deadlines of its checks under way (``PushDecision/check(_:)``) and the
/// sends waiting for a middleware's ``PushDecision/notBefore(_:)``.
///
/// Work cancelled before its instant is only taken off the list; the sleeper wakes at the
/// earliest instant it was armed for, runs what is due (earliest first) and sleeps again until
/// the next one (or ends, when nothing is left). Sends under way are bounded by their callers,
/// so the list is too.
final class DueTimers: Sendable {
    private struct Entry {
        var instant: ContinuousClock.Instant
        var work: @Sendable () -> Void
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var nextID: UInt64 = 0
        /// When the sleeper wakes; nil: no sleeper.
        var armedUntil: ContinuousClock.Instant?
        /// The sleeper that counts; an older one wakes to nothing.
        var generation: UInt64 = 0
        var sleeper: Task<Void, Never>?
    }

    private let clock: any PushClock
    private let state = Mutex(State())

    /// - Parameter clock: what the instants are read on and slept until.
    init(clock: any PushClock) {
        self.clock = clock
    }

    /// Work waiting for its instant (for tests).
    var pending: Int { state.withLock { $0.entries.count } }

    /// Runs `work` once, in the sleeper's task, when `instant` has come, unless ``cancel(_:)``
    /// took it off the list first. Work due at the same wake runs earliest instant first, and
    /// in the order it was scheduled for the same instant.
    func schedule(at instant: ContinuousClock.Instant, _ work: @escaping @Sendable () -> Void) -> UInt64 {
        let (id, arm) = state.withLock { state -> (UInt64, UInt64?) in
            let id = state.nextID
            state.nextID &+= 1
            state.entries[id] = Entry(instant: instant, work: work)
            // Sends' instants mostly come later than the ones already waiting: no new sleeper then.
            if let armed = state.armedUntil, armed <= instant { return (id, nil) }
            state.armedUntil = instant
            state.generation &+= 1
            return (id, state.generation)
        }
        if let arm { startSleeper(until: instant, generation: arm) }
        return id
    }

    /// Takes work off the list (it will not run).
    func cancel(_ id: UInt64) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }

    private func startSleeper(until instant: ContinuousClock.Instant, generation: UInt64) {
        let clock = clock
        let sleeper = Task { [weak self] in
            // Cancelled: a newer sleeper wakes earlier; this one wakes to nothing.
            try? await clock.sleep(until: instant)
            self?.wake(generation: generation)
        }
        let superseded = state.withLock { state -> Task<Void, Never>? in
            guard state.generation == generation else { return sleeper }  // already superseded itself
            defer { state.sleeper = sleeper }
            return state.sleeper
        }
        superseded?.cancel()
    }

    private func wake(generation: UInt64) {
        let now = clock.now
        let (due, next) = state.withLock { state -> ([@Sendable () -> Void], (ContinuousClock.Instant, UInt64)?) in
            guard state.generation == generation else { return ([], nil) }
            let due = state.entries.filter { $0.value.instant <= now }.sorted {
                ($0.value.instant, $0.key) < ($1.value.instant, $1.key)
            }
            for (id, _) in due { state.entries[id] = nil }
            state.sleeper = nil
            state.armedUntil = state.entries.values.lazy.map(\.instant).min()
            let work = due.map(\.value.work)
            guard let earliest = state.armedUntil else { return (work, nil) }
            state.generation &+= 1
            return (work, (earliest, state.generation))
        }
        for work in due { work() }
        if let (instant, generation) = next { startSleeper(until: instant, generation: generation) }
    }
}
