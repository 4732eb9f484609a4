import Foundation
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Synchronization
import Testing

/// `StoreDeadline`: a store call that gets no answer fails after its limit, and nothing else
/// changes (the PostgreSQL store bounds every call with it: `storage.postgres.call_timeout`).
@Suite("Store calls bounded in time")
struct StoreDeadlineTests {
    struct Refused: Error, Equatable {}

    static func timedOut() -> any Error { StoreError.timedOut("no answer within the test's limit") }

    @Test func aCallThatAnswersGivesItsValueOrItsError() async throws {
        let value = try await StoreDeadline().run(limit: .seconds(30), timeout: Self.timedOut) { 42 }
        #expect(value == 42)
        await #expect(throws: Refused.self) {
            try await StoreDeadline().run(limit: .seconds(30), timeout: Self.timedOut) { () async throws -> Int in throw Refused() }
        }
    }

    /// The call below never returns by itself and ignores cancellation (as a query whose write
    /// postgres-nio lost): the caller still gets the timeout, and only then is the call let go.
    @Test func aCallThatNeverAnswersFailsAfterTheLimitWithoutHoldingTheCaller() async throws {
        let parked = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let returned = Mutex(false)
        let started = ContinuousClock.now
        do {
            _ = try await StoreDeadline().run(limit: .milliseconds(200), timeout: Self.timedOut) { () async throws -> Int in
                await withCheckedContinuation { continuation in parked.withLock { $0 = continuation } }
                returned.withLock { $0 = true }
                return 1
            }
            Issue.record("expected the timeout")
        } catch let error as StoreError {
            #expect(error.isTimedOut, "\(error)")
        }
        let waited = started.duration(to: .now)
        #expect(waited >= .milliseconds(200), "not before the limit: \(waited)")
        // The call is let go only below: the caller had its answer while the call still hung.
        #expect(!returned.withLock { $0 }, "the caller was held until the call returned")
        // Let the abandoned call end: its late answer changes nothing.
        while parked.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(5)) }
        parked.withLock { $0?.resume(); $0 = nil }
    }

    /// A call that honours cancellation is cancelled at the limit (postgres-nio's lease waits do).
    @Test func theCallIsCancelledAtTheLimit() async throws {
        let cancelled = Mutex(false)
        await #expect(throws: StoreError.self) {
            try await StoreDeadline().run(limit: .milliseconds(50), timeout: Self.timedOut) { () async throws -> Int in
                do {
                    try await Task.sleep(for: .seconds(3600))
                } catch {
                    cancelled.withLock { $0 = true }
                    throw error
                }
                return 1
            }
        }
        for _ in 0..<400 where !cancelled.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(cancelled.withLock { $0 }, "the call's task was not cancelled")
    }

    /// A caller that is cancelled cancels its call and gets the call's answer to that, long
    /// before the limit.
    @Test func aCancelledCallerCancelsTheCall() async throws {
        let running = Mutex(false)
        let caller = Task {
            try await StoreDeadline().run(limit: .seconds(3600), timeout: Self.timedOut) { () async throws -> Int in
                running.withLock { $0 = true }
                try await Task.sleep(for: .seconds(3600))
                return 1
            }
        }
        // Cancelled once the call is under way.
        while !running.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        let started = ContinuousClock.now
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        // Long before the hour's limit (a loaded run can delay the cancellation's delivery by seconds).
        #expect(started.duration(to: .now) < .seconds(600))
    }

    /// A cancelled caller is not held by a call that ignores cancellation (a query postgres-nio
    /// lost): a shutdown during a store outage does not wait for the whole limit.
    @Test func aCancelledCallerIsNotHeldByACallThatIgnoresCancellation() async throws {
        let parked = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let caller = Task {
            try await StoreDeadline().run(limit: .seconds(3600), timeout: Self.timedOut) { () async throws -> Int in
                await withCheckedContinuation { continuation in parked.withLock { $0 = continuation } }
                return 1
            }
        }
        while parked.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(5)) }
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        parked.withLock { $0?.resume(); $0 = nil }
    }
}

/// The limits of many calls are watched by one sleep (on a stepped clock: nothing waits in real
/// time, and each sleep under way is listed).
@Suite("Store call deadlines watched together")
struct StoreDeadlineWatchTests {
    /// A call that waits until the test lets it answer (or ignores everything until then).
    final class Parked: Sendable {
        private let waiters = Mutex<[CheckedContinuation<Void, Never>]>([])
        var count: Int { waiters.withLock { $0.count } }
        func park() async { await withCheckedContinuation { continuation in waiters.withLock { $0.append(continuation) } } }
        func releaseAll() { for waiter in waiters.withLock({ w in defer { w = [] }; return w }) { waiter.resume() } }
    }

