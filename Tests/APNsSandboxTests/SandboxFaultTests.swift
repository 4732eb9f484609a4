import APNsSandbox
import Foundation
import HeraldCore
import Testing

@Suite("APNsSandbox faults, GOAWAY and stream limits")
struct SandboxFaultTests {
    func certificateClient(_ harness: SandboxHarness) async throws -> RawH2Client {
        let credentials = try harness.ca.issueClientCertificate(
            commonName: "Apple Push Services: com.cert.app", topics: ["com.cert.app"],
            notBefore: Date().addingTimeInterval(-60), notAfter: Date().addingTimeInterval(3600))
        return try await harness.connect(clientCertificate: credentials)
    }

    /// The statuses of `count` sequential requests on one new connection.
    func statuses(seed: UInt64, count: Int) async throws -> [Int] {
        let harness = try await SandboxHarness.start {
            $0.faults = SandboxFaults(seed: seed, fraction500: 0.25, fraction503: 0.25)
        }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        var statuses: [Int] = []
        for _ in 0..<count { statuses.append(try await client.roundTrip(request).status ?? 0) }
        await client.close()
        return statuses
    }

    @Test func faultInjectionIsDeterministicForASeed() async throws {
        let first = try await statuses(seed: 42, count: 40)
        let again = try await statuses(seed: 42, count: 40)
        let other = try await statuses(seed: 7, count: 40)
        #expect(first == again)
        #expect(first != other)
        #expect(first.contains(500))
        #expect(first.contains(503))
        #expect(first.contains(200))
        #expect(Set(first).isSubset(of: [200, 500, 503]))
    }

    @Test func faultsCarryAppleReasonsAndCanChangeAtRuntime() async throws {
        let harness = try await SandboxHarness.start { $0.faults = SandboxFaults(fraction500: 1) }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        let failed = try await client.roundTrip(request)
        #expect(failed.status == 500)
        #expect(failed.reason == "InternalServerError")
        harness.sandbox.setFaults(SandboxFaults(fraction503: 1))
        let unavailable = try await client.roundTrip(request)
        #expect(unavailable.status == 503)
        #expect(unavailable.reason == "ServiceUnavailable")
        harness.sandbox.setFaults(.none)
        #expect(try await client.roundTrip(request).status == 200)
        await client.close()
    }

    @Test func anOutageWindowAnswersEveryRequest503FromStartToEnd() async throws {
        let clock = ManualWallClock(Date())
        let start = clock.now.addingTimeInterval(10)
        let harness = try await SandboxHarness.start(clock: clock) {
            $0.faults = SandboxFaults(outages: [SandboxOutage(start: start, duration: 20)])
        }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        #expect(try await client.roundTrip(request).status == 200)
        clock.set(start)
        let during = try await client.roundTrip(request)
        #expect(during.status == 503)
        #expect(during.reason == "ServiceUnavailable")
        // Even a request that would be refused for its own fault gets 503 during the outage.
        var bad = request
        bad.topic = "com.not.allowed"
        #expect(try await client.roundTrip(bad).status == 503)
        clock.set(start.addingTimeInterval(19.9))
        #expect(try await client.roundTrip(request).status == 503)
        clock.set(start.addingTimeInterval(20))
        #expect(try await client.roundTrip(request).status == 200)
        await client.close()
    }

