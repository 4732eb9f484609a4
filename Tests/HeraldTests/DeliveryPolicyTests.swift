import Foundation
import Herald
import HeraldCore
import Logging
import Testing

@Suite("Delivery policy, outcome classes and the circuit, as values")
struct DeliveryPolicyTests {
    // MARK: Retry schedule

    @Test func backoffDoublesUpToTheMaximum() {
        var policy = DeliveryPolicy()
        policy.initialBackoff = .seconds(1)
        policy.maxBackoff = .seconds(10)
        let waits = (1...6).map { policy.backoff(afterAttempts: $0) }
        #expect(waits == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(10), .seconds(10)])
        #expect(policy.backoff(afterAttempts: 10_000) == .seconds(10))
    }

    @Test func jitterDrawsTheConfiguredFraction() {
        var policy = DeliveryPolicy()
        policy.jitter = 0.5
        #expect(policy.jittered(.seconds(4), random: { $0.lowerBound }) == .seconds(2))
        #expect(policy.jittered(.seconds(4), random: { $0.upperBound }) == .seconds(4))
        // A misbehaving random source cannot push the wait outside [delay × (1 − jitter), delay].
        #expect(policy.jittered(.seconds(4), random: { _ in 7 }) == .seconds(4))
        policy.jitter = 0
        #expect(policy.jittered(.seconds(4), random: { _ in 0.3 }) == .seconds(4))
    }

    @Test("one resend rule: each outcome class decides the same for a single send and a batch item as documented")
    func resendRule() {
        let backoff = ExponentialBackoff(initial: .seconds(10), maximum: .seconds(40), jitter: 0)
        let single = ResendRule(caller: .singleSend(maxAttempts: 3), backoff: backoff)
        let leastOnce = ResendRule(caller: .batchItem(.atLeastOnce), backoff: backoff)
        let mostOnce = ResendRule(caller: .batchItem(.atMostOnce), backoff: backoff)
        let transient = DeliveryOutcome.transient(reason: "ServiceUnavailable", endpointFailure: true)
        let unknown = DeliveryOutcome.unknown(reason: "Transport")
        for rule in [single, leastOnce, mostOnce] {
            #expect(rule.decide(.delivered, attempts: 1) == .final)
            #expect(rule.decide(.permanent(reason: "BadDeviceToken"), attempts: 1) == .final)
            #expect(rule.decide(transient, attempts: 1) == .again(after: .seconds(10)))
            #expect(rule.decide(transient, attempts: 2) == .again(after: .seconds(20)))
        }
        // A retry-after longer than the backoff is waited out; a shorter one changes nothing.
        for rule in [single, leastOnce] {
            #expect(rule.decide(transient, attempts: 1, retryAfter: .seconds(30)) == .again(after: .seconds(30)))
            #expect(rule.decide(transient, attempts: 1, retryAfter: .seconds(3)) == .again(after: .seconds(10)))
            #expect(rule.decide(.delivered, attempts: 1, retryAfter: .seconds(30)) == .final)
        }
        // A single send stops at its attempts; a batch item at its give-up time (the caller's).
        #expect(single.decide(transient, attempts: 3) == .final)
        #expect(leastOnce.decide(transient, attempts: 9) == .again(after: .seconds(40)))
        // What may have reached APNs: at once under at-least-once, never again otherwise.
        #expect(single.decide(unknown, attempts: 1) == .unknown)
        #expect(mostOnce.decide(unknown, attempts: 1) == .unknown)
        #expect(leastOnce.decide(unknown, attempts: 1) == .again(after: .zero))
        // Nothing sent: a batch item waits without an attempt counted; a single send resends only
        // after a full queue.
        #expect(leastOnce.decide(.deferred(reason: "RateLimited"), attempts: 1) == .deferred(after: ResendRule.localRefusalDelay))
        #expect(single.decide(.deferred(reason: "RateLimited"), attempts: 1) == .final)
        #expect(single.decide(DeliveryOutcome(PushError.queueFull()), attempts: 1) == .again(after: .seconds(10)))
        // Jitter is drawn from the rule's backoff.
        let jittered = ResendRule(caller: .batchItem(.atLeastOnce), backoff: ExponentialBackoff(initial: .seconds(4), maximum: .seconds(4), jitter: 0.5))
        #expect(jittered.decide(transient, attempts: 1, random: { $0.lowerBound }) == .again(after: .seconds(2)))
    }

    // MARK: Outcome classes

