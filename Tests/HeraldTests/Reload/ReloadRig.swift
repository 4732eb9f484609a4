import APNsSandbox
import Crypto
import Foundation
import Herald
import HeraldCore
import HeraldStore
import HeraldTestSupport
import Logging
import Metrics
import Synchronization

/// A tenants directory on disk, an in-process APNsSandbox that knows several token keys and
/// trusts the rig's CA, a router with real transports, and a ``ReloadCoordinator`` over them.
struct ReloadRig: Sendable {
    static let teamID = "RLDTEAM001"
    static let topics = ["com.example.reload", "com.example.reload.voip"]
    static let certTopics = ["com.example.reloadcert", "com.example.reloadcert.voip"]
    /// A topic only the second certificate allows (proves which certificate a connection used).
    static let secondCertOnlyTopic = "com.example.reloadcert2"

    let sandbox: APNsSandbox
    let ca: SandboxCertificateAuthority
    let root: String
    let directory: String
    let keys: [String: P256.Signing.PrivateKey]
    let store: SQLitePushStore
    let router: Router
    let coordinator: ReloadCoordinator

    static var quietLogger: Logger {
        var logger = Logger(label: "herald.tests.reload")
        logger.logLevel = .critical
        return logger
    }

    static func start(
        keyIDs: [String] = ["KEYA000001", "KEYB000001"], metrics: (any MetricsFactory)? = nil,
        configure: (inout SandboxConfiguration) -> Void = { _ in }
    ) async throws -> ReloadRig {
        let ca = try TestCertificateAuthority.shared()
        var keys: [String: P256.Signing.PrivateKey] = [:]
        for id in keyIDs { keys[id] = P256.Signing.PrivateKey() }
        var configuration = SandboxConfiguration(certificateAuthority: ca)
        configuration.tokenKeys = keyIDs.map { id in
            SandboxTokenKey(teamID: teamID, keyID: id, publicKey: keys[id]!.publicKey, topics: topics)
        }
        configure(&configuration)
        let sandbox = try await APNsSandbox.start(configuration, logger: quietLogger)

        let root = Fixtures.temporaryDirectory("herald-reload")
        let directory = root + "/tenants"
        try FileManager.default.createDirectory(atPath: directory + "/keys", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/certs", withIntermediateDirectories: true)
        try Data(sandbox.trustRootsPEM.utf8).write(to: URL(fileURLWithPath: root + "/ca.pem"))

        let store = try Fixtures.store()
        let router = Router(
            configuration: RouterConfiguration(
                store: store, transports: APNsTransportProvider(), logger: quietLogger, webhooks: RecordingWebhooks(),
                environment: [:]))
        var reload = ReloadConfiguration(tenantsDirectory: directory)
        reload.metricsFactory = metrics
        let coordinator = ReloadCoordinator(router: router, configuration: reload)
        return ReloadRig(
            sandbox: sandbox, ca: ca, root: root, directory: directory, keys: keys, store: store, router: router,
            coordinator: coordinator)
    }

    // MARK: Tenant files

    func path(_ relative: String) -> String { directory + "/" + relative }

    func write(_ text: String, to relative: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path(relative)), options: .atomic)
    }

    func read(_ relative: String) throws -> String {
        try String(contentsOfFile: path(relative), encoding: .utf8)
    }

    func endpointsYAML() -> String {
        """
        endpoints:
          development: https://127.0.0.1:\(sandbox.port)
          production: https://127.0.0.1:\(sandbox.port)
          default: development
          ca_file: ../ca.pem
        """
    }

    /// Writes `keys/AuthKey_<keyID>.p8` and `<id>.yaml` for a token tenant.
    func writeTokenTenant(
        _ id: String, keyID: String = "KEYA000001", connections: Int = 4, extra: String = ""
    ) throws {
        try write(keys[keyID]!.pemRepresentation + "\n", to: "keys/AuthKey_\(keyID).p8")
        try write(
            """
            id: \(id)
            team_id: \(Self.teamID)
            auth:
              token:
                key_id: \(keyID)
                key_file: keys/AuthKey_\(keyID).p8
            topics: [\(Self.topics.joined(separator: ", "))]
            \(endpointsYAML())
            pool:
              connections: \(connections)
            \(extra)
            """, to: "\(id).yaml")
    }

    /// A client certificate from the rig's CA for `topics`.
    func issueCertificate(topics: [String] = ReloadRig.certTopics) throws -> (
        certificatePEM: String, privateKeyPEM: String
    ) {
        try ca.issueClientCertificate(
            commonName: "Apple Push Services: \(topics[0])", topics: topics,
            notBefore: Date().addingTimeInterval(-3600),
            notAfter: Date().addingTimeInterval(86_400 * 30))
    }

    /// Writes `certs/<id>.pem`, `certs/<id>.key` and `<id>.yaml` for a certificate tenant.
    func writeCertificateTenant(
        _ id: String, certificate: (certificatePEM: String, privateKeyPEM: String),
        topics: [String] = ReloadRig.certTopics,
        connections: Int = 4
    ) throws {
        try write(certificate.certificatePEM, to: "certs/\(id).pem")
        try write(certificate.privateKeyPEM + "\n", to: "certs/\(id).key")
        try write(
            """
            id: \(id)
            team_id: \(Self.teamID)
            auth:
              certificate:
                cert_file: certs/\(id).pem
                key_file: certs/\(id).key
            topics: [\(topics.joined(separator: ", "))]
            \(endpointsYAML())
            pool:
              connections: \(connections)
            """, to: "\(id).yaml")
    }

    // MARK: Sending

    func note(_ seed: Int, topic: String = ReloadRig.topics[0]) -> HeraldCore.Notification {
        var bytes = [UInt8](repeating: 0, count: 32)
        var value = UInt64(truncatingIfNeeded: seed) &* 0x9E37_79B9_7F4A_7C15 | 1
        for index in bytes.indices {
            value ^= value << 13
            value ^= value >> 7
            value ^= value << 17
            bytes[index] = UInt8(truncatingIfNeeded: value)
        }
        var note = HeraldCore.Notification(
            deviceToken: DeviceToken(bytes: bytes), topic: topic, payload: Array(#"{"aps":{"alert":"reload"}}"#.utf8))
        note.id = Fixtures.apnsID()
        return note
    }

    func shutdown() async {
        await router.shutdown()
        try? await sandbox.shutdown()
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Requests the sandbox received, per key ID ("" for certificate connections).
    func requests(keyID: String?) -> [SandboxRecordedRequest] {
        sandbox.requests.filter { $0.keyID == keyID }
    }

    /// Waits (bounded) until at least `count` of the sandbox's connections have closed.
    /// - Returns: false when that did not happen within thirty seconds (a loaded CI machine).
    func waitForClosedConnections(atLeast count: Int) async -> Bool {
        for _ in 0..<3000 {
            if sandbox.connectionCount - sandbox.activeConnections >= count { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }
}

/// Polls `condition` every few milliseconds until it holds or `timeout` passes.
/// - Returns: whether it held.
func eventually(
    timeout: Duration = .seconds(60), _ condition: @Sendable () async throws -> Bool
) async rethrows -> Bool {
    let clock = ContinuousClock()
    let end = clock.now.advanced(by: timeout)
    while clock.now < end {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try await condition()
}

/// Runs `body` with a started rig and always shuts it down.
func withReloadRig<T>(
    keyIDs: [String] = ["KEYA000001", "KEYB000001"], metrics: (any MetricsFactory)? = nil,
    configure: (inout SandboxConfiguration) -> Void = { _ in }, _ body: (ReloadRig) async throws -> T
) async throws -> T {
    let rig = try await ReloadRig.start(keyIDs: keyIDs, metrics: metrics, configure: configure)
    do {
        let result = try await body(rig)
        await rig.shutdown()
        return result
    } catch {
        await rig.shutdown()
        throw error
    }
}

/// A step of a load run: `body` is awaited once `at` sends have completed, while the workers
/// keep sending (the place for a rotation under load).
struct LoadMilestone: Sendable {
    var at: Int
    var body: @Sendable () async throws -> Void
}

/// Sends `count` notifications for a tenant from `concurrency` workers and keeps every outcome.
/// Milestones run one after another in their own task while the workers send.
final class LoadRun: Sendable {
    struct Outcome: Sendable {
        /// The notification's number in the run (the order workers took them in).
        var index: Int
        var apnsID: String
        var result: Result<PushResult, PushError>
    }

    let outcomes = Mutex<[Outcome]>([])
    let completed = Atomic<Int>(0)
    private let next = Atomic<Int>(0)
    private let holdFrom = Atomic<Int>(Int.max)

    /// Notifications numbered below this were taken by a worker; those at or above it start later.
    var issued: Int { next.load(ordering: .acquiring) }

    /// Workers wait before sending notification `index` or later, until ``release()``.
    func hold(from index: Int) { holdFrom.store(index, ordering: .releasing) }

    func release() { holdFrom.store(Int.max, ordering: .releasing) }

    func run(
        rig: ReloadRig, tenant: TenantID, count: Int, concurrency: Int, seedBase: Int = 0,
        topic: String = ReloadRig.topics[0],
        milestone at: Int? = nil, _ milestone: @escaping @Sendable () async throws -> Void = {}
    ) async throws {
        try await run(
            rig: rig, tenant: tenant, count: count, concurrency: concurrency, seedBase: seedBase, topic: topic,
            milestones: at.map { [LoadMilestone(at: $0, body: milestone)] } ?? [])
    }

    func run(
        rig: ReloadRig, tenant: TenantID, count: Int, concurrency: Int, seedBase: Int = 0,
        topic: String = ReloadRig.topics[0], milestones: [LoadMilestone]
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for milestone in milestones {
                    while self.completed.load(ordering: .acquiring) < milestone.at {
                        try await Task.sleep(for: .milliseconds(1))
                    }
                    try await milestone.body()
                }
            }
            for _ in 0..<concurrency {
                group.addTask {
                    while true {
                        let index = self.next.add(1, ordering: .relaxed).oldValue
                        guard index < count else { return }
                        while index >= self.holdFrom.load(ordering: .acquiring) {
                            try await Task.sleep(for: .milliseconds(2))
                        }
                        let note = rig.note(seedBase + index, topic: topic)
                        let result: Result<PushResult, PushError>
                        do {
                            result = .success(try await rig.router.send(tenant: tenant, notification: note))
                        } catch let error as PushError {
                            result = .failure(error)
                        }
                        self.outcomes.withLock {
                            $0.append(Outcome(index: index, apnsID: note.id!.rawValue, result: result))
                        }
                        self.completed.add(1, ordering: .releasing)
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// How many outcomes are not a 200 from APNs, and a short description of the first few.
    var undelivered: (count: Int, sample: String) {
        let all = notDelivered
        let sample = all.prefix(3).map { outcome -> String in
            switch outcome.result {
            case .success(let result): return "\(outcome.apnsID): \(result.status) \(result.reason?.wireValue ?? "")"
            case .failure(let error): return "\(outcome.apnsID): \(error)"
            }
        }
        return (all.count, sample.joined(separator: "; "))
    }

    /// Outcomes that are not a 200 from APNs.
    var notDelivered: [Outcome] {
        outcomes.withLock { all in
            all.filter { outcome in
                if case .success(let result) = outcome.result { return result.status != 200 }
                return true
            }
        }
    }
}
