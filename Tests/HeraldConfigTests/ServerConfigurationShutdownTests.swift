import Foundation
import HeraldConfig
import Testing

@Suite("Server configuration: shutdown_timeout")
struct ServerConfigurationShutdownTests {
    @Test("25 s by default, inside Kubernetes' 30 s grace period; a duration from 1 s to 1 h is read")
    func defaultAndValues() throws {
        #expect(try ServerConfiguration.parse(yaml: "log_level: info\n", file: "config/herald.yaml").shutdownTimeout == 25)
        for (value, seconds) in [("10s", 10.0), ("90", 90), ("1.5", 1.5), ("2m", 120), ("1h", 3600)] {
            let configuration = try ServerConfiguration.parse(yaml: "shutdown_timeout: \(value)\n", file: "config/herald.yaml")
            #expect(configuration.shutdownTimeout == seconds, "\(value)")
        }
    }

    @Test("out of range or not a duration: an error naming the file, line and field")
    func refused() throws {
        for value in ["0", "500ms", "2h", "soon", "-5", "[1]"] {
            do {
                _ = try ServerConfiguration.parse(yaml: "log_level: info\nshutdown_timeout: \(value)\n", file: "config/herald.yaml")
                Issue.record("\(value) should be refused")
            } catch {
                #expect(error.errors.count == 1, "\(value): \(error)")
                #expect(
                    error.errors.first?.description.hasPrefix("config/herald.yaml:2:19: shutdown_timeout: must be") ?? false,
                    "\(value): \(error)")
            }
        }
    }
}
