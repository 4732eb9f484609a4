import Foundation
import Synchronization

/// Time for the send path: monotonic instants for deadlines and waits, wall-clock dates for
/// what gets stored. Injected so that tests run backoff and rate limits without sleeping.
public protocol PushClock: Sendable {
    /// Monotonic now, for deadlines.
    var now: PushInstant { get }
    /// Wall-clock now, for timestamps that are stored or sent.
    var date: Date { get }
    /// Suspends until `deadline` (or throws `CancellationError`).
    func sleep(until deadline: PushInstant) async throws
}

/// The system's clocks.
public struct SystemPushClock: PushClock {
    public init() {}
    public var now: PushInstant { PushInstant.now }
    public var date: Date { Date() }
    public func sleep(until deadline: PushInstant) async throws {
        try await PushInstant.sleep(until: deadline)
    }
}

/// A clock for tests whose time moves only forward by `advance(by:)` or by sleeping: a sleep
/// returns at once, with the clock moved to the instant slept until. Both clocks move together.
public final class ManualPushClock: PushClock {
    private struct State {
        var offset: Duration = .zero
        var slept: Duration = .zero
        var sleeps = 0
    }

    private let origin: PushInstant
    private let originDate: Date
    private let state = Mutex(State())

    public init(date: Date = Date(timeIntervalSince1970: 1_700_000_000)) {
        self.origin = PushInstant.now
        self.originDate = date
    }

    public var now: PushInstant { origin.advanced(by: state.withLock { $0.offset }) }

    public var date: Date {
        let offset = state.withLock { $0.offset }
        return originDate.addingTimeInterval(offset.secondsValue)
    }

    /// The total time spent in `sleep(until:)`.
    public var totalSlept: Duration { state.withLock { $0.slept } }
    /// How many sleeps actually waited.
    public var sleepCount: Int { state.withLock { $0.sleeps } }

    public func advance(by duration: Duration) {
        state.withLock { $0.offset += duration }
    }

    public func sleep(until deadline: PushInstant) async throws {
        try Task.checkCancellation()
        let target = origin.duration(to: deadline)
        state.withLock { state in
            if target > state.offset {
                state.slept += target - state.offset
                state.sleeps += 1
                state.offset = target
            }
        }
        await Task.yield()
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    public var secondsValue: Double {
        // `components` divides a 128-bit count: once.
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
