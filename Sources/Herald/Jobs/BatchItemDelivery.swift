import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// One attempt at a batch item under its tenant's ``HeraldCore/DeliveryPolicy``: the expiry
/// check, the circuit, the send, and then the item's outcome or its next attempt, as a change
/// for the store (``HeraldStore/JobItemChange``) that the job runner writes with its chunk's
/// commit group (``OutcomeGroups``).
///
/// The job runner calls ``deliver(_:of:marks:routes:)`` for each item it claimed, once a tenant
/// permit is free, or ``start(_:of:routes:leaseChecked:completion:)`` when it sends the job by callback;
/// both run the same checks before the send (`prepare`) and the same decisions after it
/// (`finish`). The decisions are the policy's values (``HeraldCore/DeliveryOutcome``,
/// ``HeraldCore/ResendRule``, the same rule the router resends single sends by,
/// ``CircuitBreaker``); this type only runs them. One object for the job runner, which each
/// send's end refers to.
final class BatchItemDelivery: Sendable {
    let router: Router
    /// Draws the backoff's jitter.
    let random: @Sendable (ClosedRange<Double>) -> Double
    /// True when this process is the store's only user (SQLite): then an at-least-once item is
    /// sent without its wire mark or any check. The mark serves two ends: telling an
    /// at-most-once item that may have reached APNs from one never sent (an at-least-once item
    /// without an outcome is sent again either way, with its apns-id), and checking, right
    /// before the send, that no other claimant took the item's lease (no other process claims
    /// from this store). On a shared store (PostgreSQL) an at-least-once item gets that check
    /// alone, read without a write (``WireMarks/check(_:)``); an at-most-once item is marked.
    let exclusiveStore: Bool

    init(router: Router, random: @escaping @Sendable (ClosedRange<Double>) -> Double, exclusiveStore: Bool = false) {
        self.router = router
        self.random = random
        self.exclusiveStore = exclusiveStore
    }

    /// What became of the attempt.
    enum Step: Sendable, Equatable {
        /// Its outcome (`sent`, `failed`, `unknown`) or its next attempt, to be written.
        case write(JobItemChange)
        /// Not sent (cancelled): the item stays as it was.
        case leftPending
        /// Not sent: it got an outcome or its lease went to another claimant meanwhile.
        case notOurs
        /// The tenant is gone or the wire mark failed: nothing more of this job now.
        case pause
    }

    /// What every item of one job shares while its tenant's runtime stays the same: the
    /// delivery policy and the circuit key of the job's environment (resolved once, not per
    /// item: the key's endpoint URL is a string built from the endpoint), and the job's logger.
    /// One object, which an item's ``Attempt`` refers to rather than copying its values.
    final class Route: Sendable {
        let runtime: TenantRuntime
        let policy: DeliveryPolicy
        let circuitKey: DeliveryCircuits.Key?
        let logger: Logger

        init(runtime: TenantRuntime, job: Job, logger: Logger) {
            self.runtime = runtime
            let tenant = runtime.configuration
            policy = tenant.delivery
            let environment = job.environment ?? tenant.endpoints.defaultEnvironment
            circuitKey = tenant.endpoints.endpoint(for: environment).map {
                DeliveryCircuits.Key(tenant: job.tenant, endpoint: $0.url)
            }
            self.logger = logger
        }
    }

    /// One job's ``Route``, made again whenever the router holds another runtime for the
    /// tenant (a reload or a rotation): each item still looks its tenant's runtime up, as a
    /// single send does, and gets the policy and circuit of that runtime.
    final class Routes: Sendable {
        private let current = Mutex<Route?>(nil)
        /// The job run's logger, which each route carries.
        let logger: Logger

        init(logger: Logger) {
            self.logger = logger
        }

        func route(for runtime: TenantRuntime, job: Job) -> Route {
            if let route = current.withLock({ $0 }), route.runtime === runtime { return route }
            let route = Route(runtime: runtime, job: job, logger: logger)
            current.withLock { $0 = route }
            return route
        }
    }

