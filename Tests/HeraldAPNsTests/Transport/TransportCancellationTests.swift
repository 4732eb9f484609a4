import APNsSandbox
import Foundation
import HeraldCore
import NIOCore
import Testing

@testable import HeraldAPNs

/// A cancelled send frees what it held (its stream, or its place in the queue) at once, and the
/// transport reports its real state.
@Suite("TenantTransport: cancellation and status")
struct TransportCancellationTests {
    private static func inFlight(_ transport: TenantTransport) -> Int { transport.poolStatus.reduce(0) { $0 + $1.inFlight } }
    private static func queued(_ transport: TenantTransport) -> Int { transport.poolStatus.reduce(0) { $0 + $1.queued } }

    /// One connection with one stream: whatever is in flight holds the only stream.
    private static func oneStream(_ harness: SandboxHarness) throws -> TenantTransport {
        var pool = PoolConfiguration()
        pool.connections = 1
        return try harness.transport(for: try harness.tokenTenant(.alpha, pool: pool)) { $0.streamCeiling = 1 }
    }

    @Test("a cancelled send in flight resets its stream (and says it may have reached APNs); the next send gets the stream at once")
    func cancelInFlight() async throws {
        try await withSandbox { harness in
            let transport = try Self.oneStream(harness)
            // Open the connection first, then hold every answer for a minute.
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            harness.sandbox.setFaults(SandboxFaults(addedLatency: 60))
            let held = Task { try await transport.send(Notes.note(topic: "com.example.alpha")) }
            // Written and at the sandbox (a stream taken is not yet a request written).
            await waitUntil { harness.sandbox.counters.heldForLatency == 1 }
            #expect(harness.sandbox.counters.heldForLatency == 1)
            #expect(Self.inFlight(transport) == 1)
            held.cancel()
            do {
                _ = try await held.value
                Issue.record("expected the cancelled send to fail")
            } catch let error as PushError {
                // Written before the cancel: APNs may have it, and says so.
                #expect(error.code == .transport)
                #expect(error.mayHaveReachedAPNs)
            }
            await waitUntil { Self.inFlight(transport) == 0 }
            #expect(Self.inFlight(transport) == 0)

            // Answers are quick again; with the stream still held, this one would wait a minute.
            harness.sandbox.setFaults(SandboxFaults())
            let next = try await transport.send(Notes.note(topic: "com.example.alpha"), deadline: .now() + .seconds(20))
            #expect(next.status == 200)
            #expect(transport.status.answered == 2)
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("a cancelled send waiting in the queue leaves it and never reaches APNs")
    func cancelQueued() async throws {
        try await withSandbox { harness in
            let transport = try Self.oneStream(harness)
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            // The first send holds the only stream for a minute, however slow the machine.
            harness.sandbox.setFaults(SandboxFaults(addedLatency: 60))
            let first = Task { try await transport.send(Notes.note(topic: "com.example.alpha"), deadline: .now() + .seconds(120)) }
            await waitUntil { harness.sandbox.counters.heldForLatency == 1 }
            let queuedNote = Notes.note(topic: "com.example.alpha", token: Notes.deviceToken(4242))
            let queued = Task { try await transport.send(queuedNote, deadline: .now() + .seconds(120)) }
            await waitUntil { Self.queued(transport) == 1 }
            #expect(Self.queued(transport) == 1)
            queued.cancel()
            await #expect(throws: CancellationError.self) { _ = try await queued.value }
            #expect(Self.queued(transport) == 0)
            // The stream is free again only when the first send ends: cancel it too (it was written).
            first.cancel()
            await #expect(throws: PushError.self) { _ = try await first.value }
            // The queued one never became a request: the sandbox saw exactly the two others.
            harness.sandbox.setFaults(SandboxFaults())
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha"), deadline: .now() + .seconds(20)).status == 200)
            #expect(harness.sandbox.counters.heldForLatency == 1)
            #expect(!harness.sandbox.requests.contains { $0.deviceToken == queuedNote.deviceToken?.hex })
            await transport.close()
            harness.expectCleanAudit()
        }
    }

    @Test("a send whose task is already cancelled sends nothing")
    func cancelledBeforeSending() async throws {
        try await withSandbox { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await transport.send(Notes.note(topic: "com.example.alpha"))
            }
            await #expect(throws: CancellationError.self) { _ = try await task.value }
            #expect(harness.sandbox.requests.isEmpty)
            await transport.close()
        }
    }

    @Test("status: idle until the first send, then its connections and counters; closed after close")
    func status() async throws {
        try await withSandbox { harness in
            let transport = try harness.transport(for: try harness.tokenTenant(.alpha))
            #expect(transport.status.state == .idle)
            #expect(transport.status.connections == 0)
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            var status = transport.status
            #expect(status.state == .active)
            #expect(status.readyConnections == 1)
            #expect(status.answered == 1)
            #expect(status.errors == 0)
            #expect(status.lastAnswerAt != nil)
            harness.sandbox.setFaults(SandboxFaults(fraction503: 1))
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 503)
            status = transport.status
            #expect(status.answered == 2)
            #expect(status.errors == 1)
            #expect(status.lastError?.contains("503") == true)
            await transport.close()
            #expect(transport.status.state == .closed)
        }
    }
}
