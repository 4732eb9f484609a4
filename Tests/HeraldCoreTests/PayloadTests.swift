import Foundation
import HeraldCore
import Testing

@Suite("Payload builder")
struct PayloadTests {
    func text(_ payload: Payload) -> String { String(decoding: payload.encoded(), as: UTF8.self) }

    @Test func simpleAlert() {
        let payload = Payload(aps: APS(alert: .text("Hello"), badge: 3, sound: .named("default")))
        #expect(text(payload) == #"{"aps":{"alert":"Hello","badge":3,"sound":"default"}}"#)
    }

    @Test func everyAPSKeyInApplesSpelling() throws {
        let aps = APS(
            alert: .fields(
                APS.AlertFields(
                    title: "T", subtitle: "S", body: "B", launchImage: "L.png", titleLocKey: "TK", titleLocArgs: ["a"],
                    subtitleLocKey: "SK", subtitleLocArgs: ["b"], locKey: "K", locArgs: ["c", "d"])),
            badge: 0, sound: .named("chime.aiff"), threadID: "thread", category: "CAT", contentAvailable: true,
            mutableContent: true, targetContentID: "target", interruptionLevel: .timeSensitive, relevanceScore: 0.5,
            filterCriteria: "work", staleDate: 1_700_000_100, contentState: .object([("score", .int(2))]),
            timestamp: 1_700_000_000, event: .update, dismissalDate: 1_700_000_200, attributesType: "GameAttributes",
            attributes: .object([("team", .string("blue"))]))
        let expected = """
            {"aps":{"alert":{"title":"T","subtitle":"S","body":"B","launch-image":"L.png","title-loc-key":"TK",\
            "title-loc-args":["a"],"subtitle-loc-key":"SK","subtitle-loc-args":["b"],"loc-key":"K","loc-args":["c","d"]},\
            "badge":0,"sound":"chime.aiff","thread-id":"thread","category":"CAT","content-available":1,"mutable-content":1,\
            "target-content-id":"target","interruption-level":"time-sensitive","relevance-score":0.5,"filter-criteria":"work",\
            "stale-date":1700000100,"content-state":{"score":2},"timestamp":1700000000,"event":"update",\
            "dismissal-date":1700000200,"attributes-type":"GameAttributes","attributes":{"team":"blue"}}}
            """
        #expect(text(Payload(aps: aps)) == expected)
        // And it is JSON that parses.
        #expect(PayloadInspection.isJSONObject(Payload(aps: aps).encoded()))
    }

    @Test func pushToStartAndWidgetKeysInApplesSpelling() {
        let start = APS(
            timestamp: 1_700_000_000, event: .start, attributesType: "GameAttributes", attributes: .object([]),
            inputPushToken: true)
        #expect(text(Payload(aps: start)).contains(#""event":"start","attributes-type":"GameAttributes","attributes":{},"input-push-token":1"#))
        let joined = APS(event: .start, inputPushChannel: "dHN0LXNyYy1jaGFubmVs")
        #expect(text(Payload(aps: joined)) == #"{"aps":{"event":"start","input-push-channel":"dHN0LXNyYy1jaGFubmVs"}}"#)
        #expect(text(Payload(aps: APS(contentChanged: true))) == #"{"aps":{"content-changed":true}}"#)
    }

    @Test func criticalSoundIsADictionary() {
        let payload = Payload(aps: APS(alert: .text("Fire"), sound: .critical(name: "alarm.caf", volume: 0.8)))
        #expect(text(payload) == #"{"aps":{"alert":"Fire","sound":{"critical":1,"name":"alarm.caf","volume":0.8}}}"#)
    }

    @Test func interruptionLevelsUseApplesValues() {
        #expect(APS.InterruptionLevel.allCases.map(\.rawValue) == ["passive", "active", "time-sensitive", "critical"])
        #expect(APS.LiveActivityEvent.allCases.map(\.rawValue) == ["start", "update", "end"])
    }

    @Test func customKeysFollowApsSortedAndNeverReplaceIt() {
        let payload = Payload(
            aps: APS(contentAvailable: true),
            custom: ["zeta": .bool(false), "order": .string("A-17"), "aps": .string("ignored"), "n": .null])
        #expect(text(payload) == #"{"aps":{"content-available":1},"n":null,"order":"A-17","zeta":false}"#)
    }

    @Test func stringsAreEscaped() {
        let payload = Payload(aps: APS(alert: .text("say \"hi\"\n\\ \u{1}")))
        #expect(text(payload) == #"{"aps":{"alert":"say \"hi\"\n\\ \u0001"}}"#)
    }

    @Test func rawJSONPassesThroughByteForByte() throws {
        let raw = Array(#"{ "aps" : { "alert" : "x" },  "b":1 }"#.utf8)
        #expect(try Payload(rawJSON: raw).encoded() == raw)
    }

    @Test func rawJSONMustBeAnObject() {
        let empty = #expect(throws: NotificationValidationError.self) { try Payload(rawJSON: []) }
        #expect(empty?.reason == .payloadEmpty)
        for bad in ["[1,2]", "\"text\"", "{", "nope"] {
            let error = #expect(throws: NotificationValidationError.self) { try Payload(rawJSON: Array(bad.utf8)) }
            #expect(error?.field == "payload", "\(bad)")
        }
    }

    @Test func jsonValueNumbersAndParsing() throws {
        #expect(JSONValue.double(2.0).jsonText == "2")
        #expect(JSONValue.double(0.25).jsonText == "0.25")
        #expect(JSONValue.double(.infinity).jsonText == "null")
        #expect(JSONValue.int(-7).jsonText == "-7")
        let parsed = try JSONValue(parsing: Array(#"{"b":[1,2.5,"x",true,null],"a":{}}"#.utf8))
        #expect(
            parsed
                == .object([
                    ("a", .object([])), ("b", .array([.int(1), .double(2.5), .string("x"), .bool(true), .null])),
                ]))
        #expect(parsed["b"] == .array([.int(1), .double(2.5), .string("x"), .bool(true), .null]))
        #expect(parsed["missing"] == nil)
    }

    @Test func inspectionFindsContentAvailableAlone() {
        #expect(PayloadInspection.apsHoldsOnlyContentAvailable(Array(#"{"aps":{"content-available":1}}"#.utf8)))
        #expect(
            !PayloadInspection.apsHoldsOnlyContentAvailable(Array(#"{"aps":{"content-available":1,"badge":1}}"#.utf8)))
        #expect(!PayloadInspection.apsHoldsOnlyContentAvailable(Array(#"{"aps":{"alert":"content-available"}}"#.utf8)))
        #expect(!PayloadInspection.apsHoldsOnlyContentAvailable(Array("not json content-available".utf8)))
    }
}
