import Crypto
import Foundation
import HeraldCore
import Testing

@testable import APNsSandbox

/// Provider tokens in the shapes real clients send, built here by hand (JSON text, base64url,
/// swift-crypto's P256 signature), not with the sandbox's or JWTKit's token code: each shape APNs
/// accepts is accepted, each it refuses is refused with APNs' reason.
@Suite("APNsSandbox provider token fidelity")
struct SandboxTokenFidelityTests {
    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// `header.claims.signature` from raw JSON texts, signed with `key` (ES256, raw r||s).
    static func token(header: String, claims: String, key: P256.Signing.PrivateKey) throws -> String {
        let input = base64URL(Array(header.utf8)) + "." + base64URL(Array(claims.utf8))
        let signature = try key.signature(for: Array(input.utf8))
        return input + "." + base64URL(signature.rawRepresentation)
    }

    /// Status and reason of one request carrying `jwt`, on a fresh connection.
    static func answer(_ harness: SandboxHarness, _ jwt: String) async throws -> (Int?, String?) {
        let client = try await harness.connect()
        var request = try await harness.validRequest()
        request.authorization = "bearer " + jwt
        let response = try await client.roundTrip(request)
        await client.close()
        return (response.status, response.reason)
    }

    static let kid = SandboxHarness.keyID
    static let team = SandboxHarness.teamID

