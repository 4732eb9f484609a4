import Dispatch
import EventLoopExecutors
import Foundation
import Herald
import HeraldAPNs
import HeraldCore
import HeraldStore
import Logging
import MetricsTestKit
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// A transport whose answer depends only on the device token and how often it was sent, with or
/// without the callback form: a batch sent by callback and the same batch through a transport
/// with only the `async` form get the same answers, whatever order they go in.
final class DeviceScriptTransport: PushTransport, TransportProvider {
    enum Form: Sendable, CustomStringConvertible {
        /// Only the `async` form.
        case asyncOnly
        /// The callback form, its completion called before `startSend` returns.
        case inline
        /// The callback form, its completion called on another thread.
        case otherThread

        var description: String {
            switch self {
            case .asyncOnly: "async only"
            case .inline: "callbacks completed inline"
            case .otherThread: "callbacks completed on another thread"
            }
        }
    }

    static let apnsTime = Date(timeIntervalSince1970: 1_700_000_000)

    private struct State {
        var attempts: [String: Int] = [:]
        var asyncSends = 0
        var callbackSends = 0
        var startedOnLoop = 0
    }

    let form: Form
    /// The loop offered as ``sendingExecutor`` (none when nil).
    let loop: (any EventLoop)?
    private let state = Mutex(State())

    init(_ form: Form, loop: (any EventLoop)? = nil) {
        self.form = form
        self.loop = loop
    }

    var asyncSends: Int { state.withLock { $0.asyncSends } }
    var callbackSends: Int { state.withLock { $0.callbackSends } }
    /// Callback sends started from a task running on ``loop``.
    var startedOnLoop: Int { state.withLock { $0.startedOnLoop } }

    var sendingExecutor: (any TaskExecutor)? { loop.map { EventLoopTaskExecutor($0) } }

    /// By the token's last byte: 410, 400, 503 then 200, a reset that may have reached APNs then
    /// 200, else 200.
    private func answer(_ notification: AdmittedNotification, callback: Bool) -> Result<APNsResponse, PushError> {
        let attempt = state.withLock { state -> Int in
            if callback { state.callbackSends += 1 } else { state.asyncSends += 1 }
            state.attempts[(notification.deviceToken?.hex ?? ""), default: 0] += 1
            return state.attempts[(notification.deviceToken?.hex ?? ""), default: 0]
        }
        let id = notification.id
        switch Int(notification.deviceToken?.bytes.last ?? 0) % 6 {
        case 1: return .success(APNsResponse(status: 410, apnsID: id, reason: .unregistered, timestamp: Self.apnsTime))
        case 2: return .success(APNsResponse(status: 400, apnsID: id, reason: .badDeviceToken))
        case 3 where attempt == 1: return .success(APNsResponse(status: 503, apnsID: id, reason: .serviceUnavailable))
        case 4 where attempt == 1: return .failure(.transport("connection reset", surelyNotProcessed: false))
        default: return .success(APNsResponse(status: 200, apnsID: id))
        }
    }

    func send(_ notification: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse {
        try answer(notification, callback: false).get()
    }

    var sendsByCallback: Bool {
        switch form {
        case .asyncOnly: false
        case .inline, .otherThread: true
        }
    }

    func startSend(
        _ notification: AdmittedNotification, deadline: PushInstant,
        completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void
    ) {
        guard sendsByCallback else {
            // What a transport with only the `async` form does: a task that awaits it.
            Task { completion(answer(notification, callback: false)) }
            return
        }
        if loop?.inEventLoop == true { state.withLock { $0.startedOnLoop += 1 } }
        let result = answer(notification, callback: true)
        switch form {
        case .asyncOnly, .inline: completion(result)
        case .otherThread: DispatchQueue.global().async { completion(result) }
        }
    }

    func shutdown() async {}

    func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport { self }
}

/// A plugin that makes every send wait a moment (``PushDecision/notBefore(_:)``) or check
/// something first (``PushDecision/check(_:)``), by the token's second-to-last byte.
struct PausingPluginFactory: PluginFactory {
    struct Middleware: PushMiddleware {
        func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
            switch Int(notification.deviceToken?.bytes[30] ?? 0) % 3 {
            case 0: .notBefore(PushInstant.now.advanced(by: .milliseconds(1)))
            case 1: .check { await Task.yield() }
            default: .proceed
            }
        }
    }

    let name = "pausing"
    func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware { Middleware() }
}

/// A plugin that makes each middleware decision, by the token's last byte (independently of
/// ``DeviceScriptTransport``'s answer, which reads that byte modulo 6): refuses, answers "not
/// before" a moment later, asks an `async` check first, or lets the send go and leaves a
/// follow-up that the outcome waits for (counted in ``followUps`` once it has run).
struct DecisionsPluginFactory: PluginFactory {
    enum Decision: Int, CaseIterable {
        case refuse, notBefore, check, followUp
    }

