import Crypto
import Foundation
import Herald
import HeraldCore
import Testing

@Suite("Plugin configuration errors")
struct PluginConfigTests {
    @Test("an unknown plugin names the file, line, entry and the known plugins")
    func unknownPlugin() async throws {
        let router = try Fixtures.router()
        let report = await router.install([
            Fixtures.tenant(
                "broken",
                plugins: [
                    Fixtures.plugin("metrics"), Fixtures.plugin("rate-limitt", line: 12, file: "tenants/broken.yaml"),
                ]),
            Fixtures.tenant("fine", plugins: [Fixtures.plugin("metrics")]),
        ])
        #expect(report.loaded == [Fixtures.tenantID("fine")])
        #expect(
            report.failures.map(\.message) == [
                "tenants/broken.yaml:12:5: plugins[1]: plugin 'rate-limitt': unknown plugin (known: feedback, metrics, rate-limit, retry)"
            ])
        #expect(router.tenantIDs == [Fixtures.tenantID("fine")])
        #expect(try await router.send(tenant: Fixtures.tenantID("fine"), notification: Fixtures.note()).isSuccess)
        await #expect(throws: PushError.unknownTenant("broken")) {
            _ = try await router.send(tenant: Fixtures.tenantID("broken"), notification: Fixtures.note())
        }
    }

    @Test(
        "bad options name the option and the rule",
        arguments: [
            (
                JSONValue.obj(["per_second": .int(0)]),
                "tenants/t.yaml:10:5: plugins[0].options.per_second: plugin 'rate-limit': must be greater than 0, got 0"
            ),
            (
                .obj(["per_second": .int(5), "bursts": .int(3)]),
                "tenants/t.yaml:10:5: plugins[0].options.bursts: plugin 'rate-limit': unknown option (known: burst, max_wait_ms, per_second, per_topic)"
            ),
            (.obj([:]), "tenants/t.yaml:10:5: plugins[0].options.per_second: plugin 'rate-limit': is required"),
        ])
    func badOptions(options: JSONValue, message: String) async throws {
        let router = try Fixtures.router()
        let report = await router.install([
            Fixtures.tenant("t", plugins: [Fixtures.plugin("rate-limit", options)]), Fixtures.tenant("u"),
        ])
        #expect(report.failures.map(\.message) == [message])
        #expect(report.loaded == [Fixtures.tenantID("u")])
    }

    @Test("a plugin listed twice is refused")
    func duplicate() async throws {
        let router = try Fixtures.router()
        let report = await router.install([
            Fixtures.tenant("t", plugins: [Fixtures.plugin("metrics", line: 8), Fixtures.plugin("metrics", line: 11)])
        ])
        #expect(
            report.failures.map(\.message) == [
                "tenants/t.yaml:11:5: plugins[1]: plugin 'metrics': is listed twice (first at line 8)"
            ])
    }

    @Test("from a tenants directory: the broken file is reported with its line, the other tenants load and send")
    func fromDirectory() async throws {
        let directory = Fixtures.temporaryDirectory("herald-tenants")
        try ("# test key\n" + P256.Signing.PrivateKey().pemRepresentation).write(
            toFile: directory + "/key.p8", atomically: true, encoding: .utf8)
        func tenant(_ id: String, plugins: String) -> String {
            """
            id: \(id)
            team_id: TEAM000001
            auth:
              token:
                key_id: KEY0000001
                key_file: key.p8
            topics: [com.example.app]
            plugins:
            \(plugins)
            """
        }
        try tenant(
            "good", plugins: "  - name: rate-limit\n    options: { per_second: 50, burst: 10 }\n  - name: metrics"
        )
        .write(toFile: directory + "/good.yaml", atomically: true, encoding: .utf8)
        try tenant("unknown", plugins: "  - name: metrics\n  - name: teleport\n    options: { speed: 9 }")
            .write(toFile: directory + "/unknown.yaml", atomically: true, encoding: .utf8)
        try tenant("badopts", plugins: "  - name: rate-limit\n    options: { per_second: fast }")
            .write(toFile: directory + "/badopts.yaml", atomically: true, encoding: .utf8)

        let router = try Fixtures.router()
        let report = try await router.load(directory: directory)
        #expect(report.loaded == [Fixtures.tenantID("good")])
        #expect(
            Set(report.failures.map(\.message)) == [
                "\(directory)/unknown.yaml:10:5: plugins[1]: plugin 'teleport': unknown plugin (known: feedback, metrics, rate-limit, retry)",
                "\(directory)/badopts.yaml:9:5: plugins[0].options.per_second: plugin 'rate-limit': must be a number, got \"fast\"",
            ])
        #expect(try await router.send(tenant: Fixtures.tenantID("good"), notification: Fixtures.note()).isSuccess)
    }
}