    @Test func addedLatencyStillAnswersEveryRequest() async throws {
        let harness = try await SandboxHarness.start { $0.faults = SandboxFaults(addedLatency: 0.02) }
        defer { Task { await harness.stop() } }
        let client = try await certificateClient(harness)
        let streams = try (0..<5).map { _ in try client.send(RawRequest()) }
        for stream in streams { #expect(try await client.response(stream: stream).status == 200) }
        #expect(harness.sandbox.requests.filter(\.processed).count == 5)
        await client.close()
    }

    @Test func goawayAfterNAnswersUpToLastStreamAndRefusesTheRest() async throws {
        let harness = try await SandboxHarness.start { $0.faults = SandboxFaults(goawayAfter: 3) }
        defer { Task { await harness.stop() } }
        let client = try await certificateClient(harness)
        var streams: [UInt32] = []
        for _ in 0..<6 {
            var request = RawRequest()
            request.apnsID = UUID().uuidString.lowercased()
            streams.append(try client.send(request))
        }
        let goaway = try await client.waitForGoAway()
        #expect(goaway.lastStreamID == streams[2])
        #expect(goaway.errorCode == 0)
        #expect(goaway.reason == "Shutdown")
        try await client.waitForClose()

        let answered = client.state.responses.filter { $0.value.status != nil }.map(\.key).sorted()
        #expect(answered == Array(streams.prefix(3)))
        let records = harness.sandbox.requests
        #expect(records.filter(\.processed).map(\.streamID) == streams.prefix(3).map { Int($0) })
        // Whatever reached the sandbox after the limit was never processed.
        #expect(records.filter { !$0.processed }.allSatisfy { $0.streamID > Int(streams[2]) && $0.status == nil })
        #expect(harness.sandbox.counters.goawaysSent == 1)
    }

    @Test func dropAfterNClosesWithoutGoAway() async throws {
        let harness = try await SandboxHarness.start { $0.faults = SandboxFaults(dropAfter: 2) }
        defer { Task { await harness.stop() } }
        let client = try await certificateClient(harness)
        let first = try await client.roundTrip(RawRequest())
        #expect(first.status == 200)
        let streams = try (0..<3).map { _ in try client.send(RawRequest()) }
        try await client.waitForClose()
        #expect(client.state.goAways.isEmpty)
        let answered = streams.filter { client.state.responses[$0]?.status != nil }
        #expect(answered == [streams[0]])
        let records = harness.sandbox.requests
        #expect(records.filter(\.processed).count == 2)
        #expect(records.filter { !$0.processed }.allSatisfy { $0.cutOff == "connection-dropped" })
        #expect(harness.sandbox.counters.connectionsDropped == 1)
    }

    @Test(arguments: [SandboxFaultScope.connection, .sandbox])
    func countedFaultsInTheirScope(scope: SandboxFaultScope) async throws {
        // One request per connection: per connection neither fault is ever reached; counted over
        // the sandbox, every third answer brings a GOAWAY and every fifth a drop.
        let harness = try await SandboxHarness.start {
            $0.faults = SandboxFaults(goawayAfter: 3, dropAfter: 5, scope: scope)
        }
        defer { Task { await harness.stop() } }
        for number in 1...10 {
            let client = try await certificateClient(harness)
            #expect(try await client.roundTrip(RawRequest()).status == 200, "answer \(number) is given before its fault")
            if scope == .sandbox, number % 5 == 0 {
                try await client.waitForClose()
                #expect(client.state.goAways.isEmpty, "answer \(number): dropped, no GOAWAY")
            } else if scope == .sandbox, number % 3 == 0 {
                let goaway = try await client.waitForGoAway()
                #expect(goaway.reason == "Shutdown", "answer \(number)")
            }
            await client.close()
        }
        let counters = harness.sandbox.counters
        #expect(counters.answered == 10)
        #expect(counters.goawaysSent == (scope == .sandbox ? 3 : 0), "\(counters)")
        #expect(counters.connectionsDropped == (scope == .sandbox ? 2 : 0), "\(counters)")
    }

    @Test func shutdownGoAwayReachesEveryConnection() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let token = try await harness.connect()
        let certificate = try await certificateClient(harness)
        #expect(try await token.roundTrip(try await harness.validRequest()).status == 200)
        #expect(try await certificate.roundTrip(RawRequest()).status == 200)
        #expect(harness.sandbox.activeConnections == 2)
        harness.sandbox.sendGoAwayToAll(reason: .shutdown)
        for client in [token, certificate] {
            let goaway = try await client.waitForGoAway()
            #expect(goaway.reason == "Shutdown")
            #expect(goaway.lastStreamID == 1)
            try await client.waitForClose()
        }
    }

    @Test func streamLimitChangesAtRuntime() async throws {
        let harness = try await SandboxHarness.start { $0.maxConcurrentStreams = 50 }
        defer { Task { await harness.stop() } }
        let client = try await certificateClient(harness)
        try await client.waitForMaxConcurrentStreams(50)
        harness.sandbox.setMaxConcurrentStreams(3)
        try await client.waitForMaxConcurrentStreams(3)
        // A token connection that has not shown a token yet stays at one.
        let token = try await harness.connect()
        try await token.waitForMaxConcurrentStreams(1)
        #expect(try await token.roundTrip(try await harness.validRequest()).status == 200)
        try await token.waitForMaxConcurrentStreams(3)
        await client.close()
        await token.close()
    }

    @Test func limitDropsToOneAfterARejectionWhenAsked() async throws {
        let harness = try await SandboxHarness.start {
            $0.maxConcurrentStreams = 20
            $0.dropStreamLimitAfterRejection = true
        }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        #expect(try await client.roundTrip(request).status == 200)
        try await client.waitForMaxConcurrentStreams(20)
        request.priority = "3"
        #expect(try await client.roundTrip(request).status == 400)
        try await client.waitForMaxConcurrentStreams(1)
        request.priority = nil
        #expect(try await client.roundTrip(request).status == 200)
        try await client.waitForMaxConcurrentStreams(20)
        await client.close()
    }

    @Test func clientResetIsRecordedAsNotProcessed() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await certificateClient(harness)
        let stream = client.newStreamID()
        try client.sendHeaders(stream: stream, RawRequest().headerList, endStream: false)
        client.sendRSTStream(stream: stream)
        // A later request on the same connection shows the reset was handled first.
        #expect(try await client.roundTrip(RawRequest()).status == 200)
        let records = harness.sandbox.requests
        #expect(records.count == 2)
        #expect(records.first?.processed == false)
        #expect(records.first?.cutOff == "client-reset")
        await client.close()
    }
}
