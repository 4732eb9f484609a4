import APNsSandbox
import Foundation
import HeraldCore
import NIOHPACK
import Testing

@Suite("APNsSandbox audit of the client's wire behaviour")
struct SandboxAuditTests {
    @Test func wellBehavedClientLeavesACleanAudit() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        // Apple's advice: apns-id indexed the first time, literal without indexing afterwards.
        var first = try await harness.validRequest()
        first.apnsID = UUID().uuidString.lowercased()
        first.extraHeaders = []
        let firstStream = client.newStreamID()
        var headers = first.headerList.map { ($0.0, $0.1, $0.0 == "apns-id" ? HPACKIndexing.indexable : $0.2) }
        try client.sendHeaders(stream: firstStream, headers, endStream: false)
        client.sendData(stream: firstStream, first.body, endStream: true)
        #expect(try await client.response(stream: firstStream).status == 200)
        var second = first
        second.apnsID = UUID().uuidString.lowercased()
        headers = second.headerList
        let secondStream = client.newStreamID()
        try client.sendHeaders(stream: secondStream, headers, endStream: false)
        client.sendData(stream: secondStream, second.body, endStream: true)
        #expect(try await client.response(stream: secondStream).status == 200)
        #expect(harness.sandbox.audit.isClean)
        await client.close()
    }

    @Test func aStreamAboveTheAcknowledgedLimitIsReported() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        // A token connection starts at one stream; the raw client acknowledged that SETTINGS the
        // moment it arrived, ahead of everything it sends from here on.
        try await client.waitForMaxConcurrentStreams(1)
        let request = try await harness.validRequest()
        // The first stream stays open (its body never comes), and a second one is opened anyway.
        try client.sendHeaders(stream: client.newStreamID(), request.headerList, endStream: false)
        try client.sendHeaders(stream: client.newStreamID(), request.headerList, endStream: false)
        // nghttp2 ends the connection itself (PROTOCOL_ERROR); the audit says why.
        let goAway = try await client.waitForGoAway()
        #expect(goAway.errorCode == 0x1)
        try await client.waitForClose()
        let audit = harness.sandbox.audit
        #expect(audit.streamsAboveLimit == 1)
        #expect(!audit.isClean)
        // The open stream was never answered.
        #expect(harness.sandbox.requests.allSatisfy { !$0.processed })
        await client.close()
    }

    @Test func priorityFramesAreCounted() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        let stream = try client.send(request)
        _ = try await client.response(stream: stream)
        client.sendPriority(stream: stream + 2)
        let withPriority = try client.send(request, withPriority: true)
        #expect(try await client.response(stream: withPriority).status == 200)
        let audit = harness.sandbox.audit
        #expect(audit.priorityFrames == 1)
        #expect(audit.headersWithPriority == 1)
        #expect(!audit.isClean)
        await client.close()
    }

    @Test func indexedPathAndAuthorizationAreViolations() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.pathIndexing = .indexable
        #expect(try await client.roundTrip(request).status == 200)
        #expect(harness.sandbox.audit.hpackViolationCount == 1)
        #expect(harness.sandbox.audit.hpackViolations.first?.contains(":path") == true)

        // Authorization sent with incremental indexing.
        let stream = client.newStreamID()
        request.pathIndexing = .neverIndexed  // never-indexed is acceptable
        let headers = request.headerList.map { ($0.0, $0.1, $0.0 == "authorization" ? HPACKIndexing.indexable : $0.2) }
        try client.sendHeaders(stream: stream, headers, endStream: false)
        client.sendData(stream: stream, request.body, endStream: true)
        #expect(try await client.response(stream: stream).status == 200)
        let audit = harness.sandbox.audit
        #expect(audit.hpackViolationCount == 2)
        #expect(audit.hpackViolations.last?.contains("authorization") == true)
        await client.close()
    }

    @Test func apnsHeadersIndexedAgainAfterFirstUseAreViolations() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        func indexed(_ request: RawRequest) -> [(String, String, HPACKIndexing)] {
            request.headerList.map { ($0.0, $0.1, $0.0.hasPrefix("apns-") ? HPACKIndexing.indexable : $0.2) }
        }
        for i in 0..<2 {
            request.apnsID = UUID().uuidString.lowercased()
            request.expiration = String(1_900_000_000 + i)
            request.collapseID = "collapse-\(i)"
            let stream = client.newStreamID()
            try client.sendHeaders(stream: stream, indexed(request), endStream: false)
            client.sendData(stream: stream, request.body, endStream: true)
            #expect(try await client.response(stream: stream).status == 200)
        }
        let audit = harness.sandbox.audit
        // First use: indexing is right. Second use: three violations.
        #expect(audit.hpackViolationCount == 3)
        #expect(audit.hpackViolations.contains { $0.contains("apns-id") })
        #expect(audit.hpackViolations.contains { $0.contains("apns-expiration") })
        #expect(audit.hpackViolations.contains { $0.contains("apns-collapse-id") })
        await client.close()
    }
}