    /// - Parameters:
    ///   - marks: marks the item on the wire, durably, right before its request is written.
    ///   - routes: the job's routes (one per job run, shared by its send tasks).
    nonisolated(nonsending) func deliver(_ item: JobItem, of job: Job, marks: WireMarks, routes: Routes) async -> Step {
        guard let runtime = router.runtime(for: job.tenant) else { return .pause }
        let attempt: Attempt
        switch prepare(item, route: routes.route(for: runtime, job: job)) {
        case .step(let step): return step
        case .send(let ready): attempt = ready
        }
        let (policy, key, probe, logger) = (attempt.route.policy, attempt.route.circuitKey, attempt.probe, attempt.route.logger)

        do {
            let marked: Bool
            switch (policy.guarantee, exclusiveStore) {
            case (.atLeastOnce, true): marked = true
            case (.atLeastOnce, false): marked = try await marks.check(item.index)
            case (.atMostOnce, _): marked = try await marks.mark(item.index)
            }
            guard marked else {
                if let key, probe { recordUnsentProbe(key, reason: "NotSent", policy: policy, logger: logger) }
                return .notOurs
            }
        } catch {
            if let key, probe { recordUnsentProbe(key, reason: "StoreFailed", policy: policy, logger: logger) }
            logger.storeFailure(
                "cannot mark or check a job item before its send; it is not sent now", error: error,
                metadata: ["herald.index": "\(item.index)"])
            return .pause
        }

        let outcome: Result<PushResult, any Error>
        do {
            // One attempt: the item's retries are the delivery policy's (below), not the pipeline's.
            outcome = .success(
                try await router.send(
                    tenant: job.tenant, notification: item.notification, environment: job.environment, retries: false))
        } catch {
            outcome = .failure(error)
        }
        return finish(attempt, outcome: outcome)
    }

    /// ``deliver(_:of:marks:routes:)`` without a task, for an at-least-once item whose
    /// send needs no wire mark: on a store this process has to itself, or on a shared store when
    /// the caller has just checked that the item's lease is still its claimant's
    /// (`leaseChecked`: the job runner checks a group of items in one read before it starts
    /// them). `completion` gets the step, possibly on a connection's event loop
    /// (``Router/startSend(tenant:notification:environment:deadline:retries:completion:)``).
    /// - Returns: false, having done nothing, when the item needs the `async` form.
    func start(
        _ item: JobItem, of job: Job, routes: Routes, leaseChecked: Bool = false,
        completion: @escaping @Sendable (consuming Step) -> Void
    ) -> Bool {
        guard exclusiveStore || leaseChecked, let runtime = router.runtime(for: job.tenant) else { return false }
        let route = routes.route(for: runtime, job: job)
        guard route.policy.guarantee == .atLeastOnce else { return false }
        switch prepare(item, route: route) {
        case .step(let step):
            completion(step)
        case .send(let attempt):
            // The send's end holds this object, the attempt and the completion: 112 bytes with
            // the closure's header, a block from the allocator's fast lists (up to 120 bytes),
            // made and freed for every item.
            router.startSend(tenant: job.tenant, notification: item.notification, environment: job.environment, retries: false) {
                outcome in
                completion(self.finish(attempt, outcome: outcome))
            }
        }
        return true
    }

    /// An item cleared for its send, and what its outcome is judged with: all the send's end
    /// needs of the item (not the item itself, which a completion would copy and hold).
    struct Attempt: Sendable {
        let index: Int
        /// The attempts before this one.
        let attempts: Int
        let apnsID: NotificationID?
        /// Whether it is its circuit's probe (declared here, it takes a byte the id leaves free).
        let probe: Bool
        /// The job's route when the item was prepared: its policy, circuit, usage and logger.
        let route: Route
        let firstAttempt: Date

        var policy: DeliveryPolicy { route.policy }
        /// The circuit it went through.
        var key: DeliveryCircuits.Key? { route.circuitKey }
        /// When its transient failures stop being sent again (`max_retry_duration` from its first attempt).
        var giveUpAt: Date { route.policy.retryDeadline(firstAttempt: firstAttempt) }
        /// The tenant's usage, which counts the item's final outcome.
        var usage: UsageMeter.Tally { route.runtime.usage }
    }