    static func decision(_ token: DeviceToken?) -> Decision {
        guard let last = token?.bytes.last else { return .followUp }
        return Decision(rawValue: (Int(last) / 6) % 4) ?? .followUp
    }

    final class FollowUps: Sendable {
        private let done = Mutex<[String: Int]>([:])
        func add(_ token: DeviceToken) { done.withLock { $0[token.hex, default: 0] += 1 } }
        var byToken: [String: Int] { done.withLock { $0 } }
    }

    struct Middleware: PushMiddleware {
        let followUps: FollowUps

        func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
            switch DecisionsPluginFactory.decision(notification.deviceToken) {
            case .refuse: throw PushError(code: .tokenRefused, message: "refused by the decisions plugin", field: "device_token")
            case .notBefore: return .notBefore(PushInstant.now.advanced(by: .milliseconds(2)))
            case .check: return .check { try await Task.sleep(for: .milliseconds(1)) }
            case .followUp: return .proceed
            }
        }

        func didSend(
            _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
            outcome: Result<PushResult, any Error>
        ) -> PushFollowUp? {
            guard DecisionsPluginFactory.decision(notification.deviceToken) == .followUp else { return nil }
            guard let token = notification.deviceToken else { return nil }
            let followUps = followUps
            return {
                try? await Task.sleep(for: .milliseconds(1))
                followUps.add(token)
            }
        }
    }

    let name = "decisions"
    let followUps: FollowUps
    func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware {
        Middleware(followUps: followUps)
    }
}

@Suite("batch items sent by callback through the one pipeline")
struct CallbackSendTests {
    /// What one batch came to: each device's outcome, the tokens recorded invalid, the metrics.
    struct Run: Equatable {
        struct Outcome: Hashable {
            var state: JobItemState
            var status: Int?
            var reason: String?
            var attempts: Int
        }
        var outcomes: [String: Outcome]
        var invalid: Set<String>
        var counters: [String: Int64]
    }

    static let count = 600

