import APNsSandbox
import Crypto
import Foundation
import HeraldCore
import Testing

@Suite("APNsSandbox provider tokens and client certificates")
struct SandboxAuthTests {
    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    func status(_ harness: SandboxHarness, authorization: String?) async throws -> (Int?, String?) {
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.authorization = authorization
        let response = try await client.roundTrip(request)
        await client.close()
        return (response.status, response.reason)
    }

    /// The connection remembers its last accepted `authorization` (and path and topic) to skip
    /// repeated checks; a value that only `String ==` finds equal (canonical equivalence: U+212A
    /// KELVIN SIGN for "K") is a different token and is verified, and refused.
    @Test func aTokenEqualOnlyUnderCanonicalEquivalenceIsVerifiedAgain() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        var request = try await harness.validRequest()
        // An ES256 signature is random: a token with a "K" in it comes within a few tries.
        for _ in 0..<100 where request.authorization?.contains("K") != true {
            request.authorization = try await harness.bearer()
        }
        let authorization = try #require(request.authorization)
        try #require(authorization.contains("K"))
        let client = try await harness.connect()
        #expect(try await client.roundTrip(request).status == 200)
        let lookalike = authorization.replacingOccurrences(of: "K", with: "\u{212A}")
        #expect(lookalike == authorization)
        #expect(Array(lookalike.utf8) != Array(authorization.utf8))
        request.authorization = lookalike
        let response = try await client.roundTrip(request)
        #expect(response.status == 403)
        #expect(response.reason == "InvalidProviderToken")
        await client.close()
    }

    @Test func tokenSignedWithAnotherKeyIsInvalid() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let forged = try await harness.token(key: P256.Signing.PrivateKey())
        let (status, reason) = try await status(harness, authorization: "bearer " + forged)
        #expect(status == 403)
        #expect(reason == "InvalidProviderToken")
    }

    @Test func tokenWithUnknownKeyIDIsInvalid() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let token = try await harness.token(keyID: "UNKNOWNKEY")
        #expect(try await status(harness, authorization: "bearer " + token) == (403, "InvalidProviderToken"))
    }

    @Test func tokenFromAnotherTeamIsInvalid() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let token = try await harness.token(teamID: "OTHERTEAM1")
        #expect(try await status(harness, authorization: "bearer " + token) == (403, "InvalidProviderToken"))
    }

    @Test func tokenWithAnotherAlgorithmIsInvalid() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let now = Int(harness.clock.now.timeIntervalSince1970)
        let header = Self.base64URL(#"{"alg":"HS256","kid":"\#(SandboxHarness.keyID)"}"#)
        let claims = Self.base64URL(#"{"iss":"\#(SandboxHarness.teamID)","iat":\#(now)}"#)
        let hs256 = header + "." + claims + "." + Self.base64URL(String(repeating: "s", count: 32))
        #expect(try await status(harness, authorization: "bearer " + hs256) == (403, "InvalidProviderToken"))
        let none = Self.base64URL(#"{"alg":"none","kid":"\#(SandboxHarness.keyID)"}"#) + "." + claims + "."
        #expect(try await status(harness, authorization: "bearer " + none) == (403, "InvalidProviderToken"))
    }

    @Test func tokenOlderThanAnHourIsExpired() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        let request = try await harness.validRequest()
        #expect(try await client.roundTrip(request).status == 200)
        harness.clock.advance(by: 3601)
        let response = try await client.roundTrip(request)
        #expect(response.status == 403)
        #expect(response.reason == "ExpiredProviderToken")
        await client.close()
    }

    @Test func tokenChangingWithinTwentyMinutesIsRefused() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        #expect(try await client.roundTrip(request).status == 200)

        harness.clock.advance(by: 600)
        request.authorization = try await harness.bearer()
        let tooSoon = try await client.roundTrip(request)
        #expect(tooSoon.status == 429)
        #expect(tooSoon.reason == "TooManyProviderTokenUpdates")

        // Key scope: another connection with the same new token is refused too.
        let second = try await harness.connect()
        #expect(try await second.roundTrip(request).status == 429)

        harness.clock.advance(by: 601)
        request.authorization = try await harness.bearer()
        #expect(try await client.roundTrip(request).status == 200)
        await client.close()
        await second.close()
    }

    @Test func connectionScopeLetsANewConnectionBringANewToken() async throws {
        let harness = try await SandboxHarness.start { $0.tokenUpdateScope = .connection }
        defer { Task { await harness.stop() } }
        let first = try await harness.connect()
        #expect(try await first.roundTrip(try await harness.validRequest()).status == 200)
        harness.clock.advance(by: 5)
        let second = try await harness.connect()
        let fresh = try await harness.validRequest()
        #expect(try await second.roundTrip(fresh).status == 200)
        #expect(try await first.roundTrip(fresh).status == 429)
        await first.close()
        await second.close()
    }

    @Test("strict scope: a second token for the key within 20 minutes is refused, even signed in the same second or older")
    func strictScopeRefusesAnyOtherToken() async throws {
        let harness = try await SandboxHarness.start { $0.tokenUpdateScope = .strict }
        defer { Task { await harness.stop() } }
        let issued = harness.clock.now
        let first = try await harness.connect()
        var request = try await harness.validRequest()
        request.authorization = "bearer " + (try await harness.token(issuedAt: issued))
        #expect(try await first.roundTrip(request).status == 200)

        // Another instance signing for the same key in the same second (same iat, another
        // signature), or a token older than the current one, is a new token: 429 on any connection.
        let second = try await harness.connect()
        var sameSecond = request
        sameSecond.authorization = "bearer " + (try await harness.token(issuedAt: issued))
        #expect(sameSecond.authorization != request.authorization)
        let refused = try await second.roundTrip(sameSecond)
        #expect(refused.status == 429)
        #expect(refused.reason == "TooManyProviderTokenUpdates")
        var older = request
        older.authorization = "bearer " + (try await harness.token(issuedAt: issued.addingTimeInterval(-30)))
        #expect(try await second.roundTrip(older).status == 429)
        // The token already accepted is accepted on every connection (a restarted sender).
        #expect(try await second.roundTrip(request).status == 200)

        // 20 minutes on, one new token is accepted; the one before it stays valid for its hour.
        harness.clock.advance(by: 1201)
        var renewed = request
        renewed.authorization = try await harness.bearer()
        #expect(try await second.roundTrip(renewed).status == 200)
        #expect(try await first.roundTrip(request).status == 200)
        await first.close()
        await second.close()
    }

    @Test func eachDistinctTokenIsVerifiedOnce() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let request = try await harness.validRequest()
        for _ in 0..<3 {
            let client = try await harness.connect()
            for _ in 0..<5 { #expect(try await client.roundTrip(request).status == 200) }
            await client.close()
        }
        #expect(harness.sandbox.counters.tokenVerifications == 1)
    }

    @Test func tokenTopicsAreTheKeysTopics() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect()
        var voip = try await harness.validRequest()
        voip.topic = "com.example.app.voip"
        voip.pushType = "voip"
        #expect(try await client.roundTrip(voip).status == 200)
        await client.close()
    }

    // MARK: Certificates

    func certificate(
        _ harness: SandboxHarness, topics: [String], ca: SandboxCertificateAuthority? = nil
    ) throws -> (certificatePEM: String, privateKeyPEM: String) {
        try (ca ?? harness.ca).issueClientCertificate(
            commonName: "Apple Push Services: \(topics.first ?? "none")", topics: topics,
            notBefore: Date().addingTimeInterval(-60), notAfter: Date().addingTimeInterval(3600))
    }

    @Test func multiTopicCertificateNeedsATopicAndAllowsOnlyItsOwn() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let client = try await harness.connect(
            clientCertificate: try certificate(harness, topics: ["com.cert.app", "com.cert.app.voip"]))
        var request = RawRequest()
        let missing = try await client.roundTrip(request)
        #expect(missing.status == 400)
        #expect(missing.reason == "MissingTopic")

        request.topic = "com.example.app"
        let other = try await client.roundTrip(request)
        #expect(other.status == 400)
        #expect(other.reason == "TopicDisallowed")

        request.topic = "com.cert.app.voip"
        request.pushType = "voip"
        #expect(try await client.roundTrip(request).status == 200)

        let records = harness.sandbox.requests
        #expect(records.allSatisfy { $0.authKind == .certificate && $0.teamID == nil })
        await client.close()
    }

    @Test func certificateFromAnotherCAIsRefusedAtTheHandshake() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let stranger = try SandboxCertificateAuthority.generate(commonName: "Someone else")
        let credentials = try certificate(harness, topics: ["com.cert.app"], ca: stranger)
        do {
            let client = try await harness.connect(clientCertificate: credentials)
            // TLS 1.3 reports the refusal after the handshake: the connection closes unused.
            try await client.waitForClose()
            #expect(client.state.responses.isEmpty)
        } catch {
            // Refused during the handshake: also right.
        }
        #expect(harness.sandbox.connectionCount == 0)
    }

    @Test func connectionWithoutALPNh2IsClosed() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        do {
            let client = try await harness.connect(alpn: ["http/1.1"])
            try await client.waitForClose()
        } catch {
            // The handshake itself failed: no common protocol. Also right.
        }
        #expect(harness.sandbox.connectionCount == 0)
    }

    @Test func topicsExtensionRoundTrips() throws {
        let topics = ["com.acme.app", "com.acme.app.voip", "com.acme.app.complication"]
        let der = try APNsTopicsExtension.encode(topics: topics)
        #expect(try APNsTopicsExtension.decode(der) == topics)
        #expect(APNsTopicsExtension.kind(of: "com.acme.app.voip") == "voip")
        #expect(APNsTopicsExtension.kind(of: "com.acme.app") == "app")
    }
}
