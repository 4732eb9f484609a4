import Foundation
import HeraldConfig
import HeraldCore
import Testing

@Suite("The delivery: section of tenant files")
struct DeliverySectionTests {
    @Test func withoutTheSectionTheDefaultsApply() throws {
        let fixture = try TenantFixture()
        let tenant = try TenantLoader(environment: [:]).parseTenant(
            yaml: TenantFixture.tokenTenant, file: fixture.path("acme.yaml"))
        #expect(tenant.delivery == DeliveryPolicy())
        #expect(tenant.delivery.guarantee == .atLeastOnce)
        #expect(tenant.delivery.maxRetryDuration == .seconds(3600))
        #expect(tenant.delivery.circuit.failureThreshold == 20)
    }

    @Test func everyKeyIsRead() throws {
        let fixture = try TenantFixture()
        let tenant = try TenantLoader(environment: [:]).parseTenant(
            yaml: TenantFixture.tokenTenant + """
                delivery:
                  guarantee: at-most-once
                  max_retry_duration: 10m
                  initial_backoff: 250ms
                  max_backoff: 30s
                  jitter: 0
                  circuit_failure_threshold: 5
                  circuit_probe_interval: 2s
                  circuit_max_probe_interval: 1m

                """, file: fixture.path("acme.yaml"))
        let delivery = tenant.delivery
        #expect(delivery.guarantee == .atMostOnce)
        #expect(delivery.maxRetryDuration == .seconds(600))
        #expect(delivery.initialBackoff == .milliseconds(250))
        #expect(delivery.maxBackoff == .seconds(30))
        #expect(delivery.jitter == 0)
        #expect(delivery.circuit == CircuitPolicy(failureThreshold: 5, probeInterval: .seconds(2), maxProbeInterval: .seconds(60)))
    }

    @Test(arguments: [
        ("  guarantee: exactly-once\n", 9, "delivery.guarantee", "must be at-least-once or at-most-once, not 'exactly-once'"),
        ("  max_retry_duration: forever\n", 9, "delivery.max_retry_duration", "must be a duration"),
        ("  max_retry_duration: 30d\n", 9, "delivery.max_retry_duration", "must be at most 168h, not 720h"),
        ("  max_retry_duration: 8000h\n", 9, "delivery.max_retry_duration", "must be at most 168h"),
        ("  jitter: 1.5\n", 9, "delivery.jitter", "must be from 0 to 1, not 1.5"),
        ("  jitter: lots\n", 9, "delivery.jitter", "must be a number from 0 to 1"),
        ("  circuit_failure_threshold: 0\n", 9, "delivery.circuit_failure_threshold", "must be from 1 to 1000000"),
        ("  initial_backoff: 10s\n  max_backoff: 1s\n", 10, "delivery.max_backoff", "must be at least initial_backoff (10s)"),
        ("  circuit_probe_interval: 2m\n", 9, "delivery.circuit_probe_interval",
         "circuit_max_probe_interval (1m) must be at least circuit_probe_interval (2m)"),
        ("  retries: 3\n", 9, "delivery.retries", "unknown key"),
    ])
    func badValuesNameTheLineAndField(_ body: String, _ line: Int, _ field: String, _ fragment: String) throws {
        let fixture = try TenantFixture()
        let file = try fixture.write("acme.yaml", TenantFixture.tokenTenant + "delivery:\n" + body)
        let failure = try #require(TenantLoader(environment: [:]).failure(of: file), "accepted: \(body)")
        let error = try #require(
            failure.errors.first { $0.field == field && $0.message.contains(fragment) },
            "no error for \(field) with '\(fragment)': \(failure.errors)")
        #expect(error.location.file == file)
        #expect(error.location.line == line, "\(error)")
    }
}
