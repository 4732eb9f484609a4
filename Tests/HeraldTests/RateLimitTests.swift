import Foundation
import Herald
import HeraldCore
import RateLimitPlugin
import Testing

@Suite("rate-limit plugin")
struct RateLimitTests {
    @Test("holds the rate: after the burst, sends are spaced 1/rate apart")
    func holdsRate() async throws {
        let clock = ManualPushClock()
        let transports = ScriptedTransports()
        let router = try Fixtures.router(transports: transports, clock: clock)
        await router.install([
            Fixtures.tenant(
                "rl", plugins: [Fixtures.plugin("rate-limit", .obj(["per_second": .int(10), "burst": .int(5)]))])
        ])
        let start = clock.now
        for _ in 0..<25 {
            _ = try await router.send(
                tenant: Fixtures.tenantID("rl"), notification: Fixtures.note(),
                deadline: clock.now.advanced(by: .seconds(30)))
        }
        #expect(transports[Fixtures.tenantID("rl")]?.attempts.count == 25)
        // 5 go at once, the other 20 at 10 a second.
        let elapsed = start.duration(to: clock.now)
        #expect(elapsed > .milliseconds(1999) && elapsed < .milliseconds(2001))
    }

    @Test("over the limit, a send whose deadline comes first fails with RateLimited and never reaches APNs")
    func refusesPastDeadline() async throws {
        let clock = ManualPushClock()
        let transports = ScriptedTransports()
        let router = try Fixtures.router(transports: transports, clock: clock)
        await router.install([
            Fixtures.tenant(
                "rl", plugins: [Fixtures.plugin("rate-limit", .obj(["per_second": .int(1), "burst": .int(2)]))])
        ])
        let id = Fixtures.tenantID("rl")
        _ = try await router.send(
            tenant: id, notification: Fixtures.note(), deadline: clock.now.advanced(by: .milliseconds(100)))
        _ = try await router.send(
            tenant: id, notification: Fixtures.note(), deadline: clock.now.advanced(by: .milliseconds(100)))
        do {
            _ = try await router.send(
                tenant: id, notification: Fixtures.note(), deadline: clock.now.advanced(by: .milliseconds(100)))
            Issue.record("expected RateLimited")
        } catch let error as PushError {
            #expect(error.code == .rateLimited)
            #expect(
                error.message
                    == "over tenant 'rl''s rate limit (1/s, burst 2): the next slot is 1000 ms away, past the send's deadline"
            )
            #expect(!error.mayHaveReachedAPNs)
        }
        #expect(transports[id]?.attempts.count == 2)
        // With time to wait, it goes after a second.
        let before = clock.now
        _ = try await router.send(
            tenant: id, notification: Fixtures.note(), deadline: clock.now.advanced(by: .seconds(5)))
        #expect(before.duration(to: clock.now) == .seconds(1))
        #expect(transports[id]?.attempts.count == 3)
    }

    @Test("per-topic buckets limit each topic on its own")
    func perTopic() async throws {
        let clock = ManualPushClock()
        let router = try Fixtures.router(clock: clock)
        let options: JSONValue = .obj([
            "per_second": .int(100), "burst": .int(100), "per_topic": .obj(["per_second": .int(1), "burst": .int(1)]),
            "max_wait_ms": .int(0),
        ])
        await router.install([Fixtures.tenant("rl", plugins: [Fixtures.plugin("rate-limit", options)])])
        let id = Fixtures.tenantID("rl")
        _ = try await router.send(tenant: id, notification: Fixtures.note(topic: "com.example.app"))
        _ = try await router.send(
            tenant: id, notification: Fixtures.note(topic: "com.example.app.voip", pushType: .voip))
        await #expect(throws: PushError.self) {
            _ = try await router.send(tenant: id, notification: Fixtures.note(topic: "com.example.app"))
        }
    }

    @Test("bad options name the option and the rule")
    func badOptions() {
        #expect(throws: PluginOptionError(option: "per_second", message: "is required")) {
            try RateLimitConfiguration(options: .obj(["burst": .int(3)]))
        }
        #expect(throws: PluginOptionError(option: "per_second", message: "must be greater than 0, got -5")) {
            try RateLimitConfiguration(options: .obj(["per_second": .int(-5)]))
        }
        #expect(throws: PluginOptionError(option: "per_topic.burst", message: "must be a whole number, got \"lots\"")) {
            try RateLimitConfiguration(
                options: .obj([
                    "per_second": .int(5), "per_topic": .obj(["per_second": .int(1), "burst": .string("lots")]),
                ]))
        }
        #expect(
            throws: PluginOptionError(option: nil, message: "options must be a mapping of names to values, got a list")
        ) {
            try RateLimitConfiguration(options: .array([]))
        }
    }
}
