import Synchronization

/// Deadlines watched by one sleeping task at most instead of a timer each: a pipeline's checks
/// under way (``PushDecision/check(_:)``), a store's calls under way.
///
/// A deadline met in time is only taken off the list; the sleeper wakes at the earliest deadline
/// it was armed for, expires what is due, and sleeps again until the next one (or ends, when
/// nothing is left). Its users bound what is under way, so the list is bounded too.
public final class DeadlineWatch: Sendable {
    private struct Entry {
        var deadline: PushInstant
        var expire: @Sendable () -> Void
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var nextID: UInt64 = 0
        /// When the sleeper wakes; nil: no sleeper.
        var armedUntil: PushInstant?
        /// The sleeper that counts; an older one wakes to nothing.
        var generation: UInt64 = 0
        var sleeper: Task<Void, Never>?
    }

    private let state = Mutex(State())
    /// What the deadlines are on (the system's clock; a test steps its own).
    private let clock: any PushClock

    public init(clock: any PushClock = SystemPushClock()) {
        self.clock = clock
    }

    /// Deadlines being watched (for tests).
    public var watching: Int { state.withLock { $0.entries.count } }

    /// The deadlines being watched, earliest first (for tests).
    public var deadlines: [PushInstant] { state.withLock { $0.entries.values.map(\.deadline) }.sorted() }

    /// Watches a deadline: `expire` runs (once, in the sleeper's task) when `deadline` passes
    /// before ``settle(_:)`` took it off the list. Deadlines due at the same wake expire
    /// earliest first.
    public func watch(until deadline: PushInstant, expire: @escaping @Sendable () -> Void) -> UInt64 {
        let (id, arm) = state.withLock { state -> (UInt64, UInt64?) in
            let id = state.nextID
            state.nextID &+= 1
            state.entries[id] = Entry(deadline: deadline, expire: expire)
            // Deadlines mostly come later than the ones already watched: no new sleeper then.
            if let armed = state.armedUntil, armed <= deadline { return (id, nil) }
            state.armedUntil = deadline
            state.generation &+= 1
            return (id, state.generation)
        }
        if let arm { startSleeper(until: deadline, generation: arm) }
        return id
    }

    /// Takes a deadline that was met off the list.
    public func settle(_ id: UInt64) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }

    private func startSleeper(until instant: PushInstant, generation: UInt64) {
        let clock = self.clock
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
        let (expired, next) = state.withLock { state -> ([@Sendable () -> Void], (PushInstant, UInt64)?) in
            guard state.generation == generation else { return ([], nil) }
            let due = state.entries.filter { $0.value.deadline <= now }.sorted { $0.value.deadline < $1.value.deadline }
            for (id, _) in due { state.entries[id] = nil }
            state.sleeper = nil
            state.armedUntil = state.entries.values.lazy.map(\.deadline).min()
            let expired = due.map(\.value.expire)
            guard let earliest = state.armedUntil else { return (expired, nil) }
            state.generation &+= 1
            return (expired, (earliest, state.generation))
        }
        for expire in expired { expire() }
        if let (instant, generation) = next { startSleeper(until: instant, generation: generation) }
    }
}
