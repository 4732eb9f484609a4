import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// The durable webhook queue of `herald serve`: plugins' webhooks are stored in the store's
/// outbox (bounded per tenant), and a fixed number of senders posts them, with their retries.
/// A burst (a batch whose every device is unregistered) is rows in a table, not a task each;
/// deliveries waiting or between retries survive a restart.
///
/// ```swift
/// let outbox = WebhookOutbox(store: store, sender: HTTPWebhookSender.shared)
/// try await outbox.prepare()               // at start: counts, stale claims released
/// async let sending: Void = outbox.run()
/// outbox.stop()                            // then `run` returns within `shutdownGrace`
/// ```
public final class WebhookOutbox: WebhookQueue, JobEndQueue {
    public struct Configuration: Sendable, Hashable {
        /// Deliveries posted at once (all tenants together).
        public var senders = 4
        /// Deliveries one tenant may have waiting; beyond, new ones are refused (and logged).
        public var maxPerTenant = 100_000
        /// How often an idle outbox looks for due deliveries (with a store of its own, only while
        /// it holds some: its counts tell when it is empty).
        public var pollInterval: Duration = .milliseconds(200)
        /// How long ``stop()`` lets posts in flight finish before they are cancelled (a
        /// cancelled delivery stays in the outbox for the next start).
        public var shutdownGrace: Duration = .seconds(5)
        /// True when this process is the store's only user (SQLite under `StoreLock`): at start it
        /// releases every claim (the process that made them is gone). False for a store shared by
        /// several instances (PostgreSQL): their claims are live, a dead instance's claims end
        /// after ``claimWindow``, and the per-tenant counts are read again from the store every
        /// ``countRefreshInterval`` (each instance enqueues and delivers; the bound per tenant
        /// holds across instances to within what they enqueue between two reads).
        public var exclusive = true
        /// How long a claimed delivery is held by its claimer before another may take it. A
        /// delivery is claimed only when a sender is free and posted at once, so the claim needs to
        /// outlast one post: the longest webhook timeout a plugin accepts (`webhook_timeout_ms`,
        /// at most 120 s) with a margin. With a shared store this is also how long a dead
        /// instance's claimed deliveries wait before another instance sends them.
        public var claimWindow: Duration = .seconds(180)
        /// With a shared store: how often the per-tenant counts are read from the store.
        public var countRefreshInterval: Duration = .seconds(5)

        public init() {}
    }

    public let configuration: Configuration
    private let store: any WebhookOutboxStore & JobEndLedger
    private let sender: any WebhookSender
    private let clock: any PushClock
    private let logger: Logger
    private let state = Mutex(State())
    /// Opened by ``stop()``.
    private let stopped = OneShotGate()

    private struct State {
        var counts: [TenantID: Int] = [:]
        /// True once ``prepare()`` counted a store of this process's own: ``counts`` is then
        /// what the outbox holds, and an empty outbox is not read.
        var countsExact = false
        var inFlight = 0
        var peakInFlight = 0
        var delivered = 0
        var refused = 0
        var abandoned = 0
        var passes = 0
        var reads = 0
    }

    /// What the outbox did so far (for tests and benchmarks).
    public struct Statistics: Sendable, Hashable {
        public var waiting: Int
        public var inFlight: Int
        public var peakInFlight: Int
        public var delivered: Int
        /// Answered with a final refusal (4xx, 3xx), or refused before posting (address, URL).
        public var refused: Int
        /// Out of attempts.
        public var abandoned: Int
        /// Times the senders' loop looked for due deliveries, and of those the times it read the
        /// store (not when the outbox is known to be empty).
        public var passes: Int
        public var reads: Int
    }

    public init(
        store: any WebhookOutboxStore & JobEndLedger, sender: any WebhookSender, configuration: Configuration = Configuration(),
        clock: any PushClock = SystemPushClock(), logger: Logger = Logger(label: "herald")
    ) {
        self.store = store
        self.sender = sender
        self.configuration = configuration
        self.clock = clock
        var logger = logger
        logger[metadataKey: "herald.component"] = "webhook-outbox"
        self.logger = logger
    }

    public var statistics: Statistics {
        state.withLock {
            Statistics(
                waiting: $0.counts.values.reduce(0, +), inFlight: $0.inFlight, peakInFlight: $0.peakInFlight,
                delivered: $0.delivered, refused: $0.refused, abandoned: $0.abandoned, passes: $0.passes, reads: $0.reads)
        }
    }

