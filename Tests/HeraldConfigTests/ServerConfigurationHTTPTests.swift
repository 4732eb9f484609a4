import Foundation
import HeraldConfig
import Testing

@Suite("Server configuration: http")
struct ServerConfigurationHTTPTests {
    @Test func defaultsBoundTheListener() throws {
        let configuration = try ServerConfiguration.parse(yaml: "log_level: info\n", file: "config/herald.yaml")
        #expect(configuration.http == ServerConfiguration.HTTPSettings())
        #expect(configuration.http.idleTimeout == 60)
        #expect(configuration.http.bodyTimeout == 30)
        #expect(configuration.http.maxConnections == 2048)
        #expect(configuration.http.rateLimit == .init(requestsPerSecond: 1000, burst: 2000))
    }

    @Test func readsTheSection() throws {
        let configuration = try ServerConfiguration.parse(
            yaml: """
                http:
                  idle_timeout: 15s
                  body_timeout: 2.5
                  max_connections: 100
                  rate_limit:
                    requests_per_second: 0.5
                    burst: 10

                """, file: "config/herald.yaml")
        #expect(configuration.http.idleTimeout == 15)
        #expect(configuration.http.bodyTimeout == 2.5)
        #expect(configuration.http.maxConnections == 100)
        #expect(configuration.http.rateLimit == .init(requestsPerSecond: 0.5, burst: 10))
    }

    @Test func badValuesAreLocatedErrors() throws {
        let yaml = """
            http:
              idle_timeout: 2h
              body_timeout: forever
              max_connections: 0
              rate_limit:
                requests_per_second: "fast"
                burst: 1e99
                window: 1
              keepalive: true

            """
        do {
            _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml")
            Issue.record("expected errors")
        } catch {
            let messages = error.errors.map(\.description)
            #expect(messages.count == 7, "\(messages)")
            for prefix in [
                "config/herald.yaml:2:17: http.idle_timeout: must be from 100ms to 1h",
                "config/herald.yaml:3:17: http.body_timeout: must be a duration",
                "config/herald.yaml:4:20: http.max_connections: must be from 1 to 1000000",
                "config/herald.yaml:6:26: http.rate_limit.requests_per_second: must be a number",
                "config/herald.yaml:7:12: http.rate_limit.burst: must be a whole number",
                "config/herald.yaml:8:5: http.rate_limit.window: unknown key",
                "config/herald.yaml:9:3: http.keepalive: unknown key",
            ] {
                #expect(messages.contains { $0.hasPrefix(prefix) }, "no '\(prefix)' in \(messages)")
            }
        }
    }

    /// A duration far beyond any use would overflow the integer nanoseconds it becomes.
    @Test func durationsHaveAnUpperBoundEverywhere() throws {
        for yaml in ["jobs:\n  lease: 1e300\n", "jobs:\n  lease: 999999999999h\n"] {
            #expect(throws: ConfigFailure.self, "\(yaml)") { try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml") }
        }
        // The largest lease the jobs section allows (one day) still parses to the exact value.
        let longest = try ServerConfiguration.parse(yaml: "jobs:\n  lease: 86400\n", file: "config/herald.yaml")
        #expect(longest.jobs.lease == 86_400)
    }
}
