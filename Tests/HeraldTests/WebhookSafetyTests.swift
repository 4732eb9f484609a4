import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Logging
import Synchronization
import Testing

/// Webhooks as a hostile receiver (or tenant) would use them: redirects to internal hosts,
/// URLs that resolve to private addresses, storms of deliveries, restarts.
@Suite("Webhooks: no redirects, no private addresses, a bounded outbox")
struct WebhookSafetyTests {
    static let tenant = Fixtures.tenantID("acme")

    static func request(_ url: String, allowPrivate: Bool) -> WebhookRequest {
        WebhookRequest(url: url, headers: ["Content-Type": "application/json"], body: Array("{}".utf8), timeout: .seconds(10), allowPrivateAddresses: allowPrivate)
    }

    @Test("a redirect is not followed, even to loopback the tenant allowed: the 3xx is the answer")
    func redirectNotFollowed() async throws {
        let inside = try await WebhookTestServer()
        let outside = try await WebhookTestServer(statuses: [302], location: inside.url)
        defer { Task { try? await inside.shutdown(); try? await outside.shutdown() } }
        let status = try await HTTPWebhookSender().post(Self.request(outside.url, allowPrivate: true))
        #expect(status == 302)
        #expect(outside.received.count == 1)
        #expect(inside.received.isEmpty, "the redirect target was never contacted")
    }

    @Test("loopback is refused unless the tenant allows it; the check is on the resolved address")
    func privateAddressRefused() async throws {
        let server = try await WebhookTestServer()
        defer { Task { try? await server.shutdown() } }
        // By name: localhost resolves to loopback.
        for url in [server.url, "http://localhost:\(server.port)/hooks/apns", "http://127.1:\(server.port)/x", "http://[::1]:\(server.port)/x"] {
            do {
                _ = try await HTTPWebhookSender().post(Self.request(url, allowPrivate: false))
                Issue.record("posted to \(url)")
            } catch let error as WebhookError {
                #expect(!error.retryable && error.message.contains("loopback"), "\(error)")
            }
        }
        #expect(server.received.isEmpty)
        #expect(try await HTTPWebhookSender().post(Self.request(server.url, allowPrivate: true)) == 200)
        #expect(server.received.count == 1)
    }

    @Test("the address rules", arguments: [
        ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"),
        ("192.168.1.1", "private"), ("169.254.169.254", "link-local"), ("0.0.0.0", "unspecified"), ("100.64.0.1", "private (carrier-grade NAT)"),
        ("::1", "loopback"), ("fe80::1", "link-local"), ("fd00::1", "private (unique local)"), ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"), ("64:ff9b::a9fe:a9fe", "link-local"), ("224.0.0.1", "multicast"),
        ("8.8.8.8", ""), ("172.32.0.1", ""), ("2606:4700::1111", ""),
    ])
    func addressRules(address: String, expected: String) throws {
        var bytes = [UInt8](repeating: 0, count: 16)
        let family = address.contains(":") ? AF_INET6 : AF_INET
        #expect(inet_pton(family, address, &bytes) == 1)
        let restriction = WebhookAddressPolicy.restriction(of: family == AF_INET ? Array(bytes.prefix(4)) : bytes)
        #expect((restriction ?? "") == expected)
    }

    /// A sender that answers from a script after an optional pause and counts concurrent posts.
    final class ScriptedSender: WebhookSender {
        private let state = Mutex<(posted: Int, active: Int, peak: Int, statuses: [Int])>((0, 0, 0, []))
        let pause: Duration

        init(statuses: [Int] = [], pause: Duration = .zero) {
            self.pause = pause
            state.withLock { $0.statuses = statuses }
        }

        var posted: Int { state.withLock { $0.posted } }
        var peak: Int { state.withLock { $0.peak } }

