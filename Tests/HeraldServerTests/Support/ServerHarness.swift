import APNsSandbox
import Crypto
import Foundation
import HeraldConfig
import HeraldCore
import HeraldProcess
import HeraldServer
import HeraldStore
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Logging
import ServiceLifecycle
import Synchronization
import Testing

/// A test tenant: its id, topics, API key and token signing key.
struct TestTenant: Sendable {
    var id: String
    var teamID: String
    var keyID: String
    var topics: [String]
    var apiKey: String
    var key: P256.Signing.PrivateKey
    /// Extra YAML appended to the tenant file (plugins, …).
    var extraYAML: String = ""

    static func make(id: String, teamID: String, keyID: String, topics: [String], extraYAML: String = "") -> TestTenant {
        TestTenant(
            id: id, teamID: teamID, keyID: keyID, topics: topics, apiKey: APIKeys.generate(), key: P256.Signing.PrivateKey(),
            extraYAML: extraYAML)
    }
}

/// A world for end-to-end tests: an APNsSandbox in this process, a temporary directory with
/// tenant files pointing at it, and the configuration a Herald server needs to use them.
final class TestWorld: Sendable {
    let directory: String
    let sandbox: APNsSandbox
    let tenants: [TestTenant]
    let caPath: String

    /// Devices the sandbox reports 410 Unregistered (timestamp 2025-01-01).
    static let unregisteredSince = Date(timeIntervalSince1970: 1_735_689_600)

    static let acmePlugins = """
        plugins:
          - name: retry
            options: {max_attempts: 2, initial_backoff_ms: 5, max_backoff_ms: 20}
          - name: feedback
          - name: metrics
        """

