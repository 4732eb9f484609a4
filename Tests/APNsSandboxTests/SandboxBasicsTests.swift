import APNsSandbox
import Foundation
import HeraldCore
import NIOHPACK
import Testing

@Suite("APNsSandbox basics")
struct SandboxBasicsTests {
    @Test func acceptsAValidTokenRequestAndEchoesTheApnsID() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.apnsID = "123e4567-e89b-12d3-a456-426655440000"
        let response = try await client.roundTrip(request)
        #expect(response.status == 200)
        #expect(response.apnsID == "123e4567-e89b-12d3-a456-426655440000")
        #expect(response.body.isEmpty)

        let records = harness.sandbox.requests
        #expect(records.count == 1)
        let record = try #require(records.first)
        #expect(record.processed)
        #expect(record.status == 200)
        #expect(record.authKind == .token)
        #expect(record.teamID == SandboxHarness.teamID)
        #expect(record.keyID == SandboxHarness.keyID)
        #expect(record.topic == "com.example.app")
        #expect(record.deviceToken == SandboxHarness.device)
        #expect(record.apnsID == "123e4567-e89b-12d3-a456-426655440000")
        #expect(record.apnsIDFromRequest)
        #expect(record.payload == request.body)
        #expect(record.payloadSize == request.body.count)
        #expect(record.payloadSHA256.count == 64)
        await client.close()
    }

    /// A request without an apns-id is answered with a new one: a version 4 UUID in canonical
    /// (lowercase) form, a different one for every request.
    @Test func generatesAnApnsIDWhenTheRequestHasNone() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var ids: [String] = []
        for _ in 0..<3 {
            let response = try await client.roundTrip(try await harness.validRequest())
            #expect(response.status == 200)
            let id = try #require(response.apnsID)
            #expect(try NotificationID(id).rawValue == id)
            #expect(Array(id)[14] == "4" && "89ab".contains(Array(id)[19]))
            ids.append(id)
        }
        #expect(Set(ids).count == 3)
        #expect(harness.sandbox.requests.map(\.apnsID) == ids)
        #expect(harness.sandbox.requests.allSatisfy { !$0.apnsIDFromRequest })
        await client.close()
    }

    /// A request's own apns-id comes back as it was sent, upper case too.
    @Test func echoesTheRequestsApnsIDAsSent() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.apnsID = "123E4567-E89B-42D3-A456-426655440000"
        let response = try await client.roundTrip(request)
        #expect(response.status == 200)
        #expect(response.apnsID == "123E4567-E89B-42D3-A456-426655440000")
        #expect(harness.sandbox.requests.first?.apnsIDFromRequest == true)
        await client.close()
    }

    @Test func tokenConnectionStartsWithOneStreamUntilAValidToken() async throws {
        let harness = try await SandboxHarness.start { $0.maxConcurrentStreams = 7 }
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        try await client.waitForMaxConcurrentStreams(1)

        // A request without a valid token does not raise the limit.
        var bad = RawRequest()
        bad.topic = SandboxHarness.topics[0]
        let rejected = try await client.roundTrip(bad)
        #expect(rejected.status == 403)
        #expect(rejected.reason == "MissingProviderToken")
        #expect(client.state.maxConcurrentStreams == 1)

        let accepted = try await client.roundTrip(try await harness.validRequest())
        #expect(accepted.status == 200)
        try await client.waitForMaxConcurrentStreams(7)
        await client.close()
    }

    @Test func certificateConnectionStartsWithTheFullLimit() async throws {
        let harness = try await SandboxHarness.start { $0.maxConcurrentStreams = 9 }
        defer { Task { await harness.stop() } }
        let certificate = try harness.ca.issueClientCertificate(
            commonName: "Apple Push Services: com.example.cert", topics: ["com.example.cert"],
            notBefore: Date().addingTimeInterval(-60), notAfter: Date().addingTimeInterval(3600))
        let client = try await harness.connect(clientCertificate: certificate)
        try await client.waitForMaxConcurrentStreams(9)
        // Single-topic certificate: the topic may be omitted; authorization is ignored.
        var request = RawRequest()
        request.authorization = "bearer not-a-token"
        let response = try await client.roundTrip(request)
        #expect(response.status == 200)
        let record = try #require(harness.sandbox.requests.first)
        #expect(record.authKind == .certificate)
        #expect(record.topic == "com.example.cert")
        await client.close()
    }
}
