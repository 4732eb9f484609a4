import Foundation
import HeraldStore
import Synchronization
import Testing

/// `StoreDeadline`: a store call that gets no answer fails after its limit, and nothing else
/// changes (the PostgreSQL store bounds every call with it: `storage.postgres.call_timeout`).
@Suite("Store calls bounded in time")
struct StoreDeadlineTests {
    struct Refused: Error, Equatable {}

    static func timedOut() -> any Error { StoreError.timedOut("no answer within the test's limit") }

    @Test func aCallThatAnswersGivesItsValueOrItsError() async throws {
        let value = try await StoreDeadline.run(limit: .seconds(30), timeout: Self.timedOut) { 42 }
        #expect(value == 42)
        await #expect(throws: Refused.self) {
            try await StoreDeadline.run(limit: .seconds(30), timeout: Self.timedOut) { () async throws -> Int in throw Refused() }
        }
    }

    /// The call below never returns by itself and ignores cancellation (as a query whose write
    /// postgres-nio lost): the caller still gets the timeout, and only then is the call let go.
    @Test func aCallThatNeverAnswersFailsAfterTheLimitWithoutHoldingTheCaller() async throws {
        let parked = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let returned = Mutex(false)
        let started = ContinuousClock.now
        do {
            _ = try await StoreDeadline.run(limit: .milliseconds(200), timeout: Self.timedOut) { () async throws -> Int in
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
            try await StoreDeadline.run(limit: .milliseconds(50), timeout: Self.timedOut) { () async throws -> Int in
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
            try await StoreDeadline.run(limit: .seconds(3600), timeout: Self.timedOut) { () async throws -> Int in
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
            try await StoreDeadline.run(limit: .seconds(3600), timeout: Self.timedOut) { () async throws -> Int in
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