    /// Every accepted shape carries the same `iat`, so the token-update rule never interferes.
    @Test func shapesRealClientsSendAreAccepted() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let iat = Int64(harness.clock.now.timeIntervalSince1970)
        let shapes: [(name: String, header: String, claims: String)] = [
            ("plain", #"{"alg":"ES256","kid":"\#(Self.kid)"}"#, #"{"iss":"\#(Self.team)","iat":\#(iat)}"#),
            ("typ JWT", #"{"alg":"ES256","typ":"JWT","kid":"\#(Self.kid)"}"#, #"{"iss":"\#(Self.team)","iat":\#(iat)}"#),
            ("iat as numeric string", #"{"alg":"ES256","kid":"\#(Self.kid)"}"#, #"{"iss":"\#(Self.team)","iat":"\#(iat)"}"#),
            (
                "kid repeated in the claims, extra claims",
                #"{"typ":"JWT","alg":"ES256","kid":"\#(Self.kid)"}"#,
                #"{"iss":"\#(Self.team)","iat":\#(iat),"kid":"\#(Self.kid)","jti":"x1","exp":\#(iat + 3600)}"#
            ),
            ("fractional iat", #"{"alg":"ES256","kid":"\#(Self.kid)"}"#, #"{"iss":"\#(Self.team)","iat":\#(iat).25}"#),
            (
                "whitespace in the JSON",
                "{ \"alg\" : \"ES256\" ,\n \"kid\" : \"\(Self.kid)\" }",
                "{\n  \"iss\": \"\(Self.team)\",\n  \"iat\": \"\(iat)\"\n}"
            ),
        ]
        for shape in shapes {
            let jwt = try Self.token(header: shape.header, claims: shape.claims, key: harness.key)
            let (status, reason) = try await Self.answer(harness, jwt)
            #expect(status == 200, "\(shape.name): \(status.map(String.init) ?? "no status") \(reason ?? "")")
        }
    }

    @Test func shapesAPNsRefusesAreRefused() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let iat = Int64(harness.clock.now.timeIntervalSince1970)
        let header = #"{"alg":"ES256","typ":"JWT","kid":"\#(Self.kid)"}"#
        let refused: [(name: String, header: String, claims: String, reason: String)] = [
            ("iat not a number", header, #"{"iss":"\#(Self.team)","iat":"soon"}"#, "InvalidProviderToken"),
            ("iat with an exponent", header, #"{"iss":"\#(Self.team)","iat":"1.7e9"}"#, "InvalidProviderToken"),
            ("iat in hex", header, #"{"iss":"\#(Self.team)","iat":"0x6553f100"}"#, "InvalidProviderToken"),
            ("iat infinite", header, #"{"iss":"\#(Self.team)","iat":"inf"}"#, "InvalidProviderToken"),
            ("iat a boolean", header, #"{"iss":"\#(Self.team)","iat":true}"#, "InvalidProviderToken"),
            ("iat missing", header, #"{"iss":"\#(Self.team)"}"#, "InvalidProviderToken"),
            ("iss missing", header, #"{"iat":\#(iat)}"#, "InvalidProviderToken"),
            ("kid only in the claims", #"{"alg":"ES256"}"#, #"{"iss":"\#(Self.team)","iat":\#(iat),"kid":"\#(Self.kid)"}"#, "InvalidProviderToken"),
            ("wrong team", header, #"{"iss":"OTHERTEAM1","iat":\#(iat)}"#, "InvalidProviderToken"),
            ("unknown key", #"{"alg":"ES256","kid":"NOSUCHKEY1"}"#, #"{"iss":"\#(Self.team)","iat":\#(iat)}"#, "InvalidProviderToken"),
            ("ES384 named", #"{"alg":"ES384","kid":"\#(Self.kid)"}"#, #"{"iss":"\#(Self.team)","iat":\#(iat)}"#, "InvalidProviderToken"),
            ("an hour and more old", header, #"{"iss":"\#(Self.team)","iat":\#(iat - 3601)}"#, "ExpiredProviderToken"),
            ("an hour and more old, as a string", header, #"{"iss":"\#(Self.team)","iat":"\#(iat - 7200)"}"#, "ExpiredProviderToken"),
            ("issued in the future", header, #"{"iss":"\#(Self.team)","iat":\#(iat + 600)}"#, "InvalidProviderToken"),
            ("issued in the future, as a string", header, #"{"iss":"\#(Self.team)","iat":"\#(iat + 3600)"}"#, "InvalidProviderToken"),
            ("header not JSON", "ES256", #"{"iss":"\#(Self.team)","iat":\#(iat)}"#, "InvalidProviderToken"),
            ("claims an array", header, #"[1,2]"#, "InvalidProviderToken"),
        ]
        for shape in refused {
            let jwt = try Self.token(header: shape.header, claims: shape.claims, key: harness.key)
            let (status, reason) = try await Self.answer(harness, jwt)
            #expect(status == 403, "\(shape.name)")
            #expect(reason == shape.reason, "\(shape.name): \(reason ?? "no reason")")
        }

        let good = try Self.token(header: header, claims: #"{"iss":"\#(Self.team)","iat":\#(iat)}"#, key: harness.key)
        let parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        // Claims changed after signing: the signature does not match.
        let tampered = parts[0] + "." + Self.base64URL(Array(#"{"iss":"\#(Self.team)","iat":"\#(iat)"}"#.utf8)) + "." + parts[2]
        let malformed = [
            ("tampered claims", tampered),
            ("two parts", parts[0] + "." + parts[1]),
            ("four parts", good + "." + parts[2]),
            ("signature cut short", parts[0] + "." + parts[1] + "." + String(parts[2].dropLast(4))),
            ("signature not base64url", parts[0] + "." + parts[1] + ".!!!!"),
            ("DER signature", parts[0] + "." + parts[1] + "." + Self.base64URL(try Self.derSignature(good, harness.key))),
        ]
        for (name, jwt) in malformed {
            let (status, reason) = try await Self.answer(harness, jwt)
            #expect(status == 403, "\(name)")
            #expect(reason == "InvalidProviderToken", "\(name): \(reason ?? "no reason")")
        }
        // The good token still works after all that.
        #expect(try await Self.answer(harness, good).0 == 200)
    }

    static func derSignature(_ jwt: String, _ key: P256.Signing.PrivateKey) throws -> [UInt8] {
        let input = jwt.split(separator: ".").prefix(2).joined(separator: ".")
        return Array(try key.signature(for: Array(input.utf8)).derRepresentation)
    }

    @Test func aTokenSlightlyAheadOfTheClockIsAccepted() async throws {
        let harness = try await SandboxHarness.start()
        defer { Task { await harness.stop() } }
        let ahead = Int64(harness.clock.now.timeIntervalSince1970) + 30
        let jwt = try Self.token(
            header: #"{"alg":"ES256","kid":"\#(Self.kid)"}"#, claims: #"{"iss":"\#(Self.team)","iat":"\#(ahead)"}"#,
            key: harness.key)
        #expect(try await Self.answer(harness, jwt).0 == 200)
    }

    @Test(arguments: [
        ("1700000000", 1_700_000_000.0), ("1700000000.5", 1_700_000_000.5), ("-5", -5.0), ("0", 0.0),
    ])
    func numericStringIssuedAtParses(_ text: String, _ value: Double) {
        #expect(SandboxTokenVerifier.NumericDate.parse(text) == value)
    }

    @Test(arguments: ["", " 1700000000", "1700000000 ", "1.7e9", "0x10", "inf", "nan", "1.", ".", "-", "1.2.3", "+5", "١٢٣"])
    func malformedIssuedAtStringsAreRefused(_ text: String) {
        #expect(SandboxTokenVerifier.NumericDate.parse(text) == nil)
    }

    @Test func tokenAgeRules() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(TokenAge.check(issuedAt: 1_700_000_000, now: now, lifetime: 3600) == nil)
        #expect(TokenAge.check(issuedAt: 1_700_000_000 - 3600, now: now, lifetime: 3600) == nil)
        #expect(TokenAge.check(issuedAt: 1_700_000_000 - 3601, now: now, lifetime: 3600) == .expiredProviderToken)
        #expect(TokenAge.check(issuedAt: 1_700_000_060, now: now, lifetime: 3600) == nil)
        #expect(TokenAge.check(issuedAt: 1_700_000_061, now: now, lifetime: 3600) == .invalidProviderToken)
    }
}
