import APNsSandbox
import Foundation
import HeraldCore
import NIOCore
import Synchronization
import Testing

@testable import HeraldAPNs

/// Compares what was sent with the sandbox's record: every notification has exactly one
/// outcome; nothing is processed twice; an answered notification was processed exactly once;
/// one that failed without an answer was not processed by an answer the caller never saw.
func expectRecordMatches(
    notes: [HeraldCore.Notification], outcomes: [Outcome], record: [SandboxRecordedRequest],
    sourceLocation: Testing.SourceLocation = #_sourceLocation
) -> (answered: Int, unanswered: Int) {
    var processed: [String: Int] = [:]
    for entry in record where entry.processed { processed[entry.apnsID, default: 0] += 1 }
    let twice = processed.filter { $0.value > 1 }
    #expect(twice.isEmpty, "processed more than once: \(twice.count)", sourceLocation: sourceLocation)
    var answered = 0
    var unanswered = 0
    for (note, outcome) in zip(notes, outcomes) {
        let id = note.id!.rawValue
        switch outcome {
        case .response(let response):
            answered += 1
            #expect(response.apnsID?.rawValue == id, sourceLocation: sourceLocation)
            #expect(processed[id] == 1, "answered \(id) but processed \(processed[id] ?? 0) times", sourceLocation: sourceLocation)
        case .failure(let error):
            unanswered += 1
            if !error.mayHaveBeenProcessed {
                #expect(processed[id] == nil, "\(id) failed as not processed, yet was", sourceLocation: sourceLocation)
            }
        case .other(let text):
            Issue.record("unexpected outcome \(text)", sourceLocation: sourceLocation)
        }
    }
    let sentIDs = Set(notes.map { $0.id!.rawValue })
    #expect(processed.keys.allSatisfy { sentIDs.contains($0) }, sourceLocation: sourceLocation)
    return (answered, unanswered)
}

@Suite("TenantTransport under APNs' connection management")
struct TransportResilienceTests {
    /// Alpha's transport with `pool`, waiting long for answers and handshakes: a slow CI machine
    /// can take 10 s for a test's load, and a handshake past the 10 s connect timeout would make
    /// the pool open one connection more than the test expects.
    func patientTransport(_ harness: SandboxHarness, pool: PoolConfiguration) throws -> TenantTransport {
        try harness.transport(for: try harness.tokenTenant(.alpha, pool: pool)) {
            $0.requestTimeout = .seconds(600)
            $0.connectTimeout = .seconds(300)
        }
    }

    /// How many connections carried the requests the sandbox recorded: the ones the transport
    /// sent on. The sandbox's `connectionCount` takes in every h2 connection made to its port,
    /// whoever made it; these checks are about where the pool sends, so they count the record,
    /// and the pool's own count of its connections.
    func connectionsSentOn(_ harness: SandboxHarness) -> Int {
        Set(harness.sandbox.requests.map(\.connectionID)).count
    }

    /// ``patientTransport(_:pool:)`` with a pool of two connections, the second opened once the
    /// first carries `openNextAt` requests.
    func twoConnectionTransport(_ harness: SandboxHarness, openNextAt: Int) throws -> TenantTransport {
        var pool = PoolConfiguration()
        pool.connections = 2
        pool.openNextAt = openNextAt
        return try patientTransport(harness, pool: pool)
    }

