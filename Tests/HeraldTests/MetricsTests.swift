import Foundation
import Herald
@_spi(Testing) import HeraldCore
import MetricsPlugin
import MetricsTestKit
import Testing

@Suite("metrics plugin")
struct MetricsTests {
    @Test("counts every attempt by tenant, topic, push type, status and reason, and times it")
    func counts() async throws {
        let metrics = TestMetrics()
        let transport = ScriptedTransport([
            .respond(status: 200),
            .respond(status: 410, reason: .unregistered, timestamp: Date(timeIntervalSince1970: 1_700_000_000)),
            .respond(status: 503, reason: .serviceUnavailable), .respond(status: 200),
        ])
        let router = try Fixtures.router(
            transports: ScriptedTransports { _ in transport }, registry: .standard(metricsFactory: metrics))
        await router.install([Fixtures.tenant("m", plugins: [Fixtures.plugin("metrics")])])
        let id = Fixtures.tenantID("m")
        _ = try await router.send(tenant: id, notification: Fixtures.note())
        _ = try await router.send(tenant: id, notification: Fixtures.note())
        _ = try await router.send(
            tenant: id, notification: Fixtures.note(topic: "com.example.app.voip", pushType: .voip))
        await #expect(throws: PushError.self) {
            _ = try await router.send(tenant: id, notification: Fixtures.note(topic: "com.elsewhere"))
        }

        func count(_ topic: String, _ type: String, _ status: String, _ reason: String) -> Int64 {
            metrics.counterTotal(
                label: "herald_notifications_total",
                dimensions: [
                    ("tenant", "m"), ("kind", "device"), ("topic", topic), ("push_type", type), ("status", status), ("reason", reason),
                ])
        }
        #expect(count("com.example.app", "alert", "200", "none") == 1)
        #expect(count("com.example.app", "alert", "410", "Unregistered") == 1)
        #expect(count("com.example.app.voip", "voip", "503", "ServiceUnavailable") == 1)
        #expect(count("com.example.app.voip", "voip", "200", "none") == 1)
        // Refused by policy before the pipeline: not counted by the plugin.
        #expect(metrics.counterTotal(label: "herald_notifications_total") == 4)
        let timers = metrics.timers(label: "herald_send_duration")
        #expect(timers.reduce(0) { $0 + $1.values.count } == 4)
    }

    @Test("failures without an answer count under status 'error' with Herald's code; unknown topics read 'other'")
    func failures() async throws {
        let metrics = TestMetrics()
        let transport = ScriptedTransport([.fail(.transport("connection reset", surelyNotProcessed: false))])
        let router = try Fixtures.router(
            transports: ScriptedTransports { _ in transport }, registry: .standard(metricsFactory: metrics))
        await router.install([Fixtures.tenant("m", plugins: [Fixtures.plugin("metrics")])])
        await #expect(throws: PushError.self) {
            _ = try await router.send(tenant: Fixtures.tenantID("m"), notification: Fixtures.note())
        }
        #expect(
            metrics.counterTotal(
                label: "herald_notifications_total",
                dimensions: [
                    ("tenant", "m"), ("kind", "device"), ("topic", "com.example.app"), ("push_type", "alert"), ("status", "error"),
                    ("reason", "TransportFailed"),
                ]) == 1)

        let middleware = MetricsMiddleware(
            factory: metrics, tenant: Fixtures.tenantID("m"), topics: ["com.example.app"], clock: ManualPushClock())
        // A topic the tenant does not list (one its configuration gained after the metrics were made).
        let stray = AdmittedNotification(unchecked: Fixtures.note(topic: "com.unlisted"), id: Fixtures.apnsID(), environment: .production)
        let answering299 = SendPipeline([middleware]) { n, _, completion in
            completion(.success(APNsResponse(status: 299, apnsID: n.id)))
        }
        _ = try await answering299.send(
            stray, context: PushContext(tenant: Fixtures.tenantID("m"), environment: .production, deadline: .now + .seconds(1)))
        #expect(
            metrics.counterTotal(
                label: "herald_notifications_total",
                dimensions: [
                    ("tenant", "m"), ("kind", "device"), ("topic", "other"), ("push_type", "alert"), ("status", "other"),
                    ("reason", "none"),
                ]) == 1)
    }

    @Test("a broadcast counts under kind broadcast, its topic the app's bundle ID")
    func broadcastsHaveTheirKind() async throws {
        let metrics = TestMetrics()
        let middleware = MetricsMiddleware(
            factory: metrics, tenant: Fixtures.tenantID("m"), topics: ["com.example.app"], clock: ManualPushClock())
        let broadcast = HeraldCore.Notification(
            channel: try ChannelID("dHN0LXNyY2gtY2hubA=="), topic: "com.example.app",
            payload: Array(#"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#.utf8))
        let admitted = AdmittedNotification(unchecked: broadcast, id: Fixtures.apnsID(), environment: .production)
        let answering200 = SendPipeline([middleware]) { n, _, completion in
            completion(.success(APNsResponse(status: 200, apnsID: n.id)))
        }
        _ = try await answering200.send(
            admitted, context: PushContext(tenant: Fixtures.tenantID("m"), environment: .production, deadline: .now + .seconds(1)))
        #expect(
            metrics.counterTotal(
                label: "herald_notifications_total",
                dimensions: [
                    ("tenant", "m"), ("kind", "broadcast"), ("topic", "com.example.app"), ("push_type", "liveactivity"),
                    ("status", "200"), ("reason", "none"),
                ]) == 1)
        #expect(metrics.timers(label: "herald_send_duration").first?.dimensions.contains { $0 == ("kind", "broadcast") } == true)
    }
}
