import HeraldCore
import Testing

@Suite("Push instants")
struct PushInstantTests {
    @Test("an instant moves by a duration and measures the duration to another, in nanoseconds")
    func movesAndMeasures() {
        let start = PushInstant(nanoseconds: 1_000)
        let later = start.advanced(by: .milliseconds(2))
        #expect(later.nanoseconds == 2_001_000)
        #expect(start.duration(to: later) == .milliseconds(2))
        #expect(later.duration(to: start) == .milliseconds(-2))
        #expect(later - start == .milliseconds(2))
        #expect(later - .milliseconds(2) == start)
        #expect(start + .microseconds(3) == PushInstant(nanoseconds: 4_000))
        #expect(start < later && !(later < start) && start.advanced(byNanoseconds: 0) == start)
        #expect(start.nanoseconds(to: later) == 2_000_000)
    }

    @Test("moving and measuring saturate at the ends of the range instead of trapping")
    func saturates() {
        let end = PushInstant(nanoseconds: .max - 1)
        #expect(end.advanced(by: .seconds(1)).nanoseconds == .max)
        #expect(PushInstant(nanoseconds: .min + 1).advanced(by: .seconds(-1)).nanoseconds == .min)
        #expect(PushInstant(nanoseconds: .min).nanoseconds(to: end) == .max)
        #expect(end.nanoseconds(to: PushInstant(nanoseconds: .min)) == .min)
        #expect(Duration.seconds(Int64.max).nanoseconds == .max)
        #expect(Duration.seconds(Int64.min).nanoseconds == .min)
        #expect(PushInstant(nanoseconds: -5).uptimeNanoseconds == 0)
    }

    @Test("a duration's nanoseconds are whole, toward zero")
    func durationNanoseconds() {
        #expect(Duration.seconds(1.5).nanoseconds == 1_500_000_000)
        #expect(Duration.seconds(-1.5).nanoseconds == -1_500_000_000)
        #expect(Duration.nanoseconds(7).nanoseconds == 7)
        #expect((Duration.nanoseconds(7) / 2).nanoseconds == 3)
    }

    @Test("the clock's reading never goes back")
    func monotonic() {
        var last = PushInstant.now
        for _ in 0..<1_000 {
            let now = PushInstant.now
            #expect(last <= now)
            last = now
        }
    }

    @Test("a sleep until a passed instant returns at once; a cancelled sleep throws")
    func sleeps() async throws {
        try await PushInstant.sleep(until: PushInstant.now.advanced(by: .seconds(-1)))
        let sleeper = Task { try await PushInstant.sleep(until: PushInstant.now.advanced(by: .seconds(60))) }
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
    }

    @Test("the manual clock's instants move by what it is told, to the nanosecond")
    func manualClock() {
        let clock = ManualPushClock()
        let start = clock.now
        clock.advance(by: .microseconds(1_500))
        #expect(start.nanoseconds(to: clock.now) == 1_500_000)
    }
}
