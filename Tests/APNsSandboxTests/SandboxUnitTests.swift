import Crypto
import Foundation
import HeraldCore
import Testing

@testable import APNsSandbox

@Suite("APNsSandbox rules and parts, as values")
struct SandboxUnitTests {
    @Test(arguments: [
        (#"{}"#, true), (#"{"aps":{"alert":"hi","badge":1}}"#, true), (#" { "a" : [1, 2.5e3, -0, true, null] } "#, true),
        (#"{"a":"\u00e9\n"}"#, true), (#"[]"#, false), (#"{"a":}"#, false), (#"{"a":1,}"#, false), (#"{"a":01}"#, false),
        (#"{"a":"x"} trailing"#, false), (#"{"a":"unterminated}"#, false), (#""#, false), (#"{'a':1}"#, false),
    ])
    func jsonSyntax(_ text: String, _ valid: Bool) {
        #expect(JSONSyntax.isObject(Array(text.utf8)) == valid)
    }

    @Test func jsonNestingIsBounded() {
        let deep = String(repeating: "{\"a\":", count: 100) + "1" + String(repeating: "}", count: 100)
        #expect(!JSONSyntax.isObject(Array(deep.utf8)))
        let fine = String(repeating: "{\"a\":", count: 10) + "1" + String(repeating: "}", count: 10)
        #expect(JSONSyntax.isObject(Array(fine.utf8)))
    }

    @Test func devicePaths() {
        #expect(SandboxRules.deviceToken(fromPath: "/3/device/ABCD").value == "abcd")
        for (path, reason) in [
            ("/3/device/", APNsReason.missingDeviceToken), ("/3/device", .missingDeviceToken), ("/4/device/ab", .badPath),
            ("/", .badPath), ("/3/device/abc", .badDeviceToken), ("/3/device/ab/cd", .badDeviceToken),
            ("/3/device/ab?x=1", .badDeviceToken),
        ] {
            guard case .rejected(let got) = SandboxRules.deviceToken(fromPath: path) else {
                Issue.record("\(path) was accepted")
                continue
            }
            #expect(got == reason, "\(path)")
        }
    }

    @Test func optionalHeaderRules() {
        var head = SandboxRequestHead()
        #expect(SandboxRules.optionalHeaders(head) == nil)
        head.apnsID = "123E4567-E89B-12D3-A456-426655440000"
        #expect(SandboxRules.optionalHeaders(head) == nil)
        head.priority = "1"
        head.expiration = "0"
        head.collapseID = String(repeating: "x", count: 64)
        #expect(SandboxRules.optionalHeaders(head) == nil)
        head.collapseID = String(repeating: "é", count: 33)  // 66 bytes
        #expect(SandboxRules.optionalHeaders(head) == .badCollapseId)
        head.expiration = "1.5"
        #expect(SandboxRules.optionalHeaders(head) == .badExpirationDate)
        head.priority = "high"
        #expect(SandboxRules.optionalHeaders(head) == .badPriority)
        head.apnsID = "123e4567e89b12d3a456426655440000"
        #expect(SandboxRules.optionalHeaders(head) == .badMessageId)
    }

    @Test func tokenUpdateTracker() {
        var tracker = TokenUpdateTracker()
        let t0 = Date(timeIntervalSince1970: 1_000_000)
        func observe(_ key: Int, _ iat: Int64, after seconds: TimeInterval) -> Bool {
            tracker.observe(keyIndex: key, issuedAt: iat, now: t0.addingTimeInterval(seconds), minimumInterval: 1200)
        }
        let results = [
            observe(0, 100, after: 0), observe(0, 100, after: 5), observe(0, 200, after: 1199),
            // An older token is not a change.
            observe(0, 50, after: 1199), observe(0, 200, after: 1200),
            // Keys are independent.
            observe(1, 300, after: 0),
        ]
        #expect(results == [true, true, false, true, true, true])
    }

    @Test func verifierAcceptsItsOwnTokensAndCachesVerdicts() throws {
        let key = P256.Signing.PrivateKey()
        let verifier = SandboxTokenVerifier(keys: [
            SandboxTokenKey(teamID: "TEAM000001", keyID: "KEY0000001", publicKey: key.publicKey, topics: ["a.b"])
        ])
        let jwt = try SandboxJWT.make(
            teamID: "TEAM000001", keyID: "KEY0000001", privateKey: key, issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        guard case .success(let verified) = verifier.verify(jwt: jwt) else {
            Issue.record("a valid token was refused")
            return
        }
        #expect(verified.issuedAt == 1_700_000_000)
        _ = verifier.verify(jwt: jwt)
        #expect(verifier.verificationCount == 1)
        let tampered = String(jwt.dropLast(2)) + (jwt.hasSuffix("AA") ? "BB" : "AA")
        #expect((try? verifier.verify(jwt: tampered).get()) == nil)
        #expect((try? verifier.verify(jwt: "a.b.c").get()) == nil)
    }

    @Test func pemBlocksSkipCommentLines() throws {
        let ca = try SandboxCertificateAuthority.generate()
        let commented = SandboxPEM.withDemoHeader(ca.certificatePEM)
        #expect(commented.hasPrefix("# DEMO KEY"))
        let reloaded = try SandboxCertificateAuthority(
            certificatePEM: commented, privateKeyPEM: SandboxPEM.withDemoHeader(ca.privateKeyPEM))
        #expect(reloaded.certificate == ca.certificate)
        #expect(SandboxPEM.blocks(in: "junk\n" + ca.certificatePEM + "between\n" + ca.privateKeyPEM).count == 2)
    }

    @Test func caRefusesAKeyThatIsNotItsOwn() throws {
        let ca = try SandboxCertificateAuthority.generate()
        let other = P256.Signing.PrivateKey()
        #expect(throws: SandboxError.self) {
            try SandboxCertificateAuthority(certificatePEM: ca.certificatePEM, privateKeyPEM: other.pemRepresentation)
        }
    }

    @Test func splitMixIsDeterministic() {
        var a = SplitMix64(seed: 9)
        var b = SplitMix64(seed: 9)
        let first = (0..<5).map { _ in a.next() }
        #expect(first == (0..<5).map { _ in b.next() })
        var c = SplitMix64(seed: 10)
        #expect(first != (0..<5).map { _ in c.next() })
        var d = SplitMix64(seed: 1)
        #expect((0..<1000).map { _ in d.nextUnit() }.allSatisfy { $0 >= 0 && $0 < 1 })
    }
}
