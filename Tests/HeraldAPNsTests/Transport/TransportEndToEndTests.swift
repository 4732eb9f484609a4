import APNsSandbox
import EventLoopExecutors
import Foundation
@_spi(Testing) import HeraldCore
import HeraldTestSupport
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import HeraldAPNs

@Suite("TenantTransport against APNsSandbox")
struct TransportEndToEndTests {
    @Test("token tenant: a notification goes out and comes back 200 with its apns-id")
    func tokenTenant() async throws {
        try await withSandbox { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            var note = Notes.note(topic: "com.example.alpha", priority: .immediate, collapseID: "news")
            note.expiration = .at(2_000_000_000)
            let response = try await transport.send(note)
            #expect(response.status == 200)
            #expect(response.reason == nil)
            let record = harness.sandbox.requests
            #expect(record.count == 1)
            #expect(record.first?.apnsID == note.id?.rawValue)
            #expect(response.apnsID == note.id)
            #expect(record.first?.apnsIDFromRequest == true)
            #expect(record.first?.authKind == .token)
            #expect(record.first?.teamID == "TEAMALPHA1")
            #expect(record.first?.deviceToken == note.deviceToken?.hex)
            #expect(record.first?.collapseID == "news")
            #expect(record.first?.expiration == "2000000000")
            // The caller's own apns-id is kept.
            var named = Notes.note(topic: "com.example.alpha")
            named.id = try NotificationID("8e4bd6a2-1b9f-4c3e-9d55-0a1b2c3d4e5f")
            #expect(try await transport.send(named).apnsID == named.id)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("certificate tenant: mutual TLS, topic from the certificate, 200")
    func certificateTenant() async throws {
        try await withSandbox(keys: []) { harness in
            let tenant = try harness.certificateTenant(id: "gamma", teamID: "TEAMGAMMA1", topics: ["com.example.gamma", "com.example.gamma.voip"])
            let transport = try harness.transport(for: tenant)
            let alert = try await transport.send(Notes.note(topic: "com.example.gamma"))
            #expect(alert.status == 200)
            let voip = try await transport.send(Notes.note(topic: "com.example.gamma.voip", pushType: .voip))
            #expect(voip.status == 200)
            // Several topics in the certificate: a topic is required.
            let missing = try await transport.send(Notes.note(topic: nil))
            #expect(missing.status == 400)
            #expect(missing.reason == .missingTopic)
            let record = harness.sandbox.requests
            #expect(record.count == 3)
            #expect(record.allSatisfy { $0.authKind == .certificate })
            #expect(record.first?.topic == "com.example.gamma")
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("every APNs answer reaches the caller with its status and reason (and 410 with its timestamp)")
    func reasonsSurfaced() async throws {
        let unregistered = Notes.deviceToken(1)
        let bound = Notes.deviceToken(2)
        let busy = Notes.deviceToken(3)
        let since = Date(timeIntervalSince1970: 1_700_000_123.456)
        try await withSandbox(configure: { configuration in
            configuration.devices = [
                .unregistered(unregistered.hex, since: since),
                .bound(bound.hex, topic: "com.example.alpha.voip"),
            ]
            configuration.deviceRequestsPerSecond = 2
        }) { harness in
            // The tenant file may list topics the APNs key does not allow, or that are malformed:
            // the transport sends them, APNs (the sandbox) answers.
            let tenant = try harness.tokenTenant(.alpha, topics: ["com.example.alpha", "com.example.alpha.voip", "com.example.notforkey", "bad topic"])
            let transport = try harness.transport(for: tenant)
            let topic = "com.example.alpha"
            let cases: [(String, HeraldCore.Notification, APNsReason)] = [
                ("collapse id too long", Notes.note(topic: topic, collapseID: String(repeating: "c", count: 65)), .badCollapseId),
                ("priority 10 for content-available only", Notes.note(topic: topic, priority: .immediate, payload: Array(#"{"aps":{"content-available":1}}"#.utf8)), .badPriority),
                ("malformed topic", Notes.note(topic: "bad topic"), .badTopic),
                ("push type against topic", Notes.note(topic: topic, pushType: .voip), .deviceTokenNotForTopic),
                ("device bound to another topic", Notes.note(topic: topic, token: bound), .deviceTokenNotForTopic),
                ("no topic with a token", Notes.note(topic: nil), .missingTopic),
                ("empty payload", Notes.note(topic: topic, payload: []), .payloadEmpty),
                ("payload too large", Notes.note(topic: topic, payload: Array(repeating: UInt8(ascii: " "), count: 4097)), .payloadTooLarge),
                ("topic not allowed for the key", Notes.note(topic: "com.example.notforkey"), .topicDisallowed),
                ("unregistered device", Notes.note(topic: topic, token: unregistered), .unregistered),
            ]
            for (label, note, reason) in cases {
                let response = try await transport.send(note)
                #expect(response.status == reason.status, "\(label)")
                #expect(response.reason == reason, "\(label)")
                #expect(response.apnsID != nil, "\(label)")
                if reason == .unregistered {
                    let millis = response.timestamp.map { ($0.timeIntervalSince1970 * 1000).rounded() }
                    #expect(millis == (since.timeIntervalSince1970 * 1000).rounded())
                }
            }

            // More than 2 a second to one device: sent together, some are refused.
            let burst = await sendLoad((0..<8).map { _ in Notes.note(topic: topic, token: busy) }, through: transport, concurrency: 8)
            let tooMany = burst.compactMap { outcome -> APNsResponse? in
                if case .response(let response) = outcome, response.status == 429 { return response }
                return nil
            }
            #expect(!tooMany.isEmpty)
            #expect(tooMany.allSatisfy { $0.reason == .tooManyRequests })

            harness.sandbox.setFaults(SandboxFaults(fraction500: 1))
            let internalError = try await transport.send(Notes.note(topic: topic))
            #expect(internalError.status == 500)
            #expect(internalError.reason == .internalServerError)
            harness.sandbox.setFaults(SandboxFaults(fraction503: 1))
            let unavailable = try await transport.send(Notes.note(topic: topic))
            #expect(unavailable.status == 503)
            #expect(unavailable.reason == .serviceUnavailable)
            #expect(unavailable.retryAfter == nil)
            // A retry-after (which Apple documents none of) comes with the answer.
            harness.sandbox.setFaults(SandboxFaults(fraction503: 1, retryAfter: 7))
            #expect(try await transport.send(Notes.note(topic: topic)).retryAfter == .seconds(7))
            harness.sandbox.setFaults(.none)
            await transport.close()

            // A key APNs does not know.
            var stranger = TestTokenKey.alpha
            stranger.keyID = "KEYUNKNOWN"
            stranger.key = .init()
            let strangerTransport = try harness.transport(for: try harness.tokenTenant(stranger))
            let invalid = try await strangerTransport.send(Notes.note(topic: topic))
            #expect(invalid.status == 403)
            #expect(invalid.reason == .invalidProviderToken)
            await strangerTransport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("403 ExpiredProviderToken is handed on as APNs' answer once the credential is told: the same notification sent again goes with a fresh token")
    func expiredProviderTokenIsRefreshed() async throws {
        let clock = ManualWallClock(Date())
        try await withSandbox(clock: clock, configure: { configuration in
            configuration.tokenLifetime = 60
            configuration.tokenUpdateMinimumInterval = 0
        }) { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            clock.advance(by: 120)  // the token is now stale for the sandbox, not yet for the provider's schedule
            let note = transport.unchecked(Notes.note(topic: "com.example.alpha"))
            let expired = try await transport.send(note)
            #expect(expired.status == 403 && expired.reason == .expiredProviderToken)
            // What the router does with that answer: the same admitted notification, once more.
            let response = try await transport.send(note)
            #expect(response.status == 200)
            let attempts = harness.sandbox.requests.filter { $0.apnsID == note.id.rawValue }
            #expect(attempts.map(\.status) == [403, 200])
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("The answer's apns-id: the one sent, in either case; another one as APNs gave it; one that is not a UUID is none on a 200 and the one sent on a failure")
    func answeredAPNsID() async throws {
        try await withSandbox { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            func send(_ faults: SandboxFaults) async throws -> (sent: NotificationID, answer: APNsResponse) {
                harness.sandbox.setFaults(faults)
                let note = transport.unchecked(Notes.note(topic: "com.example.alpha"))
                return (note.id, try await transport.send(note))
            }
            let echoed = try await send(.none)
            #expect(echoed.answer.status == 200 && echoed.answer.apnsID == echoed.sent)
            let upper = try await send(SandboxFaults(answeredID: .uppercase))
            #expect(upper.answer.status == 200 && upper.answer.apnsID == upper.sent)
            #expect(upper.answer.apnsID?.rawValue == upper.sent.rawValue)
            let other = try await send(SandboxFaults(answeredID: .other))
            #expect(other.answer.status == 200)
            let otherID = try #require(other.answer.apnsID)
            #expect(otherID != other.sent)
            // The id reported is the one the sandbox answered with.
            #expect(harness.sandbox.requests.filter { $0.apnsID == otherID.rawValue }.count == 1)
            let malformed = try await send(SandboxFaults(answeredID: .malformed))
            #expect(malformed.answer.status == 200 && malformed.answer.apnsID == nil)
            let failed = try await send(SandboxFaults(fraction500: 1, answeredID: .malformed))
            #expect(failed.answer.status == 500 && failed.answer.reason == .internalServerError)
            #expect(failed.answer.apnsID == failed.sent)
            let failedOther = try await send(SandboxFaults(fraction500: 1, answeredID: .other))
            #expect(failedOther.answer.status == 500)
            #expect(failedOther.answer.apnsID != nil && failedOther.answer.apnsID != failedOther.sent)
            harness.sandbox.setFaults(.none)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("no answer before the deadline: timedOut, marked as possibly processed")
    func requestTimeout() async throws {
        try await withSandbox { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            // Open the connection first, so the timed request is surely written before its
            // deadline; then the sandbox stalls its answers. The deadline is generous: while the
            // whole suite runs, the connection's event loop can wait seconds for a core before
            // it writes the request, and one not written by its deadline is not processed.
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            harness.sandbox.setFaults(SandboxFaults(addedLatency: 30))
            do {
                _ = try await transport.send(Notes.note(topic: "com.example.alpha"), deadline: .now() + .seconds(5))
                Issue.record("expected a timeout")
            } catch let error as PushError {
                #expect(error.code == .deadlineExceeded)
                #expect(error.mayHaveReachedAPNs)
            }
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("sends handed over from outside the event loop in a row go out in that order, each answered once")
    func handOverOrder() async throws {
        try await withSandbox { harness in
            var pool = PoolConfiguration()
            pool.connections = 1
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha, pool: pool))
            // The connection is open and its stream limit raised before the run.
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            let notes = (0..<300).map { Notes.note(topic: "com.example.alpha", token: Notes.deviceToken(10_000 + $0)) }
            let answers = Mutex([Int: Int]())
            // From this task (not the connection's event loop), one after another without waiting:
            // they reach the connection through its hand-off queue.
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                let left = Mutex(notes.count)
                for (position, note) in notes.enumerated() {
                    transport.send(note) { result in
                        answers.withLock { $0[position, default: 0] += 1 }
                        if case .success(let response) = result, response.status == 200 {} else {
                            Issue.record("send \(position): \(result)")
                        }
                        if left.withLock({ $0 -= 1; return $0 }) == 0 { done.resume() }
                    }
                }
            }
            #expect(answers.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<notes.count).map { ($0, 1) }))
            let received = harness.sandbox.requests.dropFirst().map(\.deviceToken)
            #expect(received == notes.map { $0.deviceToken?.hex })
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("a full queue fails at once with queueFull (not processed); the rest still go out")
    func backpressure() async throws {
        // Two streams answered every half second and five places in the queue: of 40 sends,
        // however late the machine starts them, most find the queue full.
        try await withSandbox(configure: {
            $0.faults = SandboxFaults(addedLatency: 0.5)
            $0.maxConcurrentStreams = 2
        }) { harness in
            var pool = PoolConfiguration()
            pool.connections = 1
            pool.maxQueued = 5
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha, pool: pool))
            let notes = makeNotes(40, topic: "com.example.alpha")
            let outcomes = await sendLoad(notes, through: transport, concurrency: 40)
            var full = 0
            var ok = 0
            for outcome in outcomes {
                switch outcome {
                case .response(let response) where response.status == 200: ok += 1
                case .failure(let error) where error.isQueueFull && !error.mayHaveBeenProcessed: full += 1
                default: Issue.record("unexpected outcome \(outcome)")
                }
            }
            #expect(full > 0)
            #expect(ok > 0)
            #expect(harness.sandbox.requests.filter(\.processed).count == ok)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("drain finishes queued and in-flight notifications, then refuses new ones")
    func drain() async throws {
        try await withSandbox(configure: { $0.faults = SandboxFaults(addedLatency: 0.2) }) { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            let notes = makeNotes(60, topic: "com.example.alpha")
            async let outcomes = sendLoad(notes, through: transport, concurrency: 60)
            // Wait until every notification is queued or in flight, then drain.
            await waitUntil { transport.poolStatus.reduce(0, { $0 + $1.inFlight + $1.queued }) >= 60 }
            await transport.drain()
            let results = await outcomes
            #expect(results.allSatisfy { $0.status == 200 })
            await #expect(throws: PushError.self) {
                _ = try await transport.send(Notes.note(topic: "com.example.alpha"))
            }
            // The drain closed the connection on Herald's side; the sandbox counts it closed once
            // its own loop has read the end (bounded: a connection left open fails the check).
            await waitUntil { harness.sandbox.activeConnections == 0 }
            #expect(harness.sandbox.activeConnections == 0)
            harness.expectCleanAudit()
        }
    }

    @Test("close fails what is in flight at once")
    func close() async throws {
        // Answers held for 60 s: the close comes long before any answer, even on a loaded machine.
        try await withSandbox(configure: { $0.faults = SandboxFaults(addedLatency: 60) }) { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            let notes = makeNotes(10, topic: "com.example.alpha")
            async let outcomes = sendLoad(notes, through: transport, concurrency: 10)
            await waitUntil { transport.poolStatus.reduce(0, { $0 + $1.inFlight + $1.queued }) >= 10 }
            await transport.close()
            for outcome in await outcomes {
                guard case .failure(let error) = outcome else {
                    Issue.record("expected a failure, got \(outcome)")
                    continue
                }
                #expect(error.isConnectionClosed || error.isPoolClosed)
            }
            harness.expectCleanAudit()
        }
    }

    @Test("an endpoint that refuses connections: connectionFailed, not processed")
    func connectionRefused() async throws {
        let harness = try await SandboxHarness.start(keys: [.alpha])
        // A port held closed for the test (a freed port could go to another test's server).
        let closed = try LocalProxy.ClosedPort()
        var tenant = try harness.tokenTenant(.alpha)
        let refusing = APNsEndpoint(host: "127.0.0.1", port: closed.port)
        tenant.endpoints.production = refusing
        tenant.endpoints.development = refusing
        await harness.shutdown()
        let transport = try harness.transport(for: tenant)
        do {
            _ = try await transport.send(Notes.note(topic: "com.example.alpha"))
            Issue.record("expected connectionFailed")
        } catch let error as PushError {
            #expect(error.code == .transport)
            #expect(error.message.contains("connectionFailed"))
            #expect(!error.mayHaveReachedAPNs)
        }
        await transport.close()
        withExtendedLifetime(closed) {}
    }

    @Test("a topic that is not the tenant's is not admitted: nothing reaches the transport")
    func foreignTopicRefusedLocally() async throws {
        try await withSandbox { harness in
            let tenant = try harness.tokenTenant(.alpha)
            let error = #expect(throws: PushError.self) {
                try tenant.admit(Notes.note(topic: "com.example.beta"), id: Notes.nextID(), environment: nil)
            }
            #expect(error?.code == .topicDisallowed && error?.mayHaveReachedAPNs == false)
            let admitted = try tenant.admit(Notes.note(topic: "com.example.alpha"), id: Notes.nextID(), environment: nil)
            #expect(admitted.topic == "com.example.alpha" && admitted.environment == .development)
            #expect(harness.sandbox.requests.isEmpty)
        }
    }

    @Test("PushTransport's callback form: the answer, and a refusal of its own as the same PushError the async form throws")
    func callbackForm() async throws {
        try await withSandbox { harness in
            let transport: any PushTransport = try harness.transport(for: try harness.tokenTenant(.alpha))
            #expect(transport.sendsByCallback)
            let deadline = PushInstant.now.advanced(by: .seconds(30))
            func start(_ note: HeraldCore.Notification) async -> Result<APNsResponse, PushError> {
                let admitted = AdmittedNotification(unchecked: note, id: note.id ?? Notes.nextID(), environment: .development)
                return await withCheckedContinuation { continuation in
                    transport.startSend(admitted, deadline: deadline) { continuation.resume(returning: $0) }
                }
            }
            let note = Notes.note(topic: "com.example.alpha")
            let answer = try await start(note).get()
            #expect(answer.status == 200)
            #expect(harness.sandbox.requests.map(\.deviceToken) == [note.deviceToken?.hex])

            await transport.close()
            let refused = await start(Notes.note(topic: "com.example.alpha"))
            guard case .failure(let error) = refused else {
                Issue.record("expected ShuttingDown, got \(refused)")
                return
            }
            #expect(error.code == .shuttingDown && !error.mayHaveReachedAPNs)
            let thrown = await #expect(throws: PushError.self) {
                try await transport.send(
                    AdmittedNotification(unchecked: Notes.note(topic: "com.example.alpha"), id: Notes.nextID(), environment: .development),
                    deadline: deadline)
            }
            #expect(thrown?.code == error.code && thrown?.message == error.message)
            #expect(harness.sandbox.requests.count == 1)
            harness.expectCleanAudit()
        }
    }

    @Test("each transport's connection opens on its home loop, where its sending executor runs tasks")
    func homeLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        try await withSandbox { harness in
            // One connection a pool: with two, a second may open (on another loop) and answer
            // first when the first is slow to connect.
            var pool = PoolConfiguration()
            pool.connections = 1
            let tenant = try harness.tokenTenant(.alpha, pool: pool)
            // One credential for the three: a token signed by each would be a token update
            // the sandbox answers with 429 TooManyProviderTokenUpdates.
            let credentials = try CredentialProviders.make(for: tenant, clock: harness.clock)
            let deadline = PushInstant.now.advanced(by: .seconds(30))
            // Three transports on three loops: each chooses its own home loop, and the pool's
            // first connection (the group's next loop, before) answers there.
            var homes: [ObjectIdentifier] = []
            for _ in 0..<3 {
                let transport = TenantTransport(
                    tenant: tenant, credentials: credentials,
                    configuration: TransportConfiguration(pool: tenant.pool), eventLoopGroup: group, logger: SandboxHarness.quietLogger)
                let executor = try #require(transport.sendingExecutor as? EventLoopTaskExecutor)
                homes.append(ObjectIdentifier(executor.eventLoop))
                // With one connection, the home loop is the one place to send from.
                let offered = transport.sendingExecutors.compactMap { ($0 as? EventLoopTaskExecutor)?.eventLoop }
                #expect(offered.count == 1 && offered.first === executor.eventLoop)
                let (answer, onHome) = await withCheckedContinuation { continuation in
                    transport.startSend(transport.unchecked(Notes.note(topic: "com.example.alpha")), deadline: deadline) { answer in
                        continuation.resume(returning: (answer, executor.eventLoop.inEventLoop))
                    }
                }
                #expect((try? answer.get().status) == 200, "\(answer)")
                #expect(onHome)
                // A task preferring the executor runs on that loop.
                let ranThere = await Task(executorPreference: executor) { executor.eventLoop.inEventLoop }.value
                #expect(ranThere)
                await transport.close()
            }
            #expect(Set(homes).count == 3)
            harness.expectCleanAudit()
        }
        try await group.shutdownGracefully()
    }

    @Test("the executors offered to senders are the loops an endpoint's connections open on: home first, one a connection, distinct")
    func sendingExecutors() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        try await withSandbox { harness in
            for connections in [1, 2, 3, 5] {
                var pool = PoolConfiguration()
                pool.connections = connections
                let tenant = try harness.tokenTenant(.alpha, pool: pool)
                let transport = TenantTransport(
                    tenant: tenant, credentials: try CredentialProviders.make(for: tenant, clock: harness.clock),
                    eventLoopGroup: group, logger: SandboxHarness.quietLogger)
                let home = try #require((transport.sendingExecutor as? EventLoopTaskExecutor)?.eventLoop)
                let loops = transport.sendingExecutors.compactMap { ($0 as? EventLoopTaskExecutor)?.eventLoop }
                #expect(loops.count == min(connections, 3), "\(connections) connections")
                #expect(loops.first === home)
                #expect(Set(loops.map { ObjectIdentifier($0) }).count == loops.count)
                await transport.close()
            }
        }
        try await group.shutdownGracefully()
    }

    /// Error answers carry a JSON body; 2,500 of them are about 70 KB of DATA on one
    /// connection, more than the 65,535-byte connection window the client starts with. The
    /// client must keep the window open (WINDOW_UPDATE on stream 0) or the server stops
    /// sending answers and every later notification waits for its deadline.
    @Test("answer bodies beyond 64 KiB on one connection keep flowing (connection WINDOW_UPDATE)")
    func connectionWindowIsReplenished() async throws {
        try await withSandbox { harness in
            var pool = PoolConfiguration()
            pool.connections = 1
            pool.requestTimeout = 20
            // The key may not push to this topic: every answer is 400 with a {"reason":…} body.
            let tenant = try harness.tokenTenant(.alpha, topics: ["com.example.alpha", "com.example.notforkey"], pool: pool)
            let transport = try harness.transport(for: tenant)
            let total = 2_500
            let reasons = try await withThrowingTaskGroup(of: APNsReason?.self) { group in
                var next = 0
                var reasons: [APNsReason?] = []
                while next < min(64, total) {
                    group.addTask { try await transport.send(Notes.note(topic: "com.example.notforkey")).reason }
                    next += 1
                }
                while let reason = try await group.next() {
                    reasons.append(reason)
                    if next < total {
                        group.addTask { try await transport.send(Notes.note(topic: "com.example.notforkey")).reason }
                        next += 1
                    }
                }
                return reasons
            }
            #expect(reasons.count == total)
            #expect(reasons.allSatisfy { $0 == .topicDisallowed })
            // Every request went over one connection: its window never stalled into a timeout and
            // a reconnect. (A connect that timed out before it carried a request, on a machine
            // loaded by the rest of the suite, is another connection the sandbox counts, and
            // proves nothing either way.)
            let connections = Set(harness.sandbox.requests.map(\.connectionID))
            #expect(harness.sandbox.requests.count == total && connections.count == 1, "requests on connections \(connections)")
            await transport.close()
        }
    }
}