    static func response(_ status: Int, _ reason: APNsReason?) -> APNsResponse {
        APNsResponse(status: status, apnsID: nil, reason: reason)
    }

    @Test func apnsAnswersAreClassified() {
        #expect(DeliveryOutcome(Self.response(200, nil)) == .delivered)
        #expect(DeliveryOutcome(Self.response(500, .internalServerError)) == .transient(reason: "InternalServerError", endpointFailure: true))
        #expect(DeliveryOutcome(Self.response(503, .serviceUnavailable)) == .transient(reason: "ServiceUnavailable", endpointFailure: true))
        #expect(DeliveryOutcome(Self.response(503, .shutdown)) == .transient(reason: "Shutdown", endpointFailure: true))
        #expect(DeliveryOutcome(Self.response(429, .tooManyRequests)) == .transient(reason: "TooManyRequests", endpointFailure: false))
        #expect(DeliveryOutcome(Self.response(403, .expiredProviderToken)) == .transient(reason: "ExpiredProviderToken", endpointFailure: false))
        #expect(DeliveryOutcome(Self.response(410, .unregistered)) == .permanent(reason: "Unregistered"))
        #expect(DeliveryOutcome(Self.response(400, .badDeviceToken)) == .permanent(reason: "BadDeviceToken"))
        #expect(DeliveryOutcome(Self.response(413, .payloadTooLarge)) == .permanent(reason: "PayloadTooLarge"))
        #expect(DeliveryOutcome(Self.response(403, .invalidProviderToken)) == .permanent(reason: "InvalidProviderToken"))
        #expect(DeliveryOutcome(Self.response(418, nil)) == .permanent(reason: "Status418"))
    }

    @Test func failuresWithoutAnAnswerAreClassified() {
        let refused = PushError.transport("could not connect", surelyNotProcessed: true)
        #expect(DeliveryOutcome(refused) == .transient(reason: "TransportFailed", endpointFailure: true))
        let dropped = PushError.transport("connection closed", surelyNotProcessed: false)
        #expect(DeliveryOutcome(dropped) == .unknown(reason: "TransportFailed"))
        #expect(DeliveryOutcome(PushError.deadlineExceeded(mayHaveReachedAPNs: true)) == .unknown(reason: "DeadlineExceeded"))
        #expect(DeliveryOutcome(PushError.deadlineExceeded(mayHaveReachedAPNs: false)) == .deferred(reason: "DeadlineExceeded"))
        #expect(DeliveryOutcome(PushError.queueFull()) == .deferred(reason: "QueueFull"))
        #expect(DeliveryOutcome(PushError(code: .rateLimited, message: "slow down")) == .deferred(reason: "RateLimited"))
        #expect(DeliveryOutcome(PushError.shuttingDown(try! TenantID("acme"))) == .deferred(reason: "ShuttingDown"))
        #expect(DeliveryOutcome(PushError.unknownTenant("acme")) == .deferred(reason: "UnknownTenant"))
        #expect(DeliveryOutcome(PushError.topicDisallowed("x", tenant: try! TenantID("acme"))) == .permanent(reason: "TopicDisallowed"))
        #expect(DeliveryOutcome(PushError(code: .tokenRefused, message: "gone", reason: .unregistered)) == .permanent(reason: "Unregistered"))
        struct Other: Error {}
        #expect(DeliveryOutcome(Other()) == .permanent(reason: "InternalError"))
    }

    @Test func onlyEndpointFailuresAndAnswersMoveTheCircuit() {
        #expect(DeliveryOutcome.delivered.endpointHealthy == true)
        #expect(DeliveryOutcome.permanent(reason: "BadDeviceToken").endpointHealthy == true)
        #expect(DeliveryOutcome.transient(reason: "ServiceUnavailable", endpointFailure: true).endpointHealthy == false)
        #expect(DeliveryOutcome.transient(reason: "TooManyRequests", endpointFailure: false).endpointHealthy == nil)
        #expect(DeliveryOutcome.unknown(reason: "TransportFailed").endpointHealthy == nil)
        #expect(DeliveryOutcome.deferred(reason: "RateLimited").endpointHealthy == nil)
    }

    // MARK: Circuit

    static let policy = CircuitPolicy(failureThreshold: 3, probeInterval: .seconds(5), maxProbeInterval: .seconds(20))