    /// Counts what the outbox holds per tenant and, for a store of its own
    /// (``Configuration/exclusive``), releases the claims of the process that held it before.
    public func prepare() async throws {
        var released = 0
        if configuration.exclusive { released = try await store.releaseWebhookClaims() }
        let counts = try await store.outboxCounts()
        state.withLock {
            $0.counts = counts
            $0.countsExact = configuration.exclusive
        }
        let waiting = counts.values.reduce(0, +)
        if waiting > 0 {
            logger.info("webhooks waiting from an earlier run", metadata: ["herald.waiting": "\(waiting)", "herald.released": "\(released)"])
        }
    }

    public func enqueue(_ request: WebhookRequest, tenant: TenantID, attempts: Int, initialBackoff: Duration) async throws {
        let webhook = try reserve(request, tenant: tenant, attempts: attempts, initialBackoff: initialBackoff)
        do {
            try await store.enqueueWebhooks([webhook])
        } catch {
            giveBack(tenant)
            throw error
        }
    }

    /// Records the job's end as told and stores its event (when there is one) in one transaction
    /// (``JobEndLedger/recordJobEnd(tenant:job:webhook:at:)``), under the tenant's bound: with
    /// the outbox full the end is recorded without its event and the refusal thrown (as every
    /// webhook of a tenant whose receiver is that far behind), so that it is not tried again.
    public func tellJobEnd(
        _ request: WebhookRequest?, tenant: TenantID, job: JobID, attempts: Int, initialBackoff: Duration, at: Date
    ) async throws -> Bool {
        guard let request else { return try await store.recordJobEnd(tenant: tenant, job: job, webhook: nil, at: at) }
        let webhook: OutboxWebhook
        do {
            webhook = try reserve(request, tenant: tenant, attempts: attempts, initialBackoff: initialBackoff)
        } catch {
            guard try await store.recordJobEnd(tenant: tenant, job: job, webhook: nil, at: at) else { return false }
            throw error
        }
        let stored: Bool
        do {
            stored = try await store.recordJobEnd(tenant: tenant, job: job, webhook: webhook, at: at)
        } catch {
            giveBack(tenant)
            throw error
        }
        if !stored { giveBack(tenant) }
        return stored
    }

    public func untoldJobEnds(endedBefore: Date, limit: Int) async throws -> [Job] {
        try await store.untoldJobEnds(endedBefore: endedBefore, limit: limit)
    }

    /// Takes one of the tenant's places in the outbox (``Configuration/maxPerTenant``).
    private func reserve(
        _ request: WebhookRequest, tenant: TenantID, attempts: Int, initialBackoff: Duration
    ) throws(WebhookError) -> OutboxWebhook {
        let limit = configuration.maxPerTenant
        let reserved = state.withLock { state -> Bool in
            guard state.counts[tenant, default: 0] < limit else { return false }
            state.counts[tenant, default: 0] += 1
            return true
        }
        guard reserved else {
            throw WebhookError("the tenant's webhook outbox is full (\(limit) deliveries waiting)", retryable: false)
        }
        return OutboxWebhook(
            tenant: tenant, request: request, maxAttempts: max(1, attempts), backoff: initialBackoff, nextAttemptAt: clock.date)
    }

    private func giveBack(_ tenant: TenantID) {
        state.withLock { $0.counts[tenant, default: 1] -= 1 }
    }

    /// Stops taking deliveries; posts in flight get ``Configuration/shutdownGrace`` to finish.
    /// A read of the outbox under way is given up at once.
    public func stop() { stopped.open() }

    private var isStopping: Bool { stopped.isOpen }

    /// Posts due deliveries with at most ``Configuration/senders`` at once until ``stop()`` (or
    /// cancellation).
    public func run() async {
        await withTaskCancellationHandler {
            await send()
        } onCancel: {
            stop()
        }
    }