    @Test("a token connection carries one stream until the first token is accepted, then many")
    func streamLimitOneThenConcurrency() async throws {
        try await withSandbox(configure: { $0.maxConcurrentStreams = 50 }) { harness in
            var pool = PoolConfiguration()
            pool.connections = 1
            let transport = try patientTransport(harness, pool: pool)
            let notes = makeNotes(300, topic: "com.example.alpha")
            let outcomes = await sendLoad(notes, through: transport, concurrency: 80)
            #expect(outcomes.allSatisfy { $0.status == 200 })
            let result = expectRecordMatches(notes: notes, outcomes: outcomes, record: harness.sandbox.requests)
            #expect(result.answered == 300)
            #expect(transport.poolStatus.first?.maxStreams == 50)
            #expect(transport.poolStatus.first?.connections == 1)
            #expect(connectionsSentOn(harness) == 1)
            // The first stream was alone on the connection: the next ones arrived only after it was answered.
            let record = harness.sandbox.requests.sorted { $0.sequence < $1.sequence }
            #expect(record.first?.streamID == 1)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("light traffic keeps one connection; sustained sends open the pool's second and spread over both")
    func sustainedSendsSpread() async throws {
        try await withSandbox { harness in
            let transport = try twoConnectionTransport(harness, openNextAt: 4)
            // One at a time: the first connection never carries 4.
            let light = makeNotes(20, topic: "com.example.alpha")
            let lightOutcomes = await sendLoad(light, through: transport, concurrency: 1)
            #expect(lightOutcomes.allSatisfy { $0.status == 200 })
            #expect(connectionsSentOn(harness) == 1)
            let first = try #require(harness.sandbox.requests.first?.connectionID)

            // 32 at a time, in rounds, until the second connection (opened once the first carried
            // 4, one stream until its first token was accepted) has carried 100: a bound on the
            // rounds, not a timing, since how soon its handshake ends varies with the machine.
            var sent = light.count
            var rounds = 0
            var secondCarried = 0
            var lastRound: [SandboxRecordedRequest] = []
            while secondCarried < 100, rounds < 40 {
                rounds += 1
                let before = harness.sandbox.requests.count
                let notes = makeNotes(500, topic: "com.example.alpha")
                let outcomes = await sendLoad(notes, through: transport, concurrency: 32)
                #expect(outcomes.allSatisfy { $0.status == 200 })
                sent += notes.count
                let record = harness.sandbox.requests
                lastRound = Array(record[before...])
                secondCarried = record.filter { $0.connectionID != first }.count
            }
            #expect(connectionsSentOn(harness) == 2, "the pool's limit is two connections")
            #expect(transport.poolStatus.first?.connections == 2)
            #expect(secondCarried >= 100, "the second connection carried \(secondCarried) of \(sent)")
            // Once both are ready a request goes to the one carrying fewer: the last round is
            // shared, not left to the first connection's 1,000 streams. Not evenly: while the
            // whole suite runs, one connection's event loop can wait for a core, keep its streams
            // longer and so be given fewer.
            let onFirst = lastRound.filter { $0.connectionID == first }.count
            #expect(onFirst >= lastRound.count / 10 && onFirst <= lastRound.count * 9 / 10, "\(onFirst) of \(lastRound.count) on the first connection")
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("an answer's caller finds its stream free: a send made from the completion goes on the same connection")
    func nextSendFromTheCompletionFindsTheStreamFree() async throws {
        try await withSandbox { harness in
            let transport = try twoConnectionTransport(harness, openNextAt: 2)
            let notes = makeNotes(20, topic: "com.example.alpha")
            // Each completion records what the pool holds in flight, then sends the next note: the
            // answered stream is already free, so the next send is the connection's only one and
            // does not open the second (which two in flight would).
            let inFlightAtCompletions: [Int] = await withCheckedContinuation { continuation in
                let seen = Mutex<[Int]>([])
                @Sendable func send(_ index: Int) {
                    transport.send(notes[index]) { _ in
                        let inFlight = transport.poolStatus.reduce(0) { $0 + $1.inFlight }
                        seen.withLock { $0.append(inFlight) }
                        if index + 1 < notes.count {
                            send(index + 1)
                        } else {
                            continuation.resume(returning: seen.withLock { $0 })
                        }
                    }
                }
                send(0)
            }
            #expect(inFlightAtCompletions == Array(repeating: 0, count: notes.count))
            #expect(harness.sandbox.requests.count == notes.count)
            #expect(connectionsSentOn(harness) == 1)
            #expect(transport.poolStatus.first?.connections == 1)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("pool.max_streams: a connection carries at most that many; the rest wait in the pool and none is lost")
    func streamCapHoldsTheRest() async throws {
        // Answers held (a certificate tenant: a token connection allows one stream until its
        // first token is accepted, which a stalled endpoint never does).
        try await withSandbox(keys: [], configure: { $0.faults = SandboxFaults(addedLatency: 600) }) { harness in
            var tenant = try harness.certificateTenant(id: "gamma", teamID: "TEAMGAMMA1", topics: ["com.example.gamma"])
            tenant.pool.connections = 1
            tenant.pool.maxStreams = 3
            let transport = try harness.transport(for: tenant) { $0.requestTimeout = .seconds(900) }
            let load = Task { await sendLoad(makeNotes(10, topic: "com.example.gamma"), through: transport, concurrency: 10) }
            await waitUntil {
                harness.sandbox.counters.heldForLatency >= 3 && transport.poolStatus.reduce(0) { $0 + $1.queued } == 7
            }
            #expect(harness.sandbox.counters.heldForLatency == 3, "the sandbox got more than the cap")
            let status = transport.poolStatus
            #expect(status.map(\.maxStreams) == [3])
            #expect(status.map(\.inFlight) == [3])
            #expect(status.map(\.queued) == [7])
            await transport.close()
            #expect(await load.value.count == 10)
            harness.expectCleanAudit()
        }
        // Answered: the queued ones take the streams that end, every one is delivered once.
        try await withSandbox(keys: [.alpha]) { harness in
            var pool = PoolConfiguration()
            pool.connections = 1
            pool.maxStreams = 4
            let transport = try patientTransport(harness, pool: pool)
            let notes = makeNotes(600, topic: "com.example.alpha")
            let outcomes = await sendLoad(notes, through: transport, concurrency: 40)
            #expect(outcomes.allSatisfy { $0.status == 200 })
            let result = expectRecordMatches(notes: notes, outcomes: outcomes, record: harness.sandbox.requests)
            #expect(result.answered == 600)
            #expect(transport.poolStatus.map(\.maxStreams) == [4])
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("the stream limit drops in the middle of a load; nothing exceeds it, everything completes")
    func limitDropMidLoad() async throws {
        try await withSandbox(configure: { $0.maxConcurrentStreams = 30 }) { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha)) { $0.requestTimeout = .seconds(600) }
            let notes = makeNotes(2000, topic: "com.example.alpha")
            let sandbox = harness.sandbox
            let outcomes = await sendLoad(notes, through: transport, concurrency: 80) { completed in
                if completed == 500 { sandbox.setMaxConcurrentStreams(3) }
                if completed == 1500 { sandbox.setMaxConcurrentStreams(20) }
            }
            #expect(outcomes.allSatisfy { $0.status == 200 })
            let result = expectRecordMatches(notes: notes, outcomes: outcomes, record: harness.sandbox.requests)
            #expect(result.answered == 2000)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("GOAWAY in the middle of 5,000 notifications: none lost, none delivered twice")
    func goAwayMidLoad() async throws {
        try await withSandbox(configure: { configuration in
            configuration.maxConcurrentStreams = 24
            configuration.faults = SandboxFaults(goawayAfter: 1500)
        }) { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha)) { configuration in
                configuration.backoff = Backoff(base: .milliseconds(10))
                configuration.requestTimeout = .seconds(600)  // slow CI machines: only real failures count
            }
            let notes = makeNotes(5_000, topic: "com.example.alpha")
            let sandbox = harness.sandbox
            let outcomes = await sendLoad(notes, through: transport, concurrency: 64) { completed in
                if completed == 2500 { sandbox.sendGoAwayToAll(reason: .shutdown) }
            }
            let record = harness.sandbox.requests
            let result = expectRecordMatches(notes: notes, outcomes: outcomes, record: record)
            // Every GOAWAY'd stream above last-stream-id was resent on another connection.
            #expect(result.answered == 5_000, "unanswered: \(outcomes.filter { $0.status == nil }.prefix(5))")
            #expect(outcomes.allSatisfy { $0.status == 200 })
            #expect(harness.sandbox.counters.goawaysSent > 1)
            #expect(harness.sandbox.connectionCount > 2)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("an abrupt connection drop: unanswered streams fail as possibly processed, none resent, none twice")
    func abruptDrop() async throws {
        try await withSandbox(configure: { configuration in
            configuration.maxConcurrentStreams = 24
            configuration.faults = SandboxFaults(dropAfter: 700)
        }) { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha)) { configuration in
                configuration.backoff = Backoff(base: .milliseconds(10))
                configuration.requestTimeout = .seconds(600)
            }
            let notes = makeNotes(3000, topic: "com.example.alpha")
            let outcomes = await sendLoad(notes, through: transport, concurrency: 64)
            let record = harness.sandbox.requests
            let result = expectRecordMatches(notes: notes, outcomes: outcomes, record: record)
            #expect(result.answered + result.unanswered == 3000)
            #expect(result.answered >= 2000)
            for outcome in outcomes {
                if case .failure(let error) = outcome {
                    // Written, then the connection vanished: the caller decides, the transport does not resend.
                    #expect(error.isConnectionClosed && error.mayHaveBeenProcessed)
                }
            }
            // A notification that failed was sent exactly once (no transparent resend of possibly processed streams).
            var attempts: [String: Int] = [:]
            for entry in record { attempts[entry.apnsID, default: 0] += 1 }
            for (note, outcome) in zip(notes, outcomes) {
                if case .failure = outcome { #expect((attempts[note.id!.rawValue] ?? 0) <= 1) }
            }
            await transport.close()
            harness.expectCleanAudit()
        }
    }
}