    @Test func opensAfterARunOfFailuresAndProbesOnceAfterTheInterval() {
        let t0 = PushInstant.now
        var circuit = CircuitBreaker()
        #expect(circuit.admit(now: t0, policy: Self.policy) == .send)
        #expect(circuit.record(healthy: false, probe: false, now: t0, policy: Self.policy) == nil)
        #expect(circuit.record(healthy: true, probe: false, now: t0, policy: Self.policy) == nil)  // the run restarts
        #expect(circuit.record(healthy: false, probe: false, now: t0, policy: Self.policy) == nil)
        #expect(circuit.record(healthy: false, probe: false, now: t0, policy: Self.policy) == nil)
        #expect(circuit.state == .closed(failures: 2))
        #expect(circuit.record(healthy: false, probe: false, now: t0, policy: Self.policy) == .opened)
        #expect(circuit.stateName == "open")
        #expect(circuit.admit(now: t0.advanced(by: .seconds(4)), policy: Self.policy) == .wait(until: t0.advanced(by: .seconds(5))))
        // Answers to sends made before it opened change nothing.
        #expect(circuit.record(healthy: true, probe: false, now: t0, policy: Self.policy) == nil)
        #expect(circuit.stateName == "open")

        let t5 = t0.advanced(by: .seconds(5))
        #expect(circuit.admit(now: t5, policy: Self.policy) == .probe)
        #expect(circuit.stateName == "half-open")
        #expect(circuit.admit(now: t5, policy: Self.policy) == .wait(until: t5.advanced(by: .seconds(1))), "one probe at a time")
        #expect(circuit.record(healthy: true, probe: true, now: t5, policy: Self.policy) == .closed)
        #expect(circuit.state == .closed(failures: 0))
        #expect(circuit.admit(now: t5, policy: Self.policy) == .send)
        #expect(circuit.openings == 1)
    }

    @Test func aFailedProbeDoublesTheWaitUpToTheMaximum() {
        let t0 = PushInstant.now
        var circuit = CircuitBreaker()
        for _ in 0..<3 { circuit.record(healthy: false, probe: false, now: t0, policy: Self.policy) }
        var now = t0
        var waits: [Duration] = []
        for _ in 0..<4 {
            guard case .open(let until, _) = circuit.state else {
                Issue.record("not open: \(circuit.state)")
                return
            }
            now = until
            #expect(circuit.admit(now: now, policy: Self.policy) == .probe)
            #expect(circuit.record(healthy: false, probe: true, now: now, policy: Self.policy) == .reopened)
            guard case .open(let next, _) = circuit.state else { return }
            waits.append(now.duration(to: next))
        }
        #expect(waits == [.seconds(10), .seconds(20), .seconds(20), .seconds(20)])
        #expect(circuit.openings == 5)
    }

    @Test func anAbandonedProbeLetsTheNextSendProbe() {
        let t0 = PushInstant.now
        var circuit = CircuitBreaker()
        for _ in 0..<3 { circuit.record(healthy: false, probe: false, now: t0, policy: Self.policy) }
        let t5 = t0.advanced(by: .seconds(5))
        #expect(circuit.admit(now: t5, policy: Self.policy) == .probe)
        circuit.probeAbandoned(now: t5)
        #expect(circuit.admit(now: t5, policy: Self.policy) == .probe)
    }

    @Test func circuitsAreKeptPerTenantAndEndpoint() throws {
        let circuits = DeliveryCircuits()
        let t0 = PushInstant.now
        let down = DeliveryCircuits.Key(tenant: try TenantID("down"), endpoint: "https://127.0.0.1:1")
        let other = DeliveryCircuits.Key(tenant: try TenantID("fine"), endpoint: "https://127.0.0.1:1")
        let failure = DeliveryOutcome.transient(reason: "TransportFailed", endpointFailure: true)
        for _ in 0..<3 {
            circuits.record(down, outcome: failure, probe: false, policy: Self.policy, now: t0, logger: .init(label: "test"))
        }
        #expect(circuits.admit(down, policy: Self.policy, now: t0) == .wait(until: t0.advanced(by: .seconds(5))))
        #expect(circuits.admit(other, policy: Self.policy, now: t0) == .send)
        let statuses = circuits.statuses(now: t0)
        #expect(statuses.map(\.state) == ["open"])
        #expect(statuses.first?.key == down)
        #expect(statuses.first?.probeIn == .seconds(5))
        circuits.retain(tenants: [other.tenant])
        #expect(circuits.statuses(now: t0).isEmpty)
    }
}
