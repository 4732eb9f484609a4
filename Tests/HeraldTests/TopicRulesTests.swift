@testable import Herald
import HeraldCore
import Testing

@Suite("Topic rules")
struct TopicRulesTests {
    @Test("the runtime's topic checks say what allows(topic:) and agrees(withTopic:) say, for every push type")
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
                for pushType in PushType.allCases {
                    let checked = rules.check(topic, pushType)
                    #expect(checked.allowed == tenant.allows(topic: topic), "\(topics) \(topic) \(pushType)")
                    #expect(checked.agrees == pushType.agrees(withTopic: topic), "\(topics) \(topic) \(pushType)")
                }
            }
        }
    }
}