    enum Preparation: Sendable {
        /// Settled without a send (expired, unknown after a crash, deferred by the circuit).
        case step(Step)
        case send(Attempt)
    }

    /// Everything before the send: an at-most-once item found on the wire, the expiry, the circuit.
    private func prepare(_ item: JobItem, route: Route) -> Preparation {
        let clock = router.configuration.clock
        let policy = route.policy
        let now = clock.date

        // Its request was about to be written by an instance that stopped (or a send that was
        // cancelled) with no outcome recorded: it may have reached APNs.
        if let onWire = item.onWireAt, policy.guarantee == .atMostOnce {
            return .step(record(
                item.index,
                JobItemResult(
                    state: .unknown, status: nil, reason: DeliveryReason.unknown,
                    message: "its request was on the wire at \(onWire.ISO8601Format()) with no outcome recorded "
                        + "(the instance sending it stopped); at-most-once: not sent again",
                    apnsID: item.notification.id, finishedAt: now, attempts: max(item.attempts, 1)), usage: route.runtime.usage))
        }
        let firstAttempt = item.firstAttemptAt ?? now
        let giveUpAt = policy.retryDeadline(firstAttempt: firstAttempt)

        if case .at(let seconds)? = item.notification.expiration, Double(seconds) < now.timeIntervalSince1970 {
            return .step(record(
                item.index,
                JobItemResult(
                    state: .failed, status: nil, reason: DeliveryReason.expired,
                    message: "its apns-expiration passed before it could be sent; not sent"
                        + (item.lastError.map { " (last error: \($0))" } ?? ""),
                    apnsID: item.notification.id, finishedAt: now, attempts: item.attempts), usage: route.runtime.usage))
        }

        // The circuit of the tenant's endpoint for this job's environment.
        let key = route.circuitKey
        var probe = false
        if let key {
            switch router.circuits.admit(key, policy: policy.circuit, now: clock.now) {
            case .send: break
            case .probe: probe = true
            case .wait(let until):
                let next = now.addingTimeInterval(max(0, clock.now.duration(to: until).secondsValue))
                let lastError = item.lastError ?? "CircuitOpen"
                guard next <= giveUpAt else {
                    return .step(
                        giveUp(
                            item.index, apnsID: item.notification.id, status: nil, lastError: lastError,
                            attempts: item.attempts, usage: route.runtime.usage))
                }
                return .step(
                    deferItem(
                        item.index,
                        JobItemRetry(attempts: item.attempts, firstAttemptAt: firstAttempt, nextAttemptAt: next, lastError: lastError)))
            }
        }
        return .send(
            Attempt(
                index: item.index, attempts: item.attempts, apnsID: item.notification.id, probe: probe, route: route,
                firstAttempt: firstAttempt))
    }