    /// Runs one batch of ``count`` tokens for a tenant with `feedback` (recording only) and
    /// `metrics` (and `extra` plugins) through `transport`, with a real job runner on `backend`
    /// (PostgreSQL as a shared store: each item's lease is checked before its send).
    static func run(
        _ transport: DeviceScriptTransport, extra: [PluginConfiguration] = [], refuse: [JSONValue] = [],
        drivesOnConnectionLoop: Bool = true, backend: StoreBackend = .sqlite,
        followUps: DecisionsPluginFactory.FollowUps = .init()
    ) async throws -> Run {
        let metrics = TestMetrics()
        var registry = PluginRegistry.standard(metricsFactory: metrics)
        registry.register(PausingPluginFactory())
        registry.register(DecisionsPluginFactory(followUps: followUps))
        let opened = try await backend.open()
        let store = opened.store
        let router = try Fixtures.router(transports: transport, store: store, clock: SystemPushClock(), registry: registry)
        var tenant = Fixtures.tenant(
            "cb", plugins: [Fixtures.plugin("feedback", .obj(["refuse": .array(refuse)])), Fixtures.plugin("metrics")] + extra)
        tenant.delivery = DeliveryPolicy(
            guarantee: .atLeastOnce, maxRetryDuration: .seconds(600), initialBackoff: .milliseconds(50),
            maxBackoff: .milliseconds(200), jitter: 0.5,
            circuit: CircuitPolicy(failureThreshold: 10_000, probeInterval: .milliseconds(100), maxProbeInterval: .seconds(1)))
        let report = await router.install([tenant])
        #expect(report.failures.isEmpty, "\(report.failures)")
        let id = tenant.id

        let notes = (0..<count).map { seed -> HeraldCore.Notification in
            var bytes = [UInt8](repeating: 0xA5, count: 32)
            bytes[30] = UInt8(truncatingIfNeeded: seed >> 8)
            bytes[31] = UInt8(truncatingIfNeeded: seed)
            return HeraldCore.Notification(
                deviceToken: DeviceToken(bytes: bytes), topic: "com.example.app", payload: Array(#"{"aps":{"alert":"cb"}}"#.utf8))
        }
        let job = try await store.createJob(tenant: id, id: try JobID("callbacks"), environment: nil, notifications: notes, createdAt: Date())
            .job
        var configuration = JobRunnerConfiguration()
        configuration.concurrencyPerTenant = 16
        configuration.claimSize = 100
        configuration.commitGroup = 8
        configuration.rescanInterval = .milliseconds(200)
        configuration.sendsByCallback = true
        configuration.drivesOnConnectionLoop = drivesOnConnectionLoop
        configuration.exclusiveStore = backend == .sqlite
        let runner = JobRunner(router: router, store: store, configuration: configuration, logger: SandboxRig.quietLogger)
        async let running: Void = runner.run()
        let deadline = PushInstant.now.advanced(by: .seconds(120))
        while PushInstant.now < deadline, try await store.job(tenant: id, id: job.id)?.state != .finished {
            try await Task.sleep(for: .milliseconds(50))
        }
        runner.stop()
        await running
        let statistics = runner.statistics
        #expect(statistics.itemsInFlight == 0 && statistics.sendTasks == 0 && statistics.claimedItemsHeld == 0)
        #expect(statistics.peakItemsInFlight <= 16)
        // Every permit came back, those the driving task took ahead too.
        #expect(runner.permitsHeld(by: id) == 0)

        let items = try await store.items(tenant: id, job: job.id, fromIndex: 0, limit: count)
        var outcomes: [String: Run.Outcome] = [:]
        for item in items {
            outcomes[(item.notification.deviceToken?.hex ?? "")] = Run.Outcome(
                state: item.state, status: item.result?.status, reason: item.result?.reason, attempts: item.result?.attempts ?? -1)
        }
        let invalid = try await store.invalidTokens(tenant: id, limit: 10_000).map { "\($0.token.hex) \($0.reason.wireValue)" }
        var counters: [String: Int64] = [:]
        for (status, reason) in [("200", "none"), ("410", "Unregistered"), ("400", "BadDeviceToken"), ("503", "ServiceUnavailable"),
            ("error", "TransportFailed")]
        {
            counters["\(status) \(reason)"] = metrics.counterTotal(
                label: "herald_notifications_total",
                dimensions: [("tenant", "cb"), ("kind", "device"), ("topic", "com.example.app"), ("push_type", "alert"), ("status", status), ("reason", reason)])
        }
        counters["all"] = metrics.counterTotal(label: "herald_notifications_total")
        await router.shutdown()
        await opened.close()
        return Run(outcomes: outcomes, invalid: Set(invalid), counters: counters)
    }

    @Test("the same batch ends the same by callback and through a transport with only the async form", arguments: [
        DeviceScriptTransport.Form.inline, .otherThread,
    ])
    func sameOutcomes(form: DeviceScriptTransport.Form) async throws {
        let hookedTransport = DeviceScriptTransport(form)
        let hooked = try await Self.run(hookedTransport)
        let plainTransport = DeviceScriptTransport(.asyncOnly)
        let plain = try await Self.run(plainTransport)

        // Each path was the one taken: every attempt by callback, or every one awaited.
        #expect(hookedTransport.asyncSends == 0 && hookedTransport.callbackSends > Self.count)
        #expect(plainTransport.callbackSends == 0 && plainTransport.asyncSends > Self.count)
        #expect(hookedTransport.callbackSends == plainTransport.asyncSends)

        // What the batch came to is what the script says, on both paths.
        #expect(plain.outcomes.count == Self.count)
        // Tokens per answer kind (the token's last byte modulo 6, as the script reads it).
        let kinds = (0..<Self.count).map { ($0 & 0xFF) % 6 }
        func tokens(_ kind: Int) -> Int { kinds.filter { $0 == kind }.count }
        #expect(plain.outcomes.values.filter { $0.status == 410 && $0.state == .failed && $0.attempts == 1 }.count == tokens(1))
        #expect(plain.outcomes.values.filter { $0.status == 400 && $0.state == .failed }.count == tokens(2))
        #expect(plain.outcomes.values.filter { $0.status == 200 && $0.attempts == 2 }.count == tokens(3) + tokens(4))
        #expect(plain.outcomes.values.filter { $0.status == 200 && $0.attempts == 1 }.count == tokens(0) + tokens(5))
        #expect(plain.invalid.count == tokens(1) + tokens(2))
        #expect(plain.counters["all"] == Int64(Self.count + tokens(3) + tokens(4)))
        #expect(plain.counters["error TransportFailed"] == Int64(tokens(4)))
        #expect(plain.counters["503 ServiceUnavailable"] == Int64(tokens(3)))

        #expect(hooked == plain)
    }

    @Test("on PostgreSQL (a shared store) the batch is sent by callback too, each lease checked first, and ends as on SQLite")
    func sharedStoreSendsByCallback() async throws {
        let hookedTransport = DeviceScriptTransport(.otherThread)
        let shared = try await Self.run(hookedTransport, backend: .postgres)
        let plainTransport = DeviceScriptTransport(.asyncOnly)
        let plain = try await Self.run(plainTransport)
        #expect(hookedTransport.asyncSends == 0 && hookedTransport.callbackSends > Self.count)
        #expect(hookedTransport.callbackSends == plainTransport.asyncSends)
        #expect(shared.outcomes.count == Self.count)
        #expect(shared == plain)
    }

    @Test("a job sent by callback runs on its transport's sending executor, with the same outcomes as off it")
    func onTheTransportsLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let onLoop = DeviceScriptTransport(.otherThread, loop: group.next())
        let there = try await Self.run(onLoop)
        let offLoop = DeviceScriptTransport(.otherThread, loop: group.next())
        let elsewhere = try await Self.run(offLoop, drivesOnConnectionLoop: false)
        try await group.shutdownGracefully()

        // Every send was started by the driving task on the loop; off it, none.
        #expect(onLoop.callbackSends > Self.count && onLoop.startedOnLoop == onLoop.callbackSends)
        #expect(offLoop.callbackSends > Self.count && offLoop.startedOnLoop == 0)
        #expect(there.outcomes.count == Self.count)
        #expect(there == elsewhere)
    }

    @Test("a plugin that makes sends wait or check first keeps them off tasks of their own, with the same outcomes")
    func pluginThatWaitsOrChecks() async throws {
        let transport = DeviceScriptTransport(.otherThread)
        let run = try await Self.run(transport, extra: [Fixtures.plugin("pausing")])
        let plain = try await Self.run(DeviceScriptTransport(.asyncOnly))
        #expect(transport.asyncSends == 0 && transport.callbackSends > Self.count)
        #expect(run == plain)
    }

    @Test("each middleware decision (refuse, not before, check, follow-up) does the same to a batch item and to a single send")
    func decisionsOnBothPaths() async throws {
        let batchFollowUps = DecisionsPluginFactory.FollowUps()
        let batchTransport = DeviceScriptTransport(.otherThread)
        let batch = try await Self.run(batchTransport, extra: [Fixtures.plugin("decisions")], followUps: batchFollowUps)

        let singleFollowUps = DecisionsPluginFactory.FollowUps()
        let singleTransport = DeviceScriptTransport(.otherThread)
        var registry = PluginRegistry.standard()
        registry.register(DecisionsPluginFactory(followUps: singleFollowUps))
        let router = try Fixtures.router(transports: singleTransport, clock: SystemPushClock(), registry: registry)
        #expect(await router.install([Fixtures.tenant("cb", plugins: [Fixtures.plugin("decisions")])]).failures.isEmpty)
        var refusedSingles = Set<String>()
        var sentSingles = Set<String>()
        for seed in 0..<Self.count {
            var bytes = [UInt8](repeating: 0xA5, count: 32)
            bytes[30] = UInt8(truncatingIfNeeded: seed >> 8)
            bytes[31] = UInt8(truncatingIfNeeded: seed)
            let note = HeraldCore.Notification(
                deviceToken: DeviceToken(bytes: bytes), topic: "com.example.app", payload: Array(#"{"aps":{"alert":"cb"}}"#.utf8))
            do {
                _ = try await router.send(tenant: Fixtures.tenantID("cb"), notification: note, retries: false)
                sentSingles.insert((note.deviceToken?.hex ?? ""))
            } catch let error as PushError where error.code == .tokenRefused {
                refusedSingles.insert((note.deviceToken?.hex ?? ""))
            } catch {
                sentSingles.insert((note.deviceToken?.hex ?? ""))  // the transport's scripted failure: it was sent
            }
        }
        await router.shutdown()

        let decisions = Dictionary(grouping: batch.outcomes.keys) { DecisionsPluginFactory.decision(try! DeviceToken(hex: $0)) }
        for decision in DecisionsPluginFactory.Decision.allCases {
            #expect(!(decisions[decision] ?? []).isEmpty, "no token takes \(decision)")
        }
        // Refused: never sent, failed with the plugin's code, on both paths.
        let refused = Set(decisions[.refuse] ?? [])
        #expect(refused == refusedSingles)
        for token in refused {
            #expect(batch.outcomes[token]?.state == .failed && batch.outcomes[token]?.reason == "TokenRefused")
        }
        // Every other token reached the transport after its wait or check, on both paths.
        #expect(sentSingles == Set(batch.outcomes.keys).subtracting(refused))
        #expect(batchTransport.callbackSends >= sentSingles.count && batchTransport.asyncSends == 0)
        #expect(singleTransport.callbackSends == sentSingles.count)
        // Each follow-up ran before its send's outcome was handed on: once per attempt.
        let followed = Set(decisions[.followUp] ?? [])
        #expect(Set(singleFollowUps.byToken.keys) == followed && singleFollowUps.byToken.values.allSatisfy { $0 == 1 })
        #expect(Set(batchFollowUps.byToken.keys) == followed)
        for token in followed {
            #expect(batchFollowUps.byToken[token] == batch.outcomes[token]?.attempts, "\(token)")
        }
    }

    @Test("a tenant whose feedback refuses tokens sends by callback too, its store check awaited before each send")
    func feedbackThatRefuses() async throws {
        let transport = DeviceScriptTransport(.otherThread)
        let run = try await Self.run(transport, refuse: [.string("Unregistered")])
        #expect(transport.asyncSends == 0 && transport.callbackSends > Self.count)
        #expect(run.invalid.count == (0..<Self.count).filter { [1, 2].contains(($0 & 0xFF) % 6) }.count)
    }
}

/// The pipeline runs the hooks in order: a refusal is seen after the send by the middlewares
/// before the one that refused, not by those after it; waits and checks hold the send, not a thread.
@Suite("send pipeline")
struct SendPipelineTests {
    final class Calls: Sendable {
        let list = Mutex<[String]>([])
        func add(_ call: String) { list.withLock { $0.append(call) } }
        var all: [String] { list.withLock { $0 } }
    }

    struct Recording: PushMiddleware {
        enum Before: Sendable {
            /// `check`: an `async` check; `answer`: a check answered by callback, from another thread.
            case proceed, refuse, wait(Duration), check(refuses: Bool), answer(refuses: Bool)
        }
        let name: String
        let calls: Calls
        var before = Before.proceed
        var followUp = false
        var clock: any PushClock = SystemPushClock()

        func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
            calls.add("will \(name)")
            switch before {
            case .proceed: return .proceed
            case .refuse: throw PushError(code: .rateLimited, message: "refused by \(name)")
            case .wait(let wait): return .notBefore(clock.now.advanced(by: wait))
            case .check(let refuses):
                let (calls, name) = (calls, name)
                return .check {
                    await Task.yield()
                    calls.add("check \(name)")
                    if refuses { throw PushError(code: .tokenRefused, message: "checked by \(name)") }
                }
            case .answer(let refuses):
                let (calls, name) = (calls, name)
                return .check(answering: { answer in
                    DispatchQueue.global().async {
                        calls.add("check \(name)")
                        answer(refuses ? .failure(PushError(code: .tokenRefused, message: "checked by \(name)")) : .success(()))
                    }
                })
            }
        }

        func didSend(
            _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
            outcome: Result<PushResult, any Error>
        ) -> PushFollowUp? {
            switch outcome {
            case .success: calls.add("did \(name) ok")
            case .failure: calls.add("did \(name) failed")
            }
            guard followUp else { return nil }
            let (calls, name) = (calls, name)
            return {
                await Task.yield()
                calls.add("follow-up \(name)")
            }
        }
    }

    static var context: PushContext { PushContext(tenant: Fixtures.tenantID("h"), environment: .production, deadline: .now + .seconds(60)) }

    /// A context whose deadline is `deadline` from `clock`'s now.
    static func context(_ clock: ManualPushClock, deadline: Duration) -> PushContext {
        PushContext(tenant: Fixtures.tenantID("h"), environment: .production, deadline: clock.now.advanced(by: deadline))
    }

    /// Runs `middlewares` around a terminal that logs `wire` and answers 200.
    static func run(_ middlewares: [any PushMiddleware], calls: Calls, clock: any PushClock = SystemPushClock(),
                    context: PushContext = context) async -> Result<PushResult, any Error> {
        let sent = Fixtures.admitted()
        return await withCheckedContinuation { done in
            let pipeline = SendPipeline(middlewares, clock: clock) { notification, context, completion in
                calls.add("wire")
                completion(.success(APNsResponse(status: 200, apnsID: notification.id)))
            }
            pipeline.start(sent, context: context) { outcome in
                calls.add("done")
                done.resume(returning: outcome)
            }
        }
    }

    @Test("outermost first before the send, innermost first after it; follow-ups end before the outcome is handed on")
    func order() async throws {
        let calls = Calls()
        let outcome = await Self.run(
            [
                Recording(name: "a", calls: calls), Recording(name: "b", calls: calls, followUp: true),
                Recording(name: "c", calls: calls, followUp: true),
            ], calls: calls)
        #expect(try outcome.get().isSuccess)
        #expect(
            calls.all == ["will a", "will b", "will c", "wire", "did c ok", "did b ok", "did a ok", "follow-up c", "follow-up b", "done"])
    }

    @Test("a refusal stops the pipeline there; those before it see the failure, the send is not made")
    func refusal() async throws {
        let calls = Calls()
        let outcome = await Self.run(
            [
                Recording(name: "a", calls: calls, followUp: true), Recording(name: "b", calls: calls, before: .refuse),
                Recording(name: "c", calls: calls),
            ], calls: calls)
        #expect(throws: PushError.self) { try outcome.get() }
        #expect(calls.all == ["will a", "will b", "did a failed", "follow-up a", "done"])
    }

    @Test(
        "a check is awaited before the next middleware; one that refuses stops the send like a thrown refusal",
        arguments: ["async", "answering"])
    func checks(form: String) async throws {
        let check = { (refuses: Bool) in
            form == "async" ? Recording.Before.check(refuses: refuses) : .answer(refuses: refuses)
        }
        let calls = Calls()
        let passed = await Self.run(
            [Recording(name: "a", calls: calls, before: check(false)), Recording(name: "b", calls: calls)], calls: calls)
        #expect(try passed.get().isSuccess)
        #expect(calls.all == ["will a", "check a", "will b", "wire", "did b ok", "did a ok", "done"])

        let refusedCalls = Calls()
        let refused = await Self.run(
            [
                Recording(name: "a", calls: refusedCalls), Recording(name: "b", calls: refusedCalls, before: check(true)),
                Recording(name: "c", calls: refusedCalls),
            ], calls: refusedCalls)
        guard case .failure(let error as PushError) = refused else {
            Issue.record("expected the check's refusal, got \(refused)")
            return
        }
        #expect(error.code == .tokenRefused)
        #expect(refusedCalls.all == ["will a", "will b", "check b", "did a failed", "done"])
    }

    /// A check that never answers by itself, until the test lets it go; it tells when it was
    /// cancelled.
    struct Hanging: PushMiddleware {
        final class State: Sendable {
            let parked = Mutex<CheckedContinuation<Void, Never>?>(nil)
            let cancelled = Mutex(false)
        }
        let calls: Calls
        let state = State()

        func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
            calls.add("will hang")
            let state = state
            return .check {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in state.parked.withLock { $0 = continuation } }
                } onCancel: {
                    state.cancelled.withLock { $0 = true }
                }
            }
        }

        func didSend(
            _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
            outcome: Result<PushResult, any Error>
        ) -> PushFollowUp? {
            calls.add("did hang")
            return nil
        }
    }

    @Test("a check still running at the deadline ends the send there: not sent, the check cancelled")
    func aCheckIsBoundedByTheDeadline() async throws {
        let calls = Calls()
        let hanging = Hanging(calls: calls)
        let context = PushContext(tenant: Fixtures.tenantID("h"), environment: .production, deadline: .now + .milliseconds(200))
        let outcome = await Self.run(
            [Recording(name: "a", calls: calls), hanging, Recording(name: "b", calls: calls)], calls: calls, context: context)
        guard case .failure(let error as PushError) = outcome else {
            Issue.record("expected DeadlineExceeded, got \(outcome)")
            return
        }
        #expect(error.code == .deadlineExceeded && !error.mayHaveReachedAPNs, "\(error)")
        // Not sent; the outer middleware sees the failure, the one that asked is not asked after.
        #expect(calls.all == ["will a", "will hang", "did a failed", "done"])
        #expect(hanging.state.cancelled.withLock { $0 })
        // Let the abandoned check end. Its answer reaches the same callback as a callback check's,
        // whose late answer `aCallbackCheckIsBoundedByTheDeadline` gives by hand and sees change
        // nothing.
        while hanging.state.parked.withLock({ $0 }) == nil { try await Task.sleep(for: .milliseconds(5)) }
        hanging.state.parked.withLock { $0?.resume(); $0 = nil }
    }

    @Test("a check answered by callback that has not answered at the deadline ends the send there; its late answer is ignored")
    func aCallbackCheckIsBoundedByTheDeadline() async throws {
        final class Keeper: Sendable { let answer = Mutex<PushCheck.Answer?>(nil) }
        struct Unanswered: PushMiddleware {
            let keeper: Keeper
            func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
                .check(answering: { answer in keeper.answer.withLock { $0 = answer } })
            }
        }
        let keeper = Keeper()
        let calls = Calls()
        let context = PushContext(tenant: Fixtures.tenantID("h"), environment: .production, deadline: .now + .milliseconds(200))
        let outcome = await Self.run(
            [Recording(name: "a", calls: calls), Unanswered(keeper: keeper), Recording(name: "b", calls: calls)],
            calls: calls, context: context)
        guard case .failure(let error as PushError) = outcome else {
            Issue.record("expected DeadlineExceeded, got \(outcome)")
            return
        }
        #expect(error.code == .deadlineExceeded && !error.mayHaveReachedAPNs, "\(error)")
        #expect(calls.all == ["will a", "did a failed", "done"])
        // The answer, when it comes, changes nothing: the completion ran once, nothing was sent.
        let late = try #require(keeper.answer.withLock { $0 })
        late(.success(()))
        #expect(calls.all == ["will a", "did a failed", "done"])
    }

    @Test("a middleware's 'not before' is waited on the pipeline's clock, and the rest goes on after it")
    func notBefore() async throws {
        let calls = Calls()
        let clock = ManualPushClock()
        let context = Self.context(clock, deadline: .seconds(5))
        let outcome = await Self.run(
            [Recording(name: "a", calls: calls, before: .wait(.milliseconds(750)), clock: clock), Recording(name: "b", calls: calls)],
            calls: calls, clock: clock, context: context)
        #expect(try outcome.get().isSuccess)
        #expect(clock.totalSlept == .milliseconds(750) && clock.sleepCount == 1)
        #expect(calls.all == ["will a", "will b", "wire", "did b ok", "did a ok", "done"])
    }

    @Test("a 'not before' past the deadline is not waited for: the send fails at once with DeadlineExceeded, seen by every middleware that ran")
    func waitPastTheDeadline() async throws {
        let calls = Calls()
        let clock = ManualPushClock()
        let context = Self.context(clock, deadline: .seconds(1))
        let outcome = await Self.run(
            [Recording(name: "a", calls: calls), Recording(name: "b", calls: calls, before: .wait(.seconds(2)), clock: clock)],
            calls: calls, clock: clock, context: context)
        guard case .failure(let error as PushError) = outcome else {
            Issue.record("expected DeadlineExceeded, got \(outcome)")
            return
        }
        #expect(error.code == .deadlineExceeded && !error.mayHaveReachedAPNs)
        #expect(clock.totalSlept == .zero && clock.sleepCount == 0)
        #expect(calls.all == ["will a", "will b", "did b failed", "did a failed", "done"])
    }

    @Test("a send whose deadline passed during a check is not made; every middleware sees DeadlineExceeded")
    func deadlinePassedDuringACheck() async throws {
        struct SlowCheck: PushMiddleware {
            let clock: ManualPushClock
            func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
                let clock = clock
                return .check { clock.advance(by: .seconds(60)) }
            }
        }
        let calls = Calls()
        let clock = ManualPushClock()
        // The deadline passes on the pipeline's clock during the check; on the real clock, which
        // the check's own deadline watch sleeps on, it is far off, however slowly the check runs.
        let context = Self.context(clock, deadline: .seconds(30))
        let outcome = await Self.run(
            [Recording(name: "a", calls: calls), SlowCheck(clock: clock), Recording(name: "c", calls: calls)],
            calls: calls, clock: clock, context: context)
        guard case .failure(let error as PushError) = outcome else {
            Issue.record("expected DeadlineExceeded, got \(outcome)")
            return
        }
        #expect(error.code == .deadlineExceeded && !error.mayHaveReachedAPNs)
        #expect(calls.all == ["will a", "will c", "did c failed", "did a failed", "done"])
    }
}