        func post(_ request: WebhookRequest) async throws -> Int {
            state.withLock {
                $0.active += 1
                $0.peak = max($0.peak, $0.active)
            }
            defer { state.withLock { $0.active -= 1 } }
            if pause > .zero { try await Task.sleep(for: pause) }
            return state.withLock { state in
                state.posted += 1
                return state.statuses.isEmpty ? 200 : state.statuses.removeFirst()
            }
        }
    }

    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        for _ in 0..<3000 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("timed out waiting until \(what)")
    }

    /// The store's outbox, whose claims of due deliveries never answer while `silent` is set
    /// (until their caller gives them up).
    final class SilentClaims: WebhookOutboxStore, JobEndLedger {
        let base: SQLitePushStore
        private let state = Mutex<(silent: Bool, waiting: Int, givenUp: Int)>((true, 0, 0))

        init(_ base: SQLitePushStore) { self.base = base }

        /// Claims waiting now, and the ones that ended by cancellation.
        var waiting: Int { state.withLock { $0.waiting } }
        var givenUp: Int { state.withLock { $0.givenUp } }

        func claimDueWebhooks(now: Date, claimUntil: Date, limit: Int) async throws -> [OutboxWebhook] {
            guard state.withLock({ $0.silent }) else {
                return try await base.claimDueWebhooks(now: now, claimUntil: claimUntil, limit: limit)
            }
            state.withLock { $0.waiting += 1 }
            defer { state.withLock { ($0.waiting, $0.givenUp) = ($0.waiting - 1, $0.givenUp + 1) } }
            try await Task.sleep(for: .seconds(24 * 3600))
            return []
        }
        func enqueueWebhooks(_ webhooks: [OutboxWebhook]) async throws { try await base.enqueueWebhooks(webhooks) }
        func removeWebhook(id: Int64) async throws { try await base.removeWebhook(id: id) }
        func rescheduleWebhook(id: Int64, attempt: Int, backoff: Duration, nextAttemptAt: Date) async throws {
            try await base.rescheduleWebhook(id: id, attempt: attempt, backoff: backoff, nextAttemptAt: nextAttemptAt)
        }
        func releaseWebhookClaims() async throws -> Int { try await base.releaseWebhookClaims() }
        func outboxCounts() async throws -> [TenantID: Int] { try await base.outboxCounts() }
        func recordJobEnd(tenant: TenantID, job: JobID, webhook: OutboxWebhook?, at: Date) async throws -> Bool {
            try await base.recordJobEnd(tenant: tenant, job: job, webhook: webhook, at: at)
        }
        func untoldJobEnds(endedBefore: Date, limit: Int) async throws -> [Job] {
            try await base.untoldJobEnds(endedBefore: endedBefore, limit: limit)
        }
    }

    /// A read of the outbox that the store never answers is given up at the stop, not after the
    /// grace for posts in flight (an hour here): the run returns while the call still waits.
    @Test("a stop does not wait for an outbox read that the store never answers", .timeLimit(.minutes(1)))
    func stopGivesUpASilentRead() async throws {
        let store = SilentClaims(try Fixtures.store())
        var configuration = WebhookOutbox.Configuration()
        configuration.pollInterval = .milliseconds(1)
        configuration.shutdownGrace = .seconds(3600)
        let outbox = WebhookOutbox(store: store, sender: ScriptedSender(), configuration: configuration)
        try await outbox.prepare()
        try await outbox.enqueue(
            Self.request("https://hooks.example/x", allowPrivate: false), tenant: Self.tenant, attempts: 1,
            initialBackoff: .milliseconds(1))
        async let running: Void = outbox.run()
        try await Self.eventually("the outbox claims its due deliveries") { store.waiting == 1 }
        outbox.stop()
        await running
        #expect(store.givenUp == 1 && store.waiting == 0, "the claim was cancelled, not answered")
        #expect(try await store.outboxCounts()[Self.tenant] == 1, "the delivery stays for the next start")
    }

    @Test("a storm of deliveries is rows, posted by a fixed number of senders, bounded per tenant")
    func boundedOutbox() async throws {
        let store = try Fixtures.store()
        let sender = ScriptedSender(pause: .milliseconds(1))
        var configuration = WebhookOutbox.Configuration()
        configuration.senders = 3
        configuration.maxPerTenant = 500
        configuration.pollInterval = .milliseconds(10)
        let outbox = WebhookOutbox(store: store, sender: sender, configuration: configuration)
        try await outbox.prepare()
        for _ in 0..<500 {
            try await outbox.enqueue(Self.request("https://hooks.example/x", allowPrivate: false), tenant: Self.tenant, attempts: 3, initialBackoff: .milliseconds(1))
        }
        await #expect(throws: WebhookError.self) {
            try await outbox.enqueue(Self.request("https://hooks.example/x", allowPrivate: false), tenant: Self.tenant, attempts: 3, initialBackoff: .milliseconds(1))
        }
        // Another tenant has its own share.
        try await outbox.enqueue(Self.request("https://hooks.example/y", allowPrivate: false), tenant: Fixtures.tenantID("other"), attempts: 1, initialBackoff: .milliseconds(1))
        async let running: Void = outbox.run()
        try await Self.eventually("every delivery was posted") { outbox.statistics.delivered == 501 }
        outbox.stop()
        await running
        #expect(sender.posted == 501)
        #expect(sender.peak <= 3 && outbox.statistics.peakInFlight <= 3, "posts at once: \(sender.peak)")
        #expect(outbox.statistics.waiting == 0)
        #expect(try await store.outboxCounts().isEmpty)
    }

    @Test("an empty outbox of a store of its own is not read until a delivery is enqueued, and not after it is posted")
    func anEmptyOutboxIsNotRead() async throws {
        let store = try Fixtures.store()
        let sender = ScriptedSender()
        var configuration = WebhookOutbox.Configuration()
        configuration.pollInterval = .milliseconds(1)
        let outbox = WebhookOutbox(store: store, sender: sender, configuration: configuration)
        try await outbox.prepare()
        async let running: Void = outbox.run()
        try await Self.eventually("the senders looked 20 times") { outbox.statistics.passes >= 20 }
        #expect(outbox.statistics.reads == 0)

        try await outbox.enqueue(Self.request("https://hooks.example/x", allowPrivate: false), tenant: Self.tenant, attempts: 1, initialBackoff: .milliseconds(1))
        try await Self.eventually("the delivery was posted") { outbox.statistics.delivered == 1 }
        let reads = outbox.statistics.reads
        #expect(reads >= 1)
        let passes = outbox.statistics.passes
        try await Self.eventually("the senders looked 20 more times") { outbox.statistics.passes >= passes + 20 }
        #expect(outbox.statistics.reads == reads, "the empty outbox read again")
        outbox.stop()
        await running
        #expect(sender.posted == 1)

        // A shared store's outbox (other instances enqueue too) is read on every pass.
        configuration.exclusive = false
        let shared = WebhookOutbox(store: store, sender: sender, configuration: configuration)
        try await shared.prepare()
        async let sharing: Void = shared.run()
        try await Self.eventually("the shared outbox's senders looked 20 times") { shared.statistics.passes >= 20 }
        shared.stop()
        await sharing
        #expect(shared.statistics.reads == shared.statistics.passes)
    }

    @Test("a job's end takes a place in the tenant's outbox once; with the outbox full it is recorded without its event")
    func jobEndsInTheBoundedOutbox() async throws {
        let store = try Fixtures.store()
        var configuration = WebhookOutbox.Configuration()
        configuration.maxPerTenant = 2
        let outbox = WebhookOutbox(store: store, sender: ScriptedSender(), configuration: configuration)
        try await outbox.prepare()
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        let jobs = try ["one", "two", "three"].map { try JobID($0) }
        for id in jobs {
            _ = try await store.createJob(tenant: Self.tenant, id: id, environment: nil, notifications: [Fixtures.note()], createdAt: t0)
            try await store.updateJob(tenant: Self.tenant, id: id, state: .finished, at: t0)
        }
        let request = Self.request("https://hooks.example/end", allowPrivate: false)
        func tell(_ id: JobID) async throws -> Bool {
            try await outbox.tellJobEnd(request, tenant: Self.tenant, job: id, attempts: 3, initialBackoff: .seconds(1), at: t0)
        }
        #expect(try await tell(jobs[0]))
        #expect(try await tell(jobs[0]) == false, "told once")
        #expect(outbox.statistics.waiting == 1, "a repeat gives its place back")
        try await outbox.enqueue(request, tenant: Self.tenant, attempts: 1, initialBackoff: .seconds(1))
        // Full: the end is recorded (not tried again by every sweep), and the refusal is thrown.
        await #expect(throws: WebhookError.self) { try await tell(jobs[1]) }
        #expect(try await store.outboxCounts() == [Self.tenant: 2] && outbox.statistics.waiting == 2)
        #expect(try await outbox.untoldJobEnds(endedBefore: t0.addingTimeInterval(1), limit: 10).map(\.id) == [jobs[2]])
        // Nothing to send (no webhook): recorded, no place taken.
        #expect(try await outbox.tellJobEnd(nil, tenant: Self.tenant, job: jobs[2], attempts: 1, initialBackoff: .seconds(1), at: t0))
        #expect(try await outbox.untoldJobEnds(endedBefore: t0.addingTimeInterval(1), limit: 10).isEmpty)
        #expect(try await store.outboxCounts() == [Self.tenant: 2])
    }

    @Test("deliveries survive a restart; 5xx is retried, 4xx and 3xx are final")
    func survivesRestart() async throws {
        let store = try Fixtures.store()
        do {
            let first = WebhookOutbox(store: store, sender: ScriptedSender())
            try await first.prepare()
            for _ in 0..<3 {
                try await first.enqueue(Self.request("https://hooks.example/x", allowPrivate: false), tenant: Self.tenant, attempts: 3, initialBackoff: .milliseconds(1))
            }
            // Never run: the process "dies" with three deliveries waiting.
        }
        let sender = ScriptedSender(statuses: [503, 410, 301])
        var configuration = WebhookOutbox.Configuration()
        configuration.senders = 1
        configuration.pollInterval = .milliseconds(10)
        let second = WebhookOutbox(store: store, sender: sender, configuration: configuration)
        try await second.prepare()
        #expect(second.statistics.waiting == 3)
        async let running: Void = second.run()
        try await Self.eventually("the outbox emptied") { second.statistics.waiting == 0 }
        second.stop()
        await running
        let statistics = second.statistics
        #expect(sender.posted == 4, "the 503 was retried once")
        #expect(statistics.delivered == 1 && statistics.refused == 2)
    }

    @Test("the feedback plugin queues its webhook in the outbox rather than starting a task")
    func feedbackUsesTheOutbox() async throws {
        let store = try Fixtures.store()
        let directory = Fixtures.temporaryDirectory("herald-outbox")
        let sender = ScriptedSender()
        var configuration = WebhookOutbox.Configuration()
        configuration.pollInterval = .milliseconds(10)
        let outbox = WebhookOutbox(store: store, sender: sender, configuration: configuration)
        try await outbox.prepare()
        let transport = ScriptedTransport([.respond(status: 410, reason: .unregistered, timestamp: Date(timeIntervalSince1970: 1_700_000_000))])
        var logger = Logging.Logger(label: "t")
        logger.logLevel = .critical
        let router = Router(
            configuration: RouterConfiguration(
                store: store, transports: ScriptedTransports { _ in transport }, logger: logger, webhooks: sender,
                environment: [:], webhookQueue: outbox))
        var tenant = Fixtures.tenant("fb", plugins: [Fixtures.plugin("feedback")], file: directory + "/fb.yaml")
        tenant.webhook = TenantWebhook(
            url: "https://hooks.example/apns", secret: Secret(bytes: Array("0123456789abcdef-webhook-secret".utf8), origin: "test"),
            secretReference: "file:webhook.secret")
        await router.install([tenant])
        let result = try await router.send(tenant: Fixtures.tenantID("fb"), notification: Fixtures.note())
        #expect(result.status == 410)
        #expect(router.tasks.count == 0, "no task per webhook")
        #expect(outbox.statistics.waiting == 1)
        #expect(try await store.outboxCounts() == [Fixtures.tenantID("fb"): 1])
        async let running: Void = outbox.run()
        try await Self.eventually("the webhook was posted") { outbox.statistics.delivered == 1 }
        outbox.stop()
        await running
        await router.shutdown()
        #expect(sender.posted == 1)
    }

    /// A receiver that never answers (until cancelled).
    final class HangingSender: WebhookSender {
        private let started = Mutex(0)
        var count: Int { started.withLock { $0 } }
        func post(_ request: WebhookRequest) async throws -> Int {
            started.withLock { $0 += 1 }
            try await Task.sleep(for: .seconds(3600))
            return 200
        }
    }

    @Test("shutdown waits a bounded time for posts in flight; an unfinished delivery stays queued for the next start")
    func boundedShutdown() async throws {
        let store = try Fixtures.store()
        let sender = HangingSender()
        var configuration = WebhookOutbox.Configuration()
        configuration.pollInterval = .milliseconds(10)
        configuration.shutdownGrace = .milliseconds(100)
        let outbox = WebhookOutbox(store: store, sender: sender, configuration: configuration)
        try await outbox.prepare()
        try await outbox.enqueue(Self.request("https://hooks.example/x", allowPrivate: false), tenant: Self.tenant, attempts: 3, initialBackoff: .milliseconds(1))
        async let running: Void = outbox.run()
        try await Self.eventually("the post started") { sender.count == 1 }
        outbox.stop()
        await running  // returns after the grace period, not after the receiver's hour
        let next = WebhookOutbox(store: store, sender: ScriptedSender())
        try await next.prepare()
        #expect(next.statistics.waiting == 1)
        #expect(try await store.claimDueWebhooks(now: Date(), claimUntil: Date().addingTimeInterval(60), limit: 10).count == 1)
    }
}
