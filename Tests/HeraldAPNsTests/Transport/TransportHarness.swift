import APNsSandbox
import Crypto
import Foundation
@_spi(Testing) import HeraldCore
import HeraldTestSupport
import Logging
import NIOCore
import Synchronization
import Testing

@testable import HeraldAPNs

/// A token tenant's key, made fresh for each test.
struct TestTokenKey: Sendable {
    var tenant: String
    var teamID: String
    var keyID: String
    /// The topics the sandbox lets this key push to.
    var topics: [String]
    var key = P256.Signing.PrivateKey()

    var sandboxKey: SandboxTokenKey {
        SandboxTokenKey(teamID: teamID, keyID: keyID, publicKey: key.publicKey, topics: topics)
    }

    static let alpha = TestTokenKey(tenant: "alpha", teamID: "TEAMALPHA1", keyID: "KEYALPHA01", topics: ["com.example.alpha", "com.example.alpha.voip"])
    static let beta = TestTokenKey(tenant: "beta", teamID: "TEAMBETA01", keyID: "KEYBETA001", topics: ["com.example.beta"])
}

/// An in-process APNsSandbox with a fresh CA, and tenants pointed at it.
struct SandboxHarness: Sendable {
    let sandbox: APNsSandbox
    let ca: SandboxCertificateAuthority
    let clock: any WallClock

    var endpoint: APNsEndpoint { APNsEndpoint(host: "127.0.0.1", port: sandbox.port) }

    static var quietLogger: Logger {
        var logger = Logger(label: "herald.test")
        logger.logLevel = .critical
        return logger
    }

    static func start(
        keys: [TestTokenKey], clock: any WallClock = SystemWallClock(), configure: (inout SandboxConfiguration) -> Void = { _ in }
    ) async throws -> SandboxHarness {
        let ca = try TestCertificateAuthority.shared()
        var configuration = SandboxConfiguration(certificateAuthority: ca)
        configuration.tokenKeys = keys.map(\.sandboxKey)
        configuration.clock = clock
        configure(&configuration)
        let sandbox = try await APNsSandbox.start(configuration, logger: quietLogger)
        return SandboxHarness(sandbox: sandbox, ca: ca, clock: clock)
    }

    var endpoints: EndpointsConfiguration {
        EndpointsConfiguration(
            production: endpoint, development: endpoint, defaultEnvironment: .development,
            trustRootsPEM: Array(sandbox.trustRootsPEM.utf8), trustRootsOrigin: "sandbox CA")
    }

    /// A token tenant; `topics` defaults to the key's.
    func tokenTenant(_ key: TestTokenKey, topics: [String]? = nil, pool: PoolConfiguration = PoolConfiguration()) throws -> TenantConfiguration {
        TenantConfiguration(
            id: try TenantID(key.tenant), teamID: key.teamID,
            auth: .token(TokenAuthConfiguration(keyID: key.keyID, privateKey: Secret(bytes: Array(key.key.pemRepresentation.utf8), origin: "test key"))),
            topics: topics ?? key.topics, endpoints: endpoints, pool: pool, sourceFile: "\(key.tenant).yaml")
    }

    /// A certificate tenant whose client certificate (from the sandbox CA) lists `topics`.
    func certificateTenant(id: String, teamID: String, topics: [String]) throws -> TenantConfiguration {
        let issued = try ca.issueClientCertificate(
            commonName: "Apple Push Services: \(topics[0])", topics: topics, notBefore: Date().addingTimeInterval(-3600),
            notAfter: Date().addingTimeInterval(86_400))
        let identity = CertificateAuthConfiguration.Identity.pem(
            certificateChain: Array(issued.certificatePEM.utf8), privateKey: Secret(bytes: Array(issued.privateKeyPEM.utf8), origin: "test key"))
        return TenantConfiguration(
            id: try TenantID(id), teamID: teamID, auth: .certificate(CertificateAuthConfiguration(identity: identity, passphrase: nil, origin: "test cert")),
            topics: topics, endpoints: endpoints, sourceFile: "\(id).yaml")
    }

    func transport(
        for tenant: TenantConfiguration, clock: (any WallClock)? = nil, configure: (inout TransportConfiguration) -> Void = { _ in }
    ) throws -> TenantTransport {
        var configuration = TransportConfiguration(pool: tenant.pool)
        configure(&configuration)
        let credentials = try CredentialProviders.make(for: tenant, clock: clock ?? self.clock)
        return TenantTransport(tenant: tenant, credentials: credentials, configuration: configuration, logger: Self.quietLogger)
    }

    /// The sandbox saw no PRIORITY frame, no stream above its limit, no HPACK deviation.
    func expectCleanAudit(sourceLocation: Testing.SourceLocation = #_sourceLocation) {
        let audit = sandbox.audit
        #expect(audit.isClean, "sandbox audit: \(audit)", sourceLocation: sourceLocation)
    }

    func shutdown() async {
        try? await sandbox.shutdown()
    }
}