/// A callback transport that holds every send until it is closed (then each fails as cut off,
/// possibly processed), or answers 200 at once. Its `async` form does the same.
final class HoldingTransport: PushTransport {
    private struct State {
        var held: [@Sendable (consuming Result<APNsResponse, PushError>) -> Void] = []
        var started: [NotificationID?] = []
        var generations: [UInt64] = []
    }
    private let state = Mutex(State())
    let holds: Bool

    init(holds: Bool) { self.holds = holds }

    var started: [NotificationID?] { state.withLock { $0.started } }
    /// The credential generation each send was admitted under.
    var generations: [UInt64] { state.withLock { $0.generations } }
    var sendsByCallback: Bool { true }

    func startSend(
        _ notification: AdmittedNotification, deadline: PushInstant,
        completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void
    ) {
        let answerNow = state.withLock { state -> Bool in
            state.started.append(notification.id)
            state.generations.append(notification.credentialGeneration)
            if holds { state.held.append(completion) }
            return !holds
        }
        if answerNow { completion(.success(APNsResponse(status: 200, apnsID: notification.id))) }
    }

    func send(_ notification: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse {
        try await withCheckedThrowingContinuation { continuation in
            startSend(notification, deadline: deadline) { continuation.resume(with: $0) }
        }
    }

    func shutdown() async { await close() }

    func close() async {
        let held = state.withLock { state in
            defer { state.held.removeAll() }
            return state.held
        }
        for completion in held { completion(.failure(.transport("cut off by close", surelyNotProcessed: false))) }
    }
}

/// Hands out the given transports in turn, one per runtime made.
final class TransportSequence: TransportProvider {
    private let left: Mutex<[any PushTransport]>
    init(_ transports: [any PushTransport]) { left = Mutex(transports) }