    static func waitFor(sourceLocation: Testing.SourceLocation = #_sourceLocation, _ condition: () -> Bool) async throws {
        let patience = ContinuousClock.now.advanced(by: .seconds(20))
        while !condition(), ContinuousClock.now < patience { try await Task.sleep(for: .milliseconds(2)) }
        #expect(condition(), "the condition never held", sourceLocation: sourceLocation)
    }

    @Test("calls under way share one sleep; each times out at its own deadline, the others go on")
    func oneSleepForManyCalls() async throws {
        let clock = SteppedPushClock()
        let deadlines = StoreDeadline(clock: clock)
        let parked = Parked()
        let start = clock.now
        // Ten calls that never answer by themselves, started 1 s apart on the clock, 10 s each.
        var calls: [Task<Int, any Error>] = []
        for k in 0..<10 {
            calls.append(Task {
                try await deadlines.run(limit: .seconds(10), timeout: StoreDeadlineTests.timedOut) { () async throws -> Int in
                    await parked.park()
                    return k
                }
            })
            try await Self.waitFor { deadlines.pendingDeadlines.count == k + 1 && parked.count == k + 1 }
            if k < 9 { clock.advance(by: .seconds(1)) }
        }
        // One watcher sleeps, until the first call's deadline: not a timer a call.
        try await Self.waitFor { clock.deadlines == [start.advanced(by: .seconds(10))] }
        // At the first three deadlines, the first three calls time out; the rest are still under way.
        clock.advance(to: start.advanced(by: .seconds(12)))
        for k in 0..<3 {
            await #expect(throws: StoreError.self) { try await calls[k].value }
        }
        try await Self.waitFor { deadlines.pendingDeadlines.count == 7 }
        #expect(deadlines.pendingDeadlines.first == start.advanced(by: .seconds(13)))
        try await Self.waitFor { clock.deadlines == [start.advanced(by: .seconds(13))] }
        // The others answer now, each with its own value, and leave the table.
        parked.releaseAll()
        for k in 3..<10 { #expect(try await calls[k].value == k) }
        #expect(deadlines.pendingDeadlines.isEmpty)
        // The watcher wakes to no call under way and stops: no sleep is left.
        clock.advance(by: .seconds(1))
        try await Self.waitFor { clock.deadlines.isEmpty }
        // A later call starts a watcher again, and times out at its limit.
        let late = Task {
            try await deadlines.run(limit: .seconds(5), timeout: StoreDeadlineTests.timedOut) { () async throws -> Int in
                await parked.park()
                return 0
            }
        }
        let due = clock.now.advanced(by: .seconds(5))
        try await Self.waitFor { clock.deadlines == [due] && parked.count == 1 }
        clock.advance(to: due)
        await #expect(throws: StoreError.self) { try await late.value }
        parked.releaseAll()
    }

    @Test("a call with a shorter limit than the watcher's next wake is timed out at its own")
    func aShorterLimitWakesEarlier() async throws {
        let clock = SteppedPushClock()
        let deadlines = StoreDeadline(clock: clock)
        let parked = Parked()
        let long = Task {
            try await deadlines.run(limit: .seconds(60), timeout: StoreDeadlineTests.timedOut) { () async throws -> Int in
                await parked.park()
                return 1
            }
        }
        try await Self.waitFor { parked.count == 1 && clock.deadlines.count == 1 }
        let short = Task {
            try await deadlines.run(limit: .seconds(2), timeout: StoreDeadlineTests.timedOut) { () async throws -> Int in
                await parked.park()
                return 2
            }
        }
        let due = clock.now.advanced(by: .seconds(2))
        // The watcher that slept for the long call's minute is replaced by one for the short call.
        try await Self.waitFor { parked.count == 2 && clock.deadlines == [due] }
        clock.advance(to: due)
        await #expect(throws: StoreError.self) { try await short.value }
        #expect(deadlines.pendingDeadlines.count == 1, "the long call is still under way")
        parked.releaseAll()
        #expect(try await long.value == 1)
    }
}

@Suite("Store calls left without an answer, counted")
struct UnansweredCallCounterTests {
    @Test("timed-out and unavailable calls are counted apart; a statement's error, a cancellation or another error is not")
    func countsOnlyUnanswered() {
        let counter = UnansweredCallCounter()
        counter.count(StoreError.timedOut("no answer within 1 s"))
        counter.count(StoreError.timedOut("no answer within 1 s"))
        counter.count(StoreError.unavailable("connection refused"))
        counter.count(StoreError.notFound("job x"))
        counter.count(StoreError.invalidArgument("bad"))
        counter.count(CancellationError())
        #expect(counter.counts == UnansweredStoreCalls(timedOut: 2, unavailable: 1))
    }
}
