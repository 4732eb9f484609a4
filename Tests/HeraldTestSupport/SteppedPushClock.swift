import Foundation
import HeraldCore
import Synchronization

/// A clock for tests of code that sleeps in loops (the job runner's timers and retry wait): its
/// time moves only by ``advance(by:)``, and a sleep waits until the clock reaches its deadline
/// (or its task is cancelled). ``deadlines`` lists the sleeps under way, so that a test waits
/// until the code under test is asleep (an event) instead of waiting for a while.
///
/// ``ManualPushClock`` is the other kind: its sleeps return at once, which suits code that
/// sleeps once (a backoff) but makes a loop of sleeps spin.
public final class SteppedPushClock: PushClock {
    private struct Sleeper {
        var deadline: Duration
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var offset: Duration = .zero
        var sleepers: [Int: Sleeper] = [:]
        var nextID = 0
    }

    private let origin = PushInstant.now
    private let originDate: Date
    private let state = Mutex(State())

    public init(date: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        self.originDate = date
    }

    public var now: PushInstant { origin.advanced(by: state.withLock { $0.offset }) }

    public var date: Date { originDate.addingTimeInterval(state.withLock { $0.offset }.secondsValue) }

    /// The deadlines of the sleeps under way, earliest first.
    public var deadlines: [PushInstant] {
        state.withLock { $0.sleepers.values.map(\.deadline) }.sorted().map { origin.advanced(by: $0) }
    }

    /// Moves the clock forward and wakes the sleeps whose deadline it reached.
    public func advance(by duration: Duration) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.offset += duration
            let due = state.sleepers.filter { $0.value.deadline <= state.offset }
            for id in due.keys { state.sleepers[id] = nil }
            return due.values.map(\.continuation)
        }
        for sleeper in woken { sleeper.resume() }
    }

    /// Moves the clock forward to `instant` (if it lies ahead).
    public func advance(to instant: PushInstant) {
        let step = now.duration(to: instant)
        if step > .zero { advance(by: step) }
    }

    public func sleep(until deadline: PushInstant) async throws {
        let target = origin.duration(to: deadline)
        let id = state.withLock { state -> Int in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let now = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if target <= state.offset { return .success(()) }
                    state.sleepers[id] = Sleeper(deadline: target, continuation: continuation)
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}