    func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport {
        try left.withLock { left in
            guard !left.isEmpty else { throw PushError(code: .transport, message: "no transport left") }
            return left.removeFirst()
        }
    }
}

@Suite("the router's callback form")
struct RouterCallbackTests {
    @Test(
        "a send cut off by a credential revocation, for a caller that retries itself, comes back as CredentialRevoked and is not sent again by the router"
    )
    func revocationHandedToTheCaller() async throws {
        let old = HoldingTransport(holds: true)
        let new = HoldingTransport(holds: false)
        let router = try Fixtures.router(transports: TransportSequence([old, new]), clock: SystemPushClock())
        let tenant = Fixtures.tenant("rv", plugins: [Fixtures.plugin("metrics")])
        #expect(await router.install([tenant]).failures.isEmpty)
        let id = tenant.id
        #expect(router.runtime(for: id)?.startsSendsByCallback == true)

        let outcome = await withCheckedContinuation { (done: CheckedContinuation<Result<PushResult, any Error>, Never>) in
            router.startSend(tenant: id, notification: Fixtures.note(), retries: false) { done.resume(returning: $0) }
            Task {
                // Once the send is held on the old credential: swap the runtime and revoke the old one.
                while old.started.isEmpty { try? await Task.sleep(for: .milliseconds(5)) }
                do {
                    let replaced = router.exchange(try router.makeRuntime(for: tenant))
                    await replaced?.revoke()
                } catch {
                    Issue.record("cannot make the new runtime: \(error)")
                }
            }
        }
        #expect(throws: PushError.self) { try outcome.get() }
        guard case .failure(let error as PushError) = outcome else { return }
        #expect(error.code == .credentialRevoked && error.mayHaveReachedAPNs)
        #expect(old.started.count == 1 && new.started.isEmpty, "the caller's delivery policy decides, not the router")
        // What a batch item's policy makes of it: unknown (at-most-once reports it, at-least-once resends it).
        #expect(DeliveryOutcome(error) == .unknown(reason: "CredentialRevoked"))
        #expect(
            DeliveryOutcome(PushError.credentialRevoked(id, mayHaveReachedAPNs: false)) == .deferred(reason: "CredentialRevoked"))
    }

