import Synchronization
import Testing

@testable import HeraldCore

@Suite("The deadlines of a pipeline's checks, watched together")
struct DeadlineWatchTests {
    final class Expired: Sendable {
        private let names = Mutex<[(name: String, at: PushInstant)]>([])
        var all: [String] { names.withLock { $0.map(\.name) } }
        func at(_ name: String) -> PushInstant? { names.withLock { $0.first { $0.name == name }?.at } }
        func callback(_ name: String) -> @Sendable () -> Void {
            { self.names.withLock { $0.append((name, PushInstant.now)) } }
        }
    }

    private static func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        let end = PushInstant.now.advanced(by: .seconds(30))
        while !condition() {
            guard PushInstant.now < end else {
                Issue.record("timed out waiting: \(what)")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test("checks settled before their deadline leave nothing watched and never expire")
    func settledChecksAreForgotten() async throws {
        let deadlines = DeadlineWatch()
        let expired = Expired()
        // Far enough that all 500 are watched and settled before it even while the whole suite
        // keeps the cores busy.
        let soon = PushInstant.now.advanced(by: .seconds(3))
        let ids = (0..<500).map { deadlines.watch(until: soon, expire: expired.callback("check \($0)")) }
        #expect(deadlines.watching == 500)
        for id in ids { deadlines.settle(id) }
        #expect(deadlines.watching == 0)
        // One more, due after the others: it expires, they do not.
        _ = deadlines.watch(until: soon.advanced(by: .milliseconds(50)), expire: expired.callback("late"))
        try await Self.waitUntil("the late check expired") { !expired.all.isEmpty }
        #expect(expired.all == ["late"] && deadlines.watching == 0)
    }

    @Test("an unsettled check expires at its deadline, once: an earlier deadline watched later is not held up by a later one")
    func anEarlierDeadlineIsNotHeldUp() async throws {
        let deadlines = DeadlineWatch()
        let expired = Expired()
        let now = PushInstant.now
        // A sleeper is armed for 60 s; the check watched next is due long before.
        let later = deadlines.watch(until: now.advanced(by: .seconds(60)), expire: expired.callback("later"))
        let far = deadlines.watch(until: now.advanced(by: .seconds(600)), expire: expired.callback("far"))
        _ = deadlines.watch(until: now.advanced(by: .milliseconds(100)), expire: expired.callback("first"))
        try await Self.waitUntil("the first check expired") { !expired.all.isEmpty }
        #expect(expired.all == ["first"])
        #expect(try #require(expired.at("first")) >= now.advanced(by: .milliseconds(100)))
        #expect(deadlines.watching == 2)
        deadlines.settle(later)
        deadlines.settle(far)
        #expect(deadlines.watching == 0 && expired.all == ["first"])
    }

    @Test("checks due at the same wake expire earliest deadline first")
    func dueChecksExpireInDeadlineOrder() async throws {
        let deadlines = DeadlineWatch()
        let expired = Expired()
        let now = PushInstant.now
        // Due a microsecond apart: all due by the time the sleeper armed for the first wakes.
        // Watched in an order that is neither theirs nor its reverse, all well before the first
        // is due even while the whole suite keeps the cores busy.
        let names = (0..<20).map { "check \($0)" }
        for offset in (0..<20).sorted(by: { ($0 * 7) % 20 < ($1 * 7) % 20 }) {
            _ = deadlines.watch(until: now.advanced(by: .seconds(2) + .microseconds(offset)), expire: expired.callback(names[offset]))
        }
        try await Self.waitUntil("every check expired") { expired.all.count == names.count }
        #expect(expired.all == names)
        #expect(deadlines.watching == 0)
    }
}
