import Foundation
import HeraldCore
import Testing

@testable import HeraldServer

@Suite("Strict JSON and API keys")
struct UnitTests {
    @Test func theParserKeepsValuesAndTheirBytes() throws {
        let text = #"{"a": [1, -2.5e3, true, null], "b": {"c": "\u00e9\n\ud83d\ude00"}, "d": 0}"#
        let bytes = Array(text.utf8)
        let root = try StrictJSONParser.parse(bytes)
        guard case .object(let members) = root.value else {
            Issue.record("not an object")
            return
        }
        #expect(members.map(\.key) == ["a", "b", "d"])
        let b = members[1].value
        #expect(String(decoding: bytes[b.range], as: UTF8.self) == #"{"c": "\u00e9\n\ud83d\ude00"}"#)
        guard case .object(let inner) = b.value, case .string(let c) = inner[0].value.value else {
            Issue.record("b.c is not a string")
            return
        }
        #expect(c == "é\n😀")
        guard case .array(let a) = members[0].value.value, case .number(let n) = a[1].value else {
            Issue.record("a[1] is not a number")
            return
        }
        #expect(n == "-2.5e3")
    }

    @Test(arguments: [
        "", "{", "{\"a\" 1}", "{\"a\": 1,}", "[1,]", "{\"a\": 01}", "{\"a\": 1.}", "{\"a\": .5}", "{\"a\": tru}", "{\"a\": \"x}",
        "{\"a\": \"\\q\"}", "{\"a\": \"\\ud800\"}", "{\"a\": 1} x", "{\"a\": 1, \"a\": 2}", "{'a': 1}", "{\"a\": NaN}",
        "{\"a\": \"tab\there\"}", String(repeating: "[", count: 100) + String(repeating: "]", count: 100),
    ])
    func malformedJSONIsRefused(_ text: String) {
        #expect(throws: JSONSyntaxError.self) { try StrictJSONParser.parse(Array(text.utf8)) }
    }

    @Test func errorsSayWhere() {
        do {
            _ = try StrictJSONParser.parse(Array("{\n  \"a\": 1,\n  \"b\" 2\n}".utf8))
            Issue.record("parsed")
        } catch {
            #expect(error.line == 3)
            #expect(error.column == 7)
        }
    }

    @Test func invalidUTF8IsRefused() {
        #expect(throws: JSONSyntaxError.self) { try StrictJSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
    }

    @Test func apiKeysAreRandomHashedAndLookedUpByDigest() throws {
        let key = APIKeys.generate()
        #expect(key.hasPrefix("hk_"))
        #expect(key.count == 3 + 43)
        #expect(key != APIKeys.generate())
        #expect(APIKeys.sha256Hex(of: "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")

        let acme = TenantConfiguration(
            id: try TenantID("acme"), teamID: "ACMETEAM01", auth: .token(.init(keyID: "K", privateKey: Secret(bytes: [1], origin: "test"))),
            topics: ["com.acme"], apiKeys: [APIKeyEntry(name: "backend", sha256Hex: APIKeys.sha256Hex(of: key).uppercased())],
            sourceFile: "acme.yaml")
        var shared = acme
        shared.id = try TenantID("other")
        shared.apiKeys.append(APIKeyEntry(name: "clash", sha256Hex: APIKeys.sha256Hex(of: "shared-key")))
        var clashing = acme
        clashing.id = try TenantID("third")
        clashing.apiKeys = [APIKeyEntry(name: "clash", sha256Hex: APIKeys.sha256Hex(of: "shared-key"))]

        let index = APIKeyIndex(tenants: [acme, clashing])
        #expect(index.authenticate(key)?.tenant.rawValue == "acme")
        #expect(index.authenticate(key)?.name == "backend")
        #expect(index.authenticate(key + "x") == nil)
        #expect(index.authenticate("") == nil)

        // A key listed by two tenants is refused for both.
        let conflicted = APIKeyIndex(tenants: [shared, clashing])
        #expect(conflicted.authenticate("shared-key") == nil)
        #expect(conflicted.conflicts.count == 1)

        #expect(APIKeys.bearer("Bearer abc") == "abc")
        #expect(APIKeys.bearer("bearer   abc ") == "abc")
        #expect(APIKeys.bearer("Basic abc") == nil)
        #expect(APIKeys.bearer("Bearer ") == nil)
        #expect(APIKeys.constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!APIKeys.constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!APIKeys.constantTimeEquals([1, 2], [1, 2, 3]))
    }
}

@Suite("API times")
struct TimestampTests {
    /// Every millisecond of a second, as a store reads it back (milliseconds / 1000), is written
    /// as that millisecond: never one early from the binary fraction.
    @Test func timesAreWrittenToTheStoredMillisecond() {
        for millis in Int64(1_764_092_387_000)..<Int64(1_764_092_388_000) {
            let written = Timestamps.iso8601(Date(timeIntervalSince1970: TimeInterval(millis) / 1000))
            let fraction = String(millis % 1000)
            #expect(written == "2025-11-25T17:39:47." + String(repeating: "0", count: 3 - fraction.count) + fraction + "Z", "\(millis)")
        }
        #expect(Timestamps.iso8601(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(Timestamps.iso8601(Date(timeIntervalSince1970: 1.9996)) == "1970-01-01T00:00:02.000Z", "rounded up into the next second")
        #expect(Timestamps.iso8601(Date(timeIntervalSince1970: -0.25)) == "1969-12-31T23:59:59.750Z")
        #expect(Timestamps.iso8601(Timestamps.latestDate) == "9999-12-31T23:59:59.000Z")
    }
}