    @Test("a transport with only the async form still takes startSend: its answer and its PushError, by a task")
    func defaultCallbackForm() async throws {
        let transport = ScriptedTransport([.respond(status: 410, reason: .unregistered), .fail(.queueFull())])
        #expect(!transport.sendsByCallback)
        func start() async -> Result<APNsResponse, PushError> {
            await withCheckedContinuation { done in
                transport.startSend(Fixtures.admitted(), deadline: .now + .seconds(5)) {
                    done.resume(returning: $0)
                }
            }
        }
        let answer = try await start().get()
        #expect(answer.status == 410 && answer.reason == .unregistered)
        guard case .failure(let error) = await start() else {
            Issue.record("expected queueFull")
            return
        }
        #expect(error.code == .queueFull)
        #expect(transport.attempts.count == 2)
    }

    @Test("a send to a tenant that is not loaded fails with UnknownTenant")
    func unknownTenant() async throws {
        let router = try Fixtures.router(transports: TransportSequence([]), clock: SystemPushClock())
        let outcome = await withCheckedContinuation { (done: CheckedContinuation<Result<PushResult, any Error>, Never>) in
            router.startSend(tenant: Fixtures.tenantID("nobody"), notification: Fixtures.note()) { done.resume(returning: $0) }
        }
        guard case .failure(let error as PushError) = outcome else {
            Issue.record("expected UnknownTenant, got \(outcome)")
            return
        }
        #expect(error.code == .unknownTenant)
    }