    private func send() async {
        let senders = max(1, configuration.senders)
        await withTaskGroup(of: Void.self) { group in
            // The watchdog: after stop, the grace period, then posts still in flight are cancelled.
            group.addTask {
                await self.stopped.wait()
                try? await Task.sleep(for: self.configuration.shutdownGrace)
            }
            group.addTask {
                await withDiscardingTaskGroup { posts in
                    let permits = PermitPool(permits: senders)
                    var countsRead = PushInstant.now
                    while !self.isStopping, !Task.isCancelled {
                        if !self.configuration.exclusive,
                            countsRead.duration(to: .now) >= self.configuration.countRefreshInterval
                        {
                            countsRead = .now
                            await self.refreshCounts()
                        }
                        let free = senders - self.state.withLock { $0.inFlight }
                        var due: [OutboxWebhook] = []
                        if free > 0, self.mayHoldDeliveries {
                            let now = self.clock.date
                            do {
                                // Claimed and then given up at a stop: the claim ends after its window, and
                                // the deliveries are sent by another instance or the next start.
                                due =
                                    try await self.stopped.unlessOpened {
                                        try await self.store.claimDueWebhooks(
                                            now: now,
                                            claimUntil: now.addingTimeInterval(JobRunner.seconds(self.configuration.claimWindow)),
                                            limit: free)
                                    } ?? []
                            } catch {
                                self.logger.storeFailure("cannot read the webhook outbox", error: error)
                            }
                        }
                        if due.isEmpty {
                            try? await Task.sleep(for: self.configuration.pollInterval)
                            continue
                        }
                        for webhook in due {
                            await permits.acquire()
                            self.state.withLock {
                                $0.inFlight += 1
                                $0.peakInFlight = max($0.peakInFlight, $0.inFlight)
                            }
                            posts.addTask {
                                await self.attempt(webhook)
                                self.state.withLock { $0.inFlight -= 1 }
                                permits.release()
                            }
                        }
                    }
                }
            }
            // Whichever ends first: the senders (all posts done after stop) or the watchdog.
            await group.next()
            group.cancelAll()
            await group.waitForAll()
        }
    }

    /// False only when the outbox is known to be empty (a store of this process's own, counted
    /// at ``prepare()`` and kept since): an idle outbox makes no store call.
    private var mayHoldDeliveries: Bool {
        state.withLock { state in
            state.passes += 1
            let read = !state.countsExact || state.counts.values.contains { $0 > 0 }
            if read { state.reads += 1 }
            return read
        }
    }

    /// Reads the per-tenant counts from the shared store (other instances enqueue and deliver too).
    private func refreshCounts() async {
        do {
            guard let counts = try await stopped.unlessOpened({ try await self.store.outboxCounts() }) else { return }
            state.withLock { $0.counts = counts }
        } catch {
            logger.warning("cannot count the webhook outbox", metadata: ["herald.error": "\(error)"])
        }
    }

    /// One attempt of one delivery, and what follows from its answer.
    private func attempt(_ webhook: OutboxWebhook) async {
        var logger = self.logger
        logger[metadataKey: "herald.tenant"] = "\(webhook.tenant)"
        let attempt = webhook.attempt + 1
        let failure: String
        do {
            let status = try await sender.post(webhook.request)
            if (200..<300).contains(status) {
                logger.debug("webhook delivered", metadata: ["herald.status": "\(status)", "herald.attempt": "\(attempt)"])
                await finish(webhook, count: \.delivered)
                return
            }
            if status != 429, status < 500 {
                logger.warning("webhook refused; not retrying", metadata: ["herald.status": "\(status)"])
                await finish(webhook, count: \.refused)
                return
            }
            failure = "status \(status)"
        } catch let error as WebhookError where !error.retryable {
            logger.warning("webhook not posted; not retrying", metadata: ["herald.error": "\(error)"])
            await finish(webhook, count: \.refused)
            return
        } catch is CancellationError {
            return  // shutdown: the delivery stays in the outbox, claimed until the next start.
        } catch {
            if Task.isCancelled { return }
            failure = "\(error)"
        }
        guard attempt < webhook.maxAttempts else {
            logger.error("webhook delivery failed", metadata: ["herald.attempts": "\(attempt)", "herald.error": "\(failure)"])
            await finish(webhook, count: \.abandoned)
            return
        }
        let next = clock.date.addingTimeInterval(JobRunner.seconds(webhook.backoff))
        do {
            try await store.rescheduleWebhook(
                id: webhook.id, attempt: attempt, backoff: min(webhook.backoff * 2, .seconds(60)), nextAttemptAt: next)
        } catch {
            logger.error("cannot reschedule a webhook", metadata: ["herald.error": "\(error)"])
        }
    }

    private func finish(_ webhook: OutboxWebhook, count: WritableKeyPath<State, Int>) async {
        do {
            try await store.removeWebhook(id: webhook.id)
        } catch {
            logger.error("cannot remove a finished webhook from the outbox", metadata: ["herald.error": "\(error)"])
            return
        }
        state.withLock { state in
            state[keyPath: count] += 1
            // Never below zero: with a shared store, another instance may have enqueued it.
            let left = max(0, state.counts[webhook.tenant, default: 0] - 1)
            state.counts[webhook.tenant] = left == 0 ? nil : left
        }
    }
}
