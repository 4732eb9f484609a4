import Foundation
import Testing
import Herald
@_spi(Testing) import HeraldCore
import HeraldStore
import HeraldTestSupport
import Logging

enum Fixtures {
    static let token = try! DeviceToken(hex: "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
    static let otherToken = try! DeviceToken(hex: "11fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f1")

    static func tenantID(_ raw: String) -> TenantID { try! TenantID(raw) }

    /// A token-auth tenant with a dummy key (scripted transports never read it).
    static func tenant(
        _ id: String, topics: [String] = ["com.example.app", "com.example.app.voip"],
        plugins: [PluginConfiguration] = [],
        production: APNsEndpoint? = .production, development: APNsEndpoint? = .development,
        defaultEnvironment: APNsEnvironment = .production, file: String? = nil
    ) -> TenantConfiguration {
        TenantConfiguration(
            id: tenantID(id), teamID: "TEAM000001",
            auth: .token(
                TokenAuthConfiguration(keyID: "KEY0000001", privateKey: Secret(bytes: [1, 2, 3], origin: "test"))),
            topics: topics,
            endpoints: EndpointsConfiguration(
                production: production, development: development, defaultEnvironment: defaultEnvironment),
            plugins: plugins, sourceFile: file ?? "tenants/\(id).yaml")
    }

    static func plugin(
        _ name: String, _ options: JSONValue = .object([]), line: Int = 10, file: String = "tenants/t.yaml"
    ) -> PluginConfiguration {
        PluginConfiguration(name: name, options: options, location: SourceLocation(file: file, line: line, column: 5))
    }

    static func note(
        topic: String? = "com.example.app", pushType: PushType = .alert, token: DeviceToken = Fixtures.token
    ) -> HeraldCore.Notification {
        HeraldCore.Notification(
            deviceToken: token, topic: topic, pushType: pushType, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8))
    }

    /// A new apns-id, as the router would make one.
    static func apnsID() -> NotificationID {
        var ids = NotificationIDGenerator()
        return ids.nextID()
    }

    /// `note` admitted by a fixture tenant (``tenant(_:topics:plugins:production:development:defaultEnvironment:file:)``)
    /// with a new apns-id, as a tenant runtime admits a send.
    static func admitted(_ note: HeraldCore.Notification = note(), environment: APNsEnvironment = .production) -> AdmittedNotification {
        do {
            return try tenant("admitted").admit(note, id: note.id ?? apnsID(), environment: environment)
        } catch {
            Issue.record("the fixture note was not admitted: \(error)")
            return AdmittedNotification(unchecked: note, id: note.id ?? apnsID(), environment: environment)
        }
    }

    /// A fresh temporary directory, removed when the test process exits.
    static func temporaryDirectory(_ name: String = "herald-tests") -> String {
        try! ScratchDirectories.make(name)
    }

    static func store() throws -> SQLitePushStore {
        try SQLitePushStore(directory: temporaryDirectory("herald-store"))
    }

    static func router(
        transports: any TransportProvider = ScriptedTransports(), store: (any PushStore)? = nil,
        clock: any PushClock = ManualPushClock(),
        registry: PluginRegistry = .standard(), webhooks: any WebhookSender = RecordingWebhooks(),
        environment: [String: String] = [:]
    ) throws -> Router {
        var logger = Logger(label: "herald.tests")
        logger.logLevel = .critical
        return Router(
            configuration: RouterConfiguration(
                registry: registry, store: try store ?? Fixtures.store(), transports: transports, clock: clock,
                logger: logger,
                webhooks: webhooks, environment: environment))
    }
}

extension JSONValue {
    /// `["a": 1]`-style objects for tests.
    static func obj(_ members: KeyValuePairs<String, JSONValue>) -> JSONValue {
        .object(members.map { ($0.key, $0.value) })
    }
}