    /// Two tenants, `acme` (two topics) and `globex`, with the sandbox knowing `devices`.
    static func make(devices: [SandboxDevice] = [], faults: SandboxFaults = .none, recordPayloads: Bool = false) async throws -> TestWorld {
        let acme = TestTenant.make(
            id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app", "com.acme.app.voip"], extraYAML: acmePlugins)
        let globex = TestTenant.make(id: "globex", teamID: "GLOBEXTM01", keyID: "GLOBEXKEY1", topics: ["com.globex.app"])
        return try await make(tenants: [acme, globex], devices: devices, faults: faults, recordPayloads: recordPayloads)
    }

    static func make(
        tenants: [TestTenant], devices: [SandboxDevice], faults: SandboxFaults, recordPayloads: Bool,
        tokenUpdateScope: SandboxTokenUpdateScope = .connection, channelsPerApp: Int = 10_000
    ) async throws -> TestWorld {
        let directory = try ScratchDirectories.make("herald-server-tests")
        try FileManager.default.createDirectory(atPath: directory + "/tenants/keys", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/config", withIntermediateDirectories: true)

        var configuration = SandboxConfiguration(certificateAuthority: try TestCertificateAuthority.shared())
        configuration.tokenKeys = tenants.map {
            SandboxTokenKey(teamID: $0.teamID, keyID: $0.keyID, publicKey: $0.key.publicKey, topics: $0.topics)
        }
        // Servers restarted on a fresh store sign new tokens at once; by default token changes
        // are counted per connection (tests of the token rule itself ask for `.strict`).
        configuration.tokenUpdateScope = tokenUpdateScope
        configuration.devices = devices
        configuration.faults = faults
        configuration.recordPayloads = recordPayloads
        configuration.channelsPerApp = channelsPerApp
        var logger = Logger(label: "test.sandbox")
        logger.logLevel = .critical
        let sandbox = try await APNsSandbox.start(configuration, logger: logger)

        let caPath = directory + "/config/ca.pem"
        try sandbox.trustRootsPEM.write(toFile: caPath, atomically: true, encoding: .utf8)
        let world = TestWorld(directory: directory, sandbox: sandbox, tenants: tenants, caPath: caPath)
        for tenant in tenants { try world.writeTenantFile(tenant) }
        return world
    }

    private init(directory: String, sandbox: APNsSandbox, tenants: [TestTenant], caPath: String) {
        self.directory = directory
        self.sandbox = sandbox
        self.tenants = tenants
        self.caPath = caPath
    }

    var tenantsDirectory: String { directory + "/tenants" }
    var storagePath: String { directory + "/data/herald.sqlite" }

    func tenant(_ id: String) -> TestTenant { tenants.first { $0.id == id }! }

    /// Writes the tenant's file; its APNs endpoints are the sandbox's, or `apnsPort` of 127.0.0.1.
    func writeTenantFile(_ tenant: TestTenant, apnsPort: Int? = nil) throws {
        let keyPath = "keys/\(tenant.id).p8"
        try ("# test key\n" + tenant.key.pemRepresentation + "\n").write(
            toFile: tenantsDirectory + "/" + keyPath, atomically: true, encoding: .utf8)
        let yaml = """
            id: \(tenant.id)
            team_id: \(tenant.teamID)
            auth:
              token:
                key_id: \(tenant.keyID)
                key_file: \(keyPath)
            topics: [\(tenant.topics.joined(separator: ", "))]
            endpoints:
              development: https://127.0.0.1:\(apnsPort ?? sandbox.port)
              production: https://127.0.0.1:\(apnsPort ?? sandbox.port)
              channels_development: https://127.0.0.1:\(sandbox.channelsPort)
              channels_production: https://127.0.0.1:\(sandbox.channelsPort)
              default: development
              ca_file: \(caPath)
            api_keys:
              - name: test
                sha256: \(APIKeys.sha256Hex(of: tenant.apiKey))
            \(tenant.extraYAML)

            """
        try yaml.write(toFile: tenantsDirectory + "/\(tenant.id).yaml", atomically: true, encoding: .utf8)
    }

    /// Server settings for this world: port 0, sandbox off (it runs here), store in the directory.
    func serverConfiguration() -> ServerConfiguration {
        var configuration = ServerConfiguration()
        configuration.tenantsDirectory = tenantsDirectory
        configuration.storagePath = storagePath
        configuration.listen = .init(host: "127.0.0.1", port: 0)
        configuration.logLevel = .error
        // bcrypt's lowest cost, below what a configuration file may set: each step halves a test
        // login's CPU, and what the tests check does not depend on the cost.
        configuration.api.passwordCost = 4
        return configuration
    }

    func options(adminToken: String? = "test-admin-token", configure: (inout HeraldProcessOptions) -> Void = { _ in }) -> HeraldProcessOptions {
        var options = HeraldProcessOptions(configuration: serverConfiguration(), environment: [:])
        options.adminToken = adminToken
        var logger = Logger(label: "test.herald")
        logger.logLevel = .error
        options.logger = logger
        options.reportPluginMetricsToRegistry()
        options.jobs.rescanInterval = .milliseconds(200)
        configure(&options)
        return options
    }

    /// Every processed request the sandbox answered, by apns-id, in arrival order.
    func answersByID() -> [String: [SandboxRecordedRequest]] {
        Dictionary(grouping: sandbox.requests.filter(\.processed), by: \.apnsID)
    }

    func close() async {
        try? await sandbox.shutdown()
        await checkTheAuditLogHoldsNoSecret()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Every audit entry a test wrote to the world's store (every test that made a change through
    /// the admin API or the console on SQLite) is read here: none may hold a secret.
    private func checkTheAuditLogHoldsNoSecret() async {
        guard FileManager.default.fileExists(atPath: storagePath),
            let store = try? SQLitePushStore(path: storagePath),
            let entries = try? await store.auditEntries(AuditQuery(limit: 1_000_000))
        else { return }
        let known = tenants.map(\.apiKey) + ["test-admin-token"]
        for entry in entries {
            let text = ([entry.account, entry.action, entry.tenant ?? "", entry.object ?? "", entry.source ?? ""]
                + entry.details.flatMap { [$0.key, $0.value] }).joined(separator: " ")
            for marker in ["hk_", "hat_", "-----BEGIN", "PRIVATE KEY", "$2b$", "$2y$"] + known where text.contains(marker) {
                Issue.record("an audit entry holds a secret (\(marker.prefix(6))…): \(entry.action) \(entry.object ?? "")")
            }
        }
    }
}

/// A running Herald server (in this process) and an HTTP client connected to it.
struct LiveServer: Sendable {
    let server: HeraldProcess
    let port: Int

    /// Starts the server, runs `body` with it, then shuts it down gracefully.
    static func with<T: Sendable>(
        _ options: HeraldProcessOptions, _ body: @Sendable (LiveServer) async throws -> T
    ) async throws -> T {
        let server = try await HeraldProcess.start(options)
        let (ports, portSink) = AsyncStream.makeStream(of: Int.self)
        let group = server.serviceGroup(gracefulShutdownSignals: [], onListening: { _, port in portSink.yield(port) })
        return try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw HarnessError("the server never listened") }
            let live = LiveServer(server: server, port: port)
            do {
                let value = try await body(live)
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
                return value
            } catch {
                await group.triggerGracefulShutdown()
                try? await tasks.waitForAll()
                throw error
            }
        }
    }

    /// A fresh client connection.
    func client() -> APIClient { APIClient(port: port) }
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A small HTTP/1.1 JSON client over HummingbirdTesting's `TestClient`.
struct APIClient: Sendable {
    let port: Int

    struct Reply: Sendable {
        var status: Int
        var headers: HTTPFields
        var body: [UInt8]

        var text: String { String(decoding: body, as: UTF8.self) }

        /// The body as a JSON object (empty when it is not one).
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
        }

        var error: [String: Any] { json["error"] as? [String: Any] ?? [:] }
        var errorCode: String? { error["code"] as? String }
        var errorField: String? { error["field"] as? String }
    }

    func request(
        _ method: HTTPRequest.Method, _ path: String, key: String? = nil, json: String? = nil, body: [UInt8]? = nil,
        contentType: String? = "application/json", headers extra: HTTPFields = [:]
    ) async throws -> Reply {
        var headers = extra
        if let key { headers[.authorization] = "Bearer \(key)" }
        var buffer: ByteBuffer? = nil
        if let bytes = body ?? json.map({ Array($0.utf8) }) {
            buffer = ByteBuffer(bytes: bytes)
            if let contentType { headers[.contentType] = contentType }
        }
        let client = TestClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(60)))
        client.connect()
        let response: TestClient.Response
        do {
            response = try await client.execute(
                TestClient.Request(path, method: method, authority: "127.0.0.1", headers: headers, body: buffer))
        } catch {
            try? await client.shutdown()
            throw error
        }
        try? await client.shutdown()
        let bytes = response.body.map { Array($0.readableBytesView) } ?? []
        return Reply(status: Int(response.head.status.code), headers: response.head.headerFields, body: bytes)
    }

    /// Polls a job until it is finished (or the time runs out).
    func waitForJob(_ id: String, key: String, timeout: Duration = .seconds(120)) async throws -> [String: Any] {
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: timeout)
        while true {
            let reply = try await request(.get, "/v1/jobs/\(id)", key: key)
            guard reply.status == 200 else { throw HarnessError("GET job answered \(reply.status): \(reply.text)") }
            if reply.json["state"] as? String == "finished" { return reply.json }
            guard clock.now < end else { throw HarnessError("the job did not finish in time: \(reply.text)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

/// Lowercase hex device tokens, distinct per `seed` and `index`.
enum Tokens {
    static func make(_ seed: UInt8, _ index: Int) -> String {
        var bytes = [UInt8](repeating: seed, count: 32)
        bytes[28] = UInt8((index >> 24) & 0xff)
        bytes[29] = UInt8((index >> 16) & 0xff)
        bytes[30] = UInt8((index >> 8) & 0xff)
        bytes[31] = UInt8(index & 0xff)
        var hex: [UInt8] = []
        hex.reserveCapacity(64)
        for byte in bytes {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: hex, as: UTF8.self)
    }

    private static let digits = Array("0123456789abcdef".utf8)
}
