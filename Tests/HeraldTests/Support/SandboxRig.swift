import APNsSandbox
import Crypto
import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Logging

/// An in-process APNsSandbox with a fresh CA and token key, and a router whose tenants send to
/// it through the real transport.
struct SandboxRig: Sendable {
    static let teamID = "TEAMRIG001"
    static let keyID = "KEYRIG0001"
    static let topics = ["com.example.rig", "com.example.rig.voip"]

    let sandbox: APNsSandbox
    let key: P256.Signing.PrivateKey
    let store: SQLitePushStore
    let router: Router

    static var quietLogger: Logger {
        var logger = Logger(label: "herald.tests")
        logger.logLevel = .critical
        return logger
    }

    static func start(
        clock: any PushClock = SystemPushClock(), webhooks: any WebhookSender = RecordingWebhooks(),
        metricsRegistry: PluginRegistry = .standard(), configure: (inout SandboxConfiguration) -> Void = { _ in }
    ) async throws -> SandboxRig {
        let key = P256.Signing.PrivateKey()
        var configuration = SandboxConfiguration(certificateAuthority: try TestCertificateAuthority.shared())
        configuration.tokenKeys = [
            SandboxTokenKey(teamID: teamID, keyID: keyID, publicKey: key.publicKey, topics: topics)
        ]
        configure(&configuration)
        let sandbox = try await APNsSandbox.start(configuration, logger: quietLogger)
        let store = try Fixtures.store()
        let router = Router(
            configuration: RouterConfiguration(
                registry: metricsRegistry, store: store, transports: APNsTransportProvider(), clock: clock,
                logger: quietLogger,
                webhooks: webhooks, environment: [:]))
        return SandboxRig(sandbox: sandbox, key: key, store: store, router: router)
    }

    func tenant(_ id: String, plugins: [PluginConfiguration] = [], file: String? = nil) throws -> TenantConfiguration {
        let endpoint = APNsEndpoint(host: "127.0.0.1", port: sandbox.port)
        return TenantConfiguration(
            id: try TenantID(id), teamID: Self.teamID,
            auth: .token(
                TokenAuthConfiguration(
                    keyID: Self.keyID, privateKey: Secret(bytes: Array(key.pemRepresentation.utf8), origin: "test key"))
            ),
            topics: Self.topics,
            endpoints: EndpointsConfiguration(
                production: endpoint, development: endpoint, defaultEnvironment: .development,
                trustRootsPEM: Array(sandbox.trustRootsPEM.utf8), trustRootsOrigin: "sandbox CA"),
            plugins: plugins, sourceFile: file ?? "tenants/\(id).yaml")
    }

    func note(_ seed: Int, topic: String = SandboxRig.topics[0]) -> HeraldCore.Notification {
        HeraldCore.Notification(
            deviceToken: Self.deviceToken(seed), topic: topic, payload: Array(#"{"aps":{"alert":"rig"}}"#.utf8))
    }

    /// The device token of ``note(_:topic:)`` for `seed` (a sandbox's devices can be set up with
    /// it before the rig starts).
    static func deviceToken(_ seed: Int) -> DeviceToken {
        var bytes = [UInt8](repeating: 0, count: 32)
        var value = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 | 1
        for index in bytes.indices {
            value ^= value << 13
            value ^= value >> 7
            value ^= value << 17
            bytes[index] = UInt8(truncatingIfNeeded: value)
        }
        return DeviceToken(bytes: bytes)
    }

    func shutdown() async {
        await router.shutdown()
        try? await sandbox.shutdown()
    }
}

/// Runs `body` with a started rig and always shuts it down.
func withSandboxRig<T>(
    clock: any PushClock = SystemPushClock(), webhooks: any WebhookSender = RecordingWebhooks(),
    registry: PluginRegistry = .standard(),
    configure: (inout SandboxConfiguration) -> Void = { _ in }, _ body: (SandboxRig) async throws -> T
) async throws -> T {
    let rig = try await SandboxRig.start(
        clock: clock, webhooks: webhooks, metricsRegistry: registry, configure: configure)
    do {
        let result = try await body(rig)
        await rig.shutdown()
        return result
    } catch {
        await rig.shutdown()
        throw error
    }
}
