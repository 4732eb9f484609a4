import APNsSandbox
import Foundation
import HeraldCore
import NIOHPACK
import Testing

/// Bad input gets an APNs-style error or a connection error, and the sandbox keeps serving.
@Suite("APNsSandbox bad input")
struct SandboxBadInputTests {
    /// After each abuse a fresh connection still gets a 200.
    func stillServes(_ harness: SandboxHarness) async throws {
        let client = try await harness.connect()
        #expect(try await client.roundTrip(try await harness.validRequest()).status == 200)
        await client.close()
    }

    @Test func garbageInsteadOfThePrefaceClosesTheConnection() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await RawH2Client.connect(
            port: harness.sandbox.port, trustRootsPEM: harness.sandbox.trustRootsPEM, sendPreface: false)
        client.sendRaw(Array("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8))
        try await client.waitForClose()
        try await stillServes(harness)
    }

    @Test func dataOnStreamZeroIsAConnectionError() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        // DATA frame, length 4, stream 0.
        client.sendRaw([0, 0, 4, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4])
        let goaway = try await client.waitForGoAway()
        #expect(goaway.errorCode == 0x1)
        try await client.waitForClose()
        try await stillServes(harness)
    }

    @Test func truncatedAndOversizedFramesAreConnectionErrors() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        // A HEADERS frame announcing 16 MiB (above SETTINGS_MAX_FRAME_SIZE).
        client.sendRaw([0xff, 0xff, 0xff, 1, 4, 0, 0, 0, 1] + Array(repeating: 0, count: 32))
        let goaway = try await client.waitForGoAway()
        #expect(goaway.errorCode != 0)
        try await client.waitForClose()
        try await stillServes(harness)
    }

    @Test func invalidHPACKIsACompressionError() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        // HEADERS on stream 1 whose block refers to dynamic table entry 70 (empty table).
        client.sendRaw([0, 0, 1, 1, 0x5, 0, 0, 0, 1, 0x80 | 70])
        let goaway = try await client.waitForGoAway()
        #expect(goaway.errorCode == 0x9)  // COMPRESSION_ERROR
        try await client.waitForClose()
        try await stillServes(harness)
    }

    @Test func hugeHeadersAreRefused() async throws {
        let harness = try await SandboxHarness.start { $0.maximumHeaderListSize = 8192 }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.extraHeaders = [("x-padding", String(repeating: "p", count: 12_000), .nonIndexable)]
        let stream = try client.send(request)
        // Either the stream or the whole connection is refused; never a crash, never a 200.
        let outcome = try await client.wait("the refusal") { state -> Bool? in
            if state.closed || !state.goAways.isEmpty { return true }
            if let response = state.responses[stream], response.resetCode != nil || response.ended { return true }
            return nil
        }
        #expect(outcome)
        #expect(client.state.responses[stream]?.status != 200)
        #expect(harness.sandbox.requests.allSatisfy { $0.status != 200 })
        await client.close()
        try await stillServes(harness)
    }

    @Test func missingPseudoHeadersGetAppleAnswers() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let stream = client.newStreamID()
        try client.sendHeaders(stream: stream, [("apns-topic", "com.example.app", .indexable)], endStream: true)
        let response = try await client.response(stream: stream)
        #expect(response.status == 405)
        #expect(response.reason == "MethodNotAllowed")
        let noPath = client.newStreamID()
        try client.sendHeaders(stream: noPath, [(":method", "POST", .indexable)], endStream: true)
        #expect(try await client.response(stream: noPath).reason == "BadPath")
        // The connection itself survives a stream error.
        #expect(try await client.roundTrip(try await harness.validRequest()).status == 200)
        await client.close()
    }

    @Test func manyAbusiveConnectionsLeaveNothingOpen() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        for i in 0..<20 {
            let client = try await harness.connect()
            switch i % 3 {
            case 0: client.sendRaw([0, 0, 4, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4])
            case 1: client.sendRaw(Array(repeating: 0xff, count: 64))
            default: client.sendRaw([0, 0, 1, 1, 0x5, 0, 0, 0, 1, 0xff])
            }
            try await client.waitForClose()
        }
        try await stillServes(harness)
        // Every abusive connection was closed by the sandbox and forgotten.
        let open = try await waitUntil { harness.sandbox.activeConnections == 0 }
        #expect(open)
    }

    /// Polls a condition the sandbox reaches on its own event loop (bounded, not timed).
    func waitUntil(_ condition: () -> Bool) async throws -> Bool {
        for _ in 0..<500 {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }
}
