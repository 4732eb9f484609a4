@testable import Herald
import HeraldCore
import Testing

@Suite("Topic rules")
struct TopicRulesTests {
    @Test("the runtime's topic rules say what allows(topic:) and agrees(withTopic:) say, for every push type")
    func sameAsTheConfiguration() {
        let topicLists: [[String]] = [
            ["com.example.app", "com.example.app.voip", "com.example.app.complication", "com.example.app.pushkit.fileprovider"],
            ["com.example.app", "com.example.app"],
            (0..<12).map { "com.example.app\($0)" } + ["com.example.app3.voip", "com.example.app.voip-ptt"],
            [],
        ]
        let probes = [
            "com.example.app", "com.example.app.voip", "com.example.app.complication", "com.example.app.pushkit.fileprovider",
            "com.example.app3", "com.example.app3.voip", "com.example.app.voip-ptt", "com.example.other", "com.apple.mgmt.x", "",
        ]
        for topics in topicLists {
            let tenant = Fixtures.tenant("rules", topics: topics)
            let rules = TopicRules(tenant)
            for topic in probes {
                let rule = rules.rule(for: topic)
                #expect((rule != nil) == tenant.allows(topic: topic), "\(topics) \(topic)")
                for pushType in PushType.allCases {
                    if let rule {
                        #expect(rule.agrees(with: pushType) == pushType.agrees(withTopic: topic), "\(topics) \(topic) \(pushType)")
                    }
                }
            }
        }
    }

    @Test("a tenant topic that is not well formed has no rule: a send to it is refused for its syntax")
    func malformedTopicHasNoRule() throws {
        let tenant = Fixtures.tenant("rules", topics: ["com.example.app", "com..bad", "com.example.app.voip"])
        let rules = TopicRules(tenant)
        #expect(rules.rule(for: "com..bad") == nil)
        #expect(rules.rule(for: "com.example.app.voip")?.agrees(with: .voip) == true)
        let note = Notification(deviceToken: Fixtures.token, topic: "com..bad", payload: Array(#"{"aps":{}}"#.utf8))
        let error = #expect(throws: PushError.self) {
            try tenant.admit(note, id: Fixtures.apnsID(), environment: nil, topicRules: rules)
        }
        #expect(error?.code == .invalidNotification && error?.reason == .badTopic)
        #expect(error?.message.contains("dotted bundle ID") == true)
    }
}
