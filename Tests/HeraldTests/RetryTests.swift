import Foundation
import Herald
import HeraldCore
import Testing

@Suite("Built-in retry")
struct RetryTests {
    let tenant = Fixtures.tenantID("retry")

    func run(
        _ script: [ScriptedTransport.Step], retry: JSONValue? = nil, clock: ManualPushClock = ManualPushClock(),
        deadline: Duration? = nil, retries: Bool = true
    ) async throws -> (Result<PushResult, any Error>, ScriptedTransport) {
        let transport = ScriptedTransport(script)
        let router = try Fixtures.router(transports: ScriptedTransports { _ in transport }, clock: clock)
        let plugins = retry.map { [Fixtures.plugin("retry", $0)] } ?? []
        await router.install([Fixtures.tenant("retry", plugins: plugins)])
        let result: Result<PushResult, any Error>
        do {
            result = .success(
                try await router.send(
                    tenant: tenant, notification: Fixtures.note(), deadline: deadline.map { clock.now.advanced(by: $0) },
                    retries: retries))
        } catch {
            result = .failure(error)
        }
        return (result, transport)
    }

    @Test(
        "resends what the delivery policy calls transient (500, 503, 429) with the same apns-id",
        arguments: [
            (500, APNsReason.internalServerError), (503, .serviceUnavailable), (503, .shutdown),
            (429, .tooManyRequests), (429, .tooManyProviderTokenUpdates),
        ])
    func retryable(status: Int, reason: APNsReason) async throws {
        let clock = ManualPushClock()
        let (result, transport) = try await run(
            [.respond(status: status, reason: reason), .respond(status: status, reason: reason)], clock: clock)
        let pushed = try result.get()
        #expect(pushed.isSuccess)
        #expect(pushed.attempts == 3)
        #expect(transport.attempts.count == 3)
        #expect(Set(transport.attempts.map(\.notification.id)).count == 1)
        #expect(transport.attempts.first?.notification.id == pushed.notificationID)
        #expect(clock.sleepCount == 2)
    }

    @Test("an answer's retry-after longer than the backoff is waited out before the resend, within the deadline")
    func retryAfterIsHonoured() async throws {
        let clock = ManualPushClock()
        let (result, transport) = try await run(
            [.respond(status: 503, reason: .serviceUnavailable, retryAfter: .seconds(3))], clock: clock)
        #expect(try result.get().isSuccess && transport.attempts.count == 2)
        #expect(clock.totalSlept == .seconds(3), "the backoff alone is 200 ms: \(clock.totalSlept)")
        // Past the deadline it is not waited for: the caller gets the 503 at once.
        let late = ManualPushClock()
        let (answer, once) = try await run(
            [.respond(status: 503, reason: .serviceUnavailable, retryAfter: .seconds(120))], clock: late, deadline: .seconds(60))
        #expect(try answer.get().status == 503 && once.attempts.count == 1 && late.sleepCount == 0)
    }

    @Test("a caller that retries itself (the job runner) gets one attempt and the answer, whatever it is")
    func callerRetries() async throws {
        let clock = ManualPushClock()
        let (result, transport) = try await run(
            [.respond(status: 503, reason: .serviceUnavailable)], clock: clock, retries: false)
        let pushed = try result.get()
        #expect(pushed.status == 503 && pushed.reason == .serviceUnavailable && pushed.attempts == 1)
        #expect(transport.attempts.count == 1)
        #expect(clock.sleepCount == 0)
        let (failed, again) = try await run(
            [.fail(.transport("connection refused", surelyNotProcessed: true))], retries: false)
        #expect(throws: PushError.self) { try failed.get() }
        #expect(again.attempts.count == 1)
    }

    @Test(
        "never resends an answer APNs gave for good",
        arguments: [
            (400, APNsReason.badDeviceToken), (403, .invalidProviderToken), (410, .unregistered),
            (413, .payloadTooLarge), (404, .badPath),
        ])
    func final(status: Int, reason: APNsReason) async throws {
        let (result, transport) = try await run([.respond(status: status, reason: reason)])
        let pushed = try result.get()
        #expect(pushed.status == status && pushed.reason == reason && pushed.attempts == 1)
        #expect(transport.attempts.count == 1)
    }