/// Runs `body` with a started sandbox, and always shuts it down.
func withSandbox<T>(
    keys: [TestTokenKey] = [.alpha], clock: any WallClock = SystemWallClock(),
    configure: (inout SandboxConfiguration) -> Void = { _ in }, _ body: (SandboxHarness) async throws -> T
) async throws -> T {
    let harness = try await SandboxHarness.start(keys: keys, clock: clock, configure: configure)
    do {
        let result = try await body(harness)
        await harness.shutdown()
        return result
    } catch {
        await harness.shutdown()
        throw error
    }
}

enum Notes {
    static func deviceToken(_ seed: Int? = nil) -> DeviceToken {
        if let seed {
            var generator = SplitMix64(seed: UInt64(seed))
            return DeviceToken(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        }
        return DeviceToken(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) })
    }

    static let alertPayload = Array(#"{"aps":{"alert":"Hello from Herald"}}"#.utf8)

    /// A notification with an apns-id of its own, as the router hands one to the transport.
    static func note(
        topic: String?, token: DeviceToken = deviceToken(), pushType: PushType = .alert, priority: Priority? = nil,
        collapseID: String? = nil, payload: [UInt8] = alertPayload
    ) -> HeraldCore.Notification {
        HeraldCore.Notification(
            deviceToken: token, topic: topic, pushType: pushType, priority: priority, collapseID: collapseID,
            id: nextID(), payload: payload)
    }

    static func nextID() -> NotificationID { ids.withLock { $0.nextID() } }

    private static let ids = Mutex(NotificationIDGenerator())
}

/// The outcome of one send in a load.
enum Outcome: Sendable {
    case response(APNsResponse)
    case failure(APNsTransportError)
    case other(String)

    var status: Int? {
        if case .response(let response) = self { return response.status }
        return nil
    }
}

/// Sends `notes` with `concurrency` workers; `after` runs after each completion with the
/// number completed so far (to inject faults mid-load). Returns the outcomes in `notes` order.
func sendLoad(
    _ notes: [HeraldCore.Notification], through transport: TenantTransport, concurrency: Int,
    after: @escaping @Sendable (Int) -> Void = { _ in }
) async -> [Outcome] {
    let counters = LoadCounters()
    return await withTaskGroup(of: [(Int, Outcome)].self) { group in
        for _ in 0..<max(1, concurrency) {
            group.addTask {
                var mine: [(Int, Outcome)] = []
                while true {
                    let index = counters.next.add(1, ordering: .relaxed).oldValue
                    guard index < notes.count else { break }
                    // The callback API: its outcomes keep the transport's own error kinds.
                    let outcome: Outcome = await withCheckedContinuation { continuation in
                        transport.send(notes[index]) { result in
                            switch result {
                            case .success(let response): continuation.resume(returning: .response(response))
                            case .failure(let error): continuation.resume(returning: .failure(error))
                            }
                        }
                    }
                    mine.append((index, outcome))
                    after(counters.completed.add(1, ordering: .relaxed).newValue)
                }
                return mine
            }
        }
        var outcomes = [Outcome?](repeating: nil, count: notes.count)
        for await part in group {
            for (index, outcome) in part { outcomes[index] = outcome }
        }
        return outcomes.map { $0 ?? .other("missing") }
    }
}

/// Many notes for `topic`, each with its own apns-id (so the sandbox record can be matched).
func makeNotes(_ count: Int, topic: String) -> [HeraldCore.Notification] {
    (0..<count).map { _ in Notes.note(topic: topic) }
}

/// Waits for `condition`, polling every 5 ms, for up to about 30 s (a loaded CI machine is slow;
/// a condition that holds returns at once).
func waitUntil(_ condition: () -> Bool) async {
    for _ in 0..<6000 {
        if condition() { return }
        try? await Task.sleep(for: .milliseconds(5))
    }
}

final class LoadCounters: Sendable {
    let next = Atomic<Int>(0)
    let completed = Atomic<Int>(0)
}

/// The transport takes only admitted notifications. Its tests put notes on the wire as they
/// are, without the tenant's checks (some are notes APNs must refuse):
/// ``HeraldCore/AdmittedNotification/init(unchecked:id:environment:)``.
extension TenantTransport {
    func unchecked(_ notification: HeraldCore.Notification, environment: APNsEnvironment? = nil) -> AdmittedNotification {
        AdmittedNotification(
            unchecked: notification, id: notification.id ?? Notes.nextID(),
            environment: environment ?? tenant.endpoints.defaultEnvironment)
    }

    func send(_ notification: HeraldCore.Notification, environment: APNsEnvironment? = nil, deadline: NIODeadline? = nil) async throws
        -> APNsResponse
    {
        try await send(unchecked(notification, environment: environment), deadline: deadline)
    }

    func send(_ notification: HeraldCore.Notification, environment: APNsEnvironment? = nil, completion: @escaping Completion) {
        send(unchecked(notification, environment: environment), completion: completion)
    }
}