    /// Everything after the send: the circuit's record, then the item's outcome or next attempt.
    private func finish(_ attempt: Attempt, outcome sent: Result<PushResult, any Error>) -> Step {
        let clock = router.configuration.clock
        let (policy, key, probe, firstAttempt, giveUpAt) = (attempt.policy, attempt.key, attempt.probe, attempt.firstAttempt, attempt.giveUpAt)
        let logger = attempt.route.logger
        let index = attempt.index
        let attempts = attempt.attempts + 1
        let outcome: DeliveryOutcome
        // What the resend rule needs of APNs' answer, read in place (the answer itself is not
        // copied: a final outcome is made from it below).
        var answered: (status: Int, retryAfter: Duration?)? = nil
        var failure: (any Error)? = nil
        switch sent {
        case .success(let result):
            answered = (result.status, result.response.retryAfter)
            outcome = DeliveryOutcome(result.response)
        case .failure(let error) where error is CancellationError:
            if let key, probe { recordUnsentProbe(key, reason: "Cancelled", policy: policy, logger: logger) }
            return .leftPending
        case .failure(let error):
            failure = error
            outcome = DeliveryOutcome(error)
        }
        if let key {
            router.circuits.record(key, outcome: outcome, probe: probe, policy: policy.circuit, now: clock.now, logger: logger)
        }

        let finished = clock.date
        if case .deferred = outcome, let error = failure as? PushError, error.code == .unknownTenant { return .pause }
        let rule = ResendRule.batchItem(policy: policy)
        switch rule.decide(outcome, attempts: attempts, retryAfter: answered?.retryAfter, random: random) {
        case .final:
            if case .success(let answer) = sent {
                return record(index, JobItemResult(answer, finishedAt: finished, attempts: attempts), usage: attempt.usage)
            }
            guard let failure else { return .leftPending }  // neither an answer nor an error: cannot happen
            var result = JobItemResult(failure: failure, apnsID: attempt.apnsID, finishedAt: finished)
            if let error = failure as? PushError, let reason = error.reason { result.reason = reason.wireValue }
            result.attempts = attempts
            return record(index, result, usage: attempt.usage)

        case .again(let wait):
            let reason = Self.reason(outcome)
            let next = finished.addingTimeInterval(wait.secondsValue)
            guard next <= giveUpAt else {
                return giveUp(
                    index, apnsID: attempt.apnsID, status: answered?.status, lastError: reason, attempts: attempts,
                    usage: attempt.usage)
            }
            return deferItem(
                index, JobItemRetry(attempts: attempts, firstAttemptAt: firstAttempt, nextAttemptAt: next, lastError: reason))

        case .unknown:
            return record(
                index,
                JobItemResult(
                    state: .unknown, status: nil, reason: DeliveryReason.unknown,
                    message: "the request may have reached APNs (\(Self.reason(outcome))) and got no answer; at-most-once: not sent again",
                    apnsID: attempt.apnsID, finishedAt: finished, attempts: attempts), usage: attempt.usage)

        case .deferred(let wait):
            // Not the notification's fault and nothing was sent: no attempt counted, never failed.
            return deferItem(
                index,
                JobItemRetry(
                    attempts: attempt.attempts, firstAttemptAt: firstAttempt,
                    nextAttemptAt: finished.addingTimeInterval(wait.secondsValue), lastError: Self.reason(outcome)))
        }
    }

    /// The outcome's reason, for an item's last error.
    private static func reason(_ outcome: DeliveryOutcome) -> String {
        switch outcome {
        case .delivered: "Delivered"
        case .permanent(let reason), .transient(let reason, _), .unknown(let reason), .deferred(let reason): reason
        }
    }

    /// A probe the circuit admitted that was not sent: the circuit lets the next one probe.
    private func recordUnsentProbe(_ key: DeliveryCircuits.Key, reason: String, policy: DeliveryPolicy, logger: Logger) {
        router.circuits.record(
            key, outcome: .deferred(reason: reason), probe: true, policy: policy.circuit,
            now: router.configuration.clock.now, logger: logger)
    }

    private func giveUp(
        _ index: Int, apnsID: NotificationID?, status: Int?, lastError: String, attempts: Int, usage: UsageMeter.Tally
    ) -> Step {
        record(
            index,
            JobItemResult(
                state: .failed, status: status, reason: DeliveryReason.retryTimeExceeded,
                message: "transient failures went on past max_retry_duration (last: \(lastError), \(attempts) attempts)",
                apnsID: apnsID, finishedAt: router.configuration.clock.date, attempts: attempts),
            usage: usage)
    }

    /// An item's final outcome: written, and counted in the tenant's usage.
    private func record(_ index: Int, _ result: consuming JobItemResult, usage: UsageMeter.Tally) -> Step {
        usage.addBatchItem(result)
        return .write(JobItemChange(index: index, change: .outcome(result)))
    }

    private func deferItem(_ index: Int, _ retry: JobItemRetry) -> Step {
        .write(JobItemChange(index: index, change: .retry(retry)))
    }
}
