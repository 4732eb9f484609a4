import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Logging
import Synchronization
import Testing

/// The periodic work of Herald's services (``HeraldCore/PushClock/repeating(every:startingNow:_:)``:
/// the job runner's rescans and renewals, the heartbeat, store maintenance, the usage flusher,
/// the directory watcher, the credential check) runs on the clock each service was given: here a
/// ``SteppedPushClock``, so each test moves time instead of waiting for it.
@Suite("Periodic work on the service's clock", .timeLimit(.minutes(1)))
struct PeriodicWorkTests {
    /// Counts the calls; a call can be held until the test lets it end.
    final class Calls: Sendable {
        private struct State {
            var started = 0
            var ended = 0
            var hold = false
            var held: CheckedContinuation<Void, Never>?
        }
        private let state = Mutex(State())

        var started: Int { state.withLock { $0.started } }
        var ended: Int { state.withLock { $0.ended } }
        var isHolding: Bool { state.withLock { $0.held != nil } }

        /// The next calls wait in ``call()`` until ``release()``.
        func holdNext() { state.withLock { $0.hold = true } }

        func release() {
            let held = state.withLock { state -> CheckedContinuation<Void, Never>? in
                state.hold = false
                defer { state.held = nil }
                return state.held
            }
            held?.resume()
        }

        func call() async {
            let hold = state.withLock { state -> Bool in
                state.started += 1
                return state.hold
            }
            if hold {
                await withCheckedContinuation { continuation in
                    state.withLock { $0.held = continuation }
                }
            }
            state.withLock { $0.ended += 1 }
        }
    }

    @Test("the first call after one interval, then one each interval; cancelled during a wait, it ends")
    func everyInterval() async throws {
        let clock = SteppedPushClock()
        let calls = Calls()
        let start = clock.now
        let task = Task { await clock.repeating(every: .seconds(10)) { await calls.call() } }

        #expect(await eventually { clock.deadlines == [start.advanced(by: .seconds(10))] })
        #expect(calls.started == 0, "no call before the first interval")
        clock.advance(by: .seconds(9))
        #expect(calls.started == 0)
        clock.advance(by: .seconds(1))
        #expect(await eventually { calls.ended == 1 && clock.deadlines == [start.advanced(by: .seconds(20))] })
        clock.advance(by: .seconds(10))
        #expect(await eventually { calls.ended == 2 && clock.deadlines == [start.advanced(by: .seconds(30))] })

        task.cancel()
        await task.value
        #expect(calls.started == 2)
        #expect(clock.deadlines.isEmpty)
    }

    @Test("startingNow: the first call at once, before any time passes")
    func startingNow() async throws {
        let clock = SteppedPushClock()
        let calls = Calls()
        let start = clock.now
        let task = Task { await clock.repeating(every: .seconds(10), startingNow: true) { await calls.call() } }
        #expect(await eventually { calls.ended == 1 && clock.deadlines == [start.advanced(by: .seconds(10))] })
        task.cancel()
        await task.value
        #expect(calls.started == 1)
    }

    @Test("a slow call delays the next instead of piling calls up: the wait begins when it ends")
    func slowCall() async throws {
        let clock = SteppedPushClock()
        let calls = Calls()
        let task = Task { await clock.repeating(every: .seconds(10)) { await calls.call() } }
        #expect(await eventually { clock.deadlines.count == 1 })
        calls.holdNext()
        clock.advance(by: .seconds(10))
        #expect(await eventually { calls.isHolding })
        // Three intervals pass during the call: no other call starts, no wait is under way.
        clock.advance(by: .seconds(30))
        #expect(calls.started == 1)
        #expect(clock.deadlines.isEmpty)
        let ended = clock.now
        calls.release()
        #expect(await eventually { clock.deadlines == [ended.advanced(by: .seconds(10))] })
        #expect(calls.started == 1 && calls.ended == 1)
        task.cancel()
        await task.value
    }

    /// A ledger that keeps what it was given.
    final class RecordingLedger: UsageLedger {
        private let added = Mutex<[UsageCount]>([])
        var counts: [UsageCount] { added.withLock { $0 } }
        func addUsage(_ counts: [UsageCount]) async throws { added.withLock { $0 += counts } }
        func usage(tenant: String?, from: Date, to: Date) async throws -> [UsageCount] { counts }
        func pruneUsage(before cutoff: Date) async throws -> Int { 0 }
    }

    @Test("the usage flusher writes the meter's counts at each interval on its clock, and once more when it stops")
    func usageFlusher() async throws {
        let clock = SteppedPushClock()
        let meter = UsageMeter()
        let ledger = RecordingLedger()
        let hour = Date(timeIntervalSince1970: 1_764_000_000 - 1_764_000_000.truncatingRemainder(dividingBy: 3600))
        let acme = Fixtures.tenantID("acme")
        let flusher = UsageFlusher(
            meter: meter, ledger: ledger, interval: .seconds(10), clock: clock, logger: Logger(label: "herald.tests.usage"))
        let task = Task { try await flusher.run() }
        #expect(await eventually { clock.deadlines.count == 1 })
        meter.add(.accepted, tenant: acme, at: hour, count: 3)
        clock.advance(by: .seconds(9))
        #expect(ledger.counts.isEmpty, "nothing written before the interval")
        clock.advance(by: .seconds(1))
        #expect(await eventually { ledger.counts == [UsageCount(tenant: "acme", hour: hour, kind: .accepted, count: 3)] })

        // Counts added after the last flush are written when the flusher stops.
        #expect(await eventually { clock.deadlines.count == 1 })
        meter.add(.delivered, tenant: acme, at: hour, count: 2)
        task.cancel()
        try await task.value
        #expect(ledger.counts.last == UsageCount(tenant: "acme", hour: hour, kind: .delivered, count: 2))
        #expect(ledger.counts.count == 2)
    }
}
