import Foundation
import Herald
import HeraldCore
import Testing

/// The worked example of docs/plugins.md (`PluginGuideExample.swift`, the page's code verbatim):
/// it builds, registers, refuses a listed device on single sends and on sends made by callback,
/// lets other devices through, and names the option at fault in a bad tenant file.
@Suite("the plugin guide's example")
struct PluginGuideTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    @Test("docs/plugins.md shows the example's code exactly as it is compiled here")
    func pageMatchesCode() throws {
        let page = try String(contentsOf: Self.packageRoot.appendingPathComponent("docs/plugins.md"), encoding: .utf8)
        let code = try String(
            contentsOf: Self.packageRoot.appendingPathComponent("Tests/HeraldTests/PluginGuideExample.swift"), encoding: .utf8)
        #expect(page.contains("```swift\n" + code + "```\n"), "docs/plugins.md's example differs from PluginGuideExample.swift")
    }

    static func router(transport: DeviceScriptTransport) throws -> Router {
        var registry = PluginRegistry.standard()
        registry.register(DeviceBlocklistPluginFactory())
        return try Fixtures.router(transports: transport, registry: registry)
    }

    /// A device the blocklist does not name, which the scripted transport answers with 200.
    static let allowed = try! DeviceToken(hex: "33fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")

    static let blocklist = Fixtures.plugin("device-blocklist", .obj(["tokens": .array([.string(Fixtures.token.hex)])]))

    @Test("a listed device is refused before APNs on a single send; another device is sent")
    func singleSend() async throws {
        let transport = DeviceScriptTransport(.asyncOnly)
        let router = try Self.router(transport: transport)
        #expect(await router.install([Fixtures.tenant("bl", plugins: [Self.blocklist])]).failures.isEmpty)
        let tenant = Fixtures.tenantID("bl")

        let refusal = await #expect(throws: PushError.self) {
            try await router.send(tenant: tenant, notification: Fixtures.note())
        }
        #expect(refusal?.code == .tokenRefused && refusal?.field == "device_token" && refusal?.mayHaveReachedAPNs == false)
        let other = try await router.send(tenant: tenant, notification: Fixtures.note(token: Self.allowed))
        #expect(other.status == 200)
        #expect(transport.asyncSends == 1, "only the other device's send reached the transport")
    }

    @Test("a listed device is refused on a send made by callback, as a batch item is sent")
    func callbackSend() async throws {
        let transport = DeviceScriptTransport(.inline)
        let router = try Self.router(transport: transport)
        #expect(await router.install([Fixtures.tenant("bl", plugins: [Self.blocklist, Fixtures.plugin("metrics")])]).failures.isEmpty)
        let tenant = Fixtures.tenantID("bl")
        #expect(router.runtime(for: tenant)?.startsSendsByCallback == true)

        func start(_ token: DeviceToken) async -> Result<PushResult, any Error> {
            await withCheckedContinuation { done in
                router.startSend(tenant: tenant, notification: Fixtures.note(token: token), retries: false) {
                    done.resume(returning: $0)
                }
            }
        }
        let refused = await start(Fixtures.token)
        #expect(throws: PushError.self) { try refused.get() }
        if case .failure(let error as PushError) = refused { #expect(error.code == .tokenRefused) }
        let sent = await start(Self.allowed)
        #expect(try sent.get().status == 200)
        #expect(transport.callbackSends == 1 && transport.asyncSends == 0)
    }

    @Test("a bad token in the options fails the tenant's load, naming the option")
    func badOptions() async throws {
        let router = try Self.router(transport: DeviceScriptTransport(.asyncOnly))
        let bad = Fixtures.plugin(
            "device-blocklist", .obj(["tokens": .array([.string(Fixtures.token.hex), .string("not-hex")])]), line: 7)
        let missing = Fixtures.plugin("device-blocklist", .object([]), line: 9)
        let report = await router.install([
            Fixtures.tenant("bad", plugins: [bad]), Fixtures.tenant("empty", plugins: [missing]),
        ])
        let messages = report.failures.map(\.message)
        #expect(messages.count == 2)
        #expect(messages.first?.contains("plugins[0].options.tokens[1]: plugin 'device-blocklist'") == true)
        #expect(messages.last?.contains("plugins[0].options.tokens: plugin 'device-blocklist': is required") == true)
    }
}
