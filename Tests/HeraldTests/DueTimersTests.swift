import Synchronization
import Testing

@testable import HeraldCore

@Suite("A pipeline's timers: work run at its instant, one sleeper for all")
struct DueTimersTests {
    final class Ran: Sendable {
        private let names = Mutex<[(name: String, at: ContinuousClock.Instant)]>([])
        var all: [String] { names.withLock { $0.map(\.name) } }
        func at(_ name: String) -> ContinuousClock.Instant? { names.withLock { $0.first { $0.name == name }?.at } }
        func work(_ name: String, clock: any PushClock = SystemPushClock()) -> @Sendable () -> Void {
            { self.names.withLock { $0.append((name, clock.now)) } }
        }
    }

    private static func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        let end = ContinuousClock.now.advanced(by: .seconds(30))
        while !condition() {
            guard ContinuousClock.now < end else {
                Issue.record("timed out waiting: \(what)")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test("work cancelled before its instant leaves nothing pending and never runs")
    func cancelledWorkIsForgotten() async throws {
        let timers = DueTimers(clock: SystemPushClock())
        let ran = Ran()
        let soon = ContinuousClock.now.advanced(by: .milliseconds(100))
        let ids = (0..<500).map { timers.schedule(at: soon, ran.work("check \($0)")) }
        #expect(timers.pending == 500)
        for id in ids { timers.cancel(id) }
        #expect(timers.pending == 0)
        // One more, due after the others: it runs, they do not.
        _ = timers.schedule(at: soon.advanced(by: .milliseconds(50)), ran.work("late"))
        try await Self.waitUntil("the late work ran") { !ran.all.isEmpty }
        #expect(ran.all == ["late"] && timers.pending == 0)
    }

    @Test("work runs at its instant, once: an earlier instant scheduled later is not held up by a later one")
    func anEarlierInstantIsNotHeldUp() async throws {
        let timers = DueTimers(clock: SystemPushClock())
        let ran = Ran()
        let now = ContinuousClock.now
        // A sleeper is armed for 60 s; the work scheduled next is due long before.
        let later = timers.schedule(at: now.advanced(by: .seconds(60)), ran.work("later"))
        let far = timers.schedule(at: now.advanced(by: .seconds(600)), ran.work("far"))
        _ = timers.schedule(at: now.advanced(by: .milliseconds(100)), ran.work("first"))
        try await Self.waitUntil("the first work ran") { !ran.all.isEmpty }
        #expect(ran.all == ["first"])
        #expect(try #require(ran.at("first")) >= now.advanced(by: .milliseconds(100)))
        #expect(timers.pending == 2)
        timers.cancel(later)
        timers.cancel(far)
        #expect(timers.pending == 0 && ran.all == ["first"])
    }

    @Test("work due at the same wake runs earliest instant first")
    func dueWorkRunsInInstantOrder() async throws {
        let timers = DueTimers(clock: SystemPushClock())
        let ran = Ran()
        let now = ContinuousClock.now
        // Due a microsecond apart: all due by the time the sleeper armed for the first wakes.
        // Scheduled in an order that is neither theirs nor its reverse.
        let names = (0..<20).map { "work \($0)" }
        for offset in (0..<20).sorted(by: { ($0 * 7) % 20 < ($1 * 7) % 20 }) {
            _ = timers.schedule(at: now.advanced(by: .milliseconds(50) + .microseconds(offset)), ran.work(names[offset]))
        }
        try await Self.waitUntil("all the work ran") { ran.all.count == names.count }
        #expect(ran.all == names)
        #expect(timers.pending == 0)
    }

    @Test("on an injected clock: the sleeper sleeps on it, once a distinct instant, and runs each piece at its instant")
    func injectedClock() async throws {
        let clock = ManualPushClock()
        let timers = DueTimers(clock: clock)
        let ran = Ran()
        let start = clock.now
        // In their instants' order, so that no sleeper is replaced: a manual clock moves as soon
        // as its sleeper sleeps.
        for (name, wait) in [("a", 250), ("a2", 250), ("b", 500), ("c", 750)] {
            _ = timers.schedule(at: start.advanced(by: .milliseconds(wait)), ran.work(name, clock: clock))
        }
        try await Self.waitUntil("all the work ran") { ran.all.count == 4 }
        #expect(ran.all == ["a", "a2", "b", "c"])
        #expect(ran.at("b") == start.advanced(by: .milliseconds(500)) && ran.at("c") == start.advanced(by: .milliseconds(750)))
        #expect(clock.totalSlept == .milliseconds(750) && clock.sleepCount == 3)
        #expect(timers.pending == 0)
    }
}