    @Test(
        "403 ExpiredProviderToken is sent again once, at once, with the same apns-id, by a caller that retries itself too",
        arguments: [true, false])
    func expiredProviderToken(retries: Bool) async throws {
        let clock = ManualPushClock()
        let expired = ScriptedTransport.Step.respond(status: 403, reason: .expiredProviderToken)
        let (result, transport) = try await run([expired], clock: clock, retries: retries)
        let pushed = try result.get()
        #expect(pushed.isSuccess && pushed.attempts == 2)
        #expect(transport.attempts.count == 2 && Set(transport.attempts.map(\.notification.id)) == [pushed.notificationID])
        #expect(clock.sleepCount == 0)
        // Expired again on the resend: that answer is the outcome.
        let (twice, again) = try await run([expired, expired], clock: clock, retries: retries)
        let answered = try twice.get()
        #expect(answered.status == 403 && answered.reason == .expiredProviderToken && answered.attempts == 2)
        #expect(again.attempts.count == 2)
    }

    @Test("resends after a connection failure that surely was not processed")
    func notProcessed() async throws {
        let (result, transport) = try await run([.fail(.transport("connection refused", surelyNotProcessed: true))])
        #expect(try result.get().isSuccess)
        #expect(transport.attempts.count == 2)
    }

    @Test("never resends a stream that APNs may have processed")
    func mayHaveBeenProcessed() async throws {
        let (result, transport) = try await run([
            .fail(.transport("connection lost after the request was written", surelyNotProcessed: false))
        ])
        #expect(throws: PushError.self) { try result.get() }
        #expect(transport.attempts.count == 1)
        if case .failure(let error as PushError) = result {
            #expect(error.code == .transport && error.mayHaveReachedAPNs)
        }
    }

    @Test("stops after max_attempts and returns APNs' last answer")
    func boundedByAttempts() async throws {
        let (result, transport) = try await run(
            Array(repeating: .respond(status: 503, reason: .serviceUnavailable), count: 10),
            retry: .obj(["max_attempts": .int(4)]),
            deadline: .seconds(600))
        let pushed = try result.get()
        #expect(pushed.status == 503 && pushed.attempts == 4)
        #expect(transport.attempts.count == 4)
    }

    @Test("stops when the next backoff would pass the deadline")
    func boundedByDeadline() async throws {
        let clock = ManualPushClock()
        let retry: JSONValue = .obj([
            "max_attempts": .int(10), "initial_backoff_ms": .int(400), "max_backoff_ms": .int(400), "jitter": .int(0),
        ])
        let (result, transport) = try await run(
            Array(repeating: .respond(status: 500, reason: .internalServerError), count: 10), retry: retry,
            clock: clock, deadline: .milliseconds(1000))
        let pushed = try result.get()
        // Waits of 400 ms at 0 and 400 fit before 1000 ms; a third (to 1200) would not.
        #expect(pushed.status == 500 && pushed.attempts == 3)
        #expect(transport.attempts.count == 3)
        #expect(clock.totalSlept == .milliseconds(800))
    }

    @Test("backoff grows exponentially up to the maximum")
    func backoff() {
        let policy = RetryPolicy(maxAttempts: 8, initialBackoff: .milliseconds(100), maxBackoff: .milliseconds(1000))
        #expect(
            (1...6).map { policy.backoff(after: $0) } == [
                .milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .milliseconds(1000),
                .milliseconds(1000),
            ])
    }

    @Test("retry options are checked like every plugin's")
    func options() {
        #expect(throws: PluginOptionError(option: "max_attempts", message: "must be between 1 and 10, got 0")) {
            try RetryPolicy(options: .obj(["max_attempts": .int(0)]))
        }
        #expect(
            throws: PluginOptionError(
                option: "max_backoff_ms", message: "must be at least initial_backoff_ms (500), got 100")
        ) {
            try RetryPolicy(options: .obj(["initial_backoff_ms": .int(500), "max_backoff_ms": .int(100)]))
        }
        #expect(
            throws: PluginOptionError(
                option: "attempts",
                message: "unknown option (known: initial_backoff_ms, jitter, max_attempts, max_backoff_ms)")
        ) {
            try RetryPolicy(options: .obj(["attempts": .int(3)]))
        }
    }
}
