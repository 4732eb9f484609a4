import Foundation
import HeraldConfig
import Testing

@Suite("Server configuration: reload")
struct ServerConfigurationReloadTests {
    @Test func defaultsWatchEveryTwoSecondsAndReloadOnSIGHUP() throws {
        let configuration = try ServerConfiguration.parse(yaml: "log_level: info\n", file: "config/herald.yaml")
        #expect(configuration.reload == ServerConfiguration.ReloadSettings())
        #expect(configuration.reload.watch)
        #expect(configuration.reload.watchInterval == 2)
        #expect(configuration.reload.sighup)
    }

    @Test func readsTheSection() throws {
        let configuration = try ServerConfiguration.parse(
            yaml: """
                reload:
                  watch: false
                  watch_interval: 500ms
                  sighup: false

                """, file: "config/herald.yaml")
        #expect(!configuration.reload.watch)
        #expect(configuration.reload.watchInterval == 0.5)
        #expect(!configuration.reload.sighup)
    }

    @Test func badValuesAreLocatedErrors() throws {
        let yaml = """
            reload:
              watch: sometimes
              watch_interval: 2 hours
              sighup: 1
              poll: true

            """
        do {
            _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml")
            Issue.record("expected errors")
        } catch {
            let messages = error.errors.map(\.description)
            #expect(messages.count == 4, "\(messages)")
            #expect(messages.contains { $0.hasPrefix("config/herald.yaml:2:10: reload.watch: must be true or false") })
            #expect(
                messages.contains {
                    $0.hasPrefix(
                        "config/herald.yaml:3:19: reload.watch_interval: must be a duration of more than 0 seconds")
                })
            #expect(messages.contains { $0.hasPrefix("config/herald.yaml:4:11: reload.sighup: must be true or false") })
            #expect(
                messages.contains {
                    $0.hasPrefix("config/herald.yaml:5:3: reload.poll: unknown key")
                        && $0.contains("valid keys: watch, watch_interval, sighup")
                })
        }
    }

    @Test func theIntervalHasBounds() throws {
        for (value, column) in [("50ms", 19), ("2h", 19), ("0", 19)] {
            do {
                _ = try ServerConfiguration.parse(
                    yaml: "reload:\n  watch_interval: \(value)\n", file: "config/herald.yaml")
                Issue.record("\(value) should be refused")
            } catch {
                #expect(error.errors.count == 1)
                #expect(
                    error.errors.first?.description.hasPrefix("config/herald.yaml:2:\(column): reload.watch_interval:")
                        ?? false, "\(error)")
            }
        }
    }
}