    @Test("the runtime a send looked up last gives way to its replacement, and is gone once its tenant is removed")
    func lookupFollowsTheSwaps() async throws {
        let router = try Fixtures.router(transports: ScriptedTransports(), clock: SystemPushClock())
        let tenant = Fixtures.tenant("lk")
        let other = Fixtures.tenant("lk2")
        #expect(await router.install([tenant, other]).failures.isEmpty)
        let first = try #require(router.runtime(for: tenant.id))
        #expect(router.runtime(for: tenant.id) === first)
        #expect(router.runtime(for: other.id)?.id == other.id)
        #expect(router.runtime(for: tenant.id) === first)

        // Replaced while it was the last looked up: the next lookup finds the new one.
        let second = try router.makeRuntime(for: tenant)
        let replaced = router.exchange(second)
        #expect(replaced === first)
        await replaced?.shutdown()
        #expect(router.runtime(for: tenant.id) === second)

        // Removed while it was the last looked up: no lookup finds it, and a send fails.
        let removed = router.detach(tenant: tenant.id)
        #expect(removed === second)
        await removed?.shutdown()
        #expect(router.runtime(for: tenant.id) == nil)
        #expect(router.runtime(for: other.id)?.id == other.id)
        #expect(router.tenantIDs == [other.id])
        await #expect(throws: PushError.self) { try await router.send(tenant: tenant.id, notification: Fixtures.note()) }
    }
}
