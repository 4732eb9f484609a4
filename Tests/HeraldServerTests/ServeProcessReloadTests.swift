import Foundation
import HeraldServer
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The real `herald serve` process picks up a changed tenant file on SIGHUP, and on its own
/// with the directory watcher on, without a restart.
@Suite("herald serve: reload on SIGHUP and on file changes")
struct ServeProcessReloadTests {
    static func writeConfig(_ world: TestWorld, reload: String) throws {
        try """
        tenants_dir: tenants
        storage_path: data/herald.sqlite
        listen: {host: 127.0.0.1, port: 0}
        log_level: notice
        reload: \(reload)

        """.write(toFile: world.directory + "/config/herald.yaml", atomically: true, encoding: .utf8)
    }

    static func send(_ client: APIClient, key: String, _ index: Int) async throws -> Int {
        try await client.request(
            .post, "/v1/notifications", key: key,
            json:
                #"{"device_token": "\#(Tokens.make(0xB1, index))", "topic": "com.globex.app", "payload": {"aps": {}}}"#
        ).status
    }

    /// Gives globex a new API key in its file; returns the new key.
    static func rotateAPIKey(_ world: TestWorld) throws -> String {
        var globex = world.tenant("globex")
        globex.apiKey = APIKeys.generate()
        try world.writeTenantFile(globex)
        return globex.apiKey
    }

    /// Polls until the new key is accepted (each attempt is a real send); false after `timeout`.
    static func newKeyWorks(_ client: APIClient, key: String, child: ChildServer, timeout: Duration) async throws
        -> Bool
    {
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: timeout)
        var index = 100
        while clock.now < end {
            guard child.process.isRunning else { throw HarnessError("herald serve exited") }
            index += 1
            if try await send(client, key: key, index) == 200 { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    @Test(.enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built"))
    func sighupReloadsTheTenants() async throws {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let world = try await TestWorld.make()
        // No watcher: only the signal can apply the change.
        try Self.writeConfig(world, reload: "{watch: false, sighup: true}")
        let child = try await ChildServer.start(binary: binary, directory: world.directory, run: 1)
        defer { child.killIfRunning() }
        let client = APIClient(port: child.port)
        let oldKey = world.tenant("globex").apiKey
        #expect(try await Self.send(client, key: oldKey, 1) == 200)

        let newKey = try Self.rotateAPIKey(world)
        // Unchanged until the signal: nothing watches the directory (`watch: false`).
        #expect(try await Self.send(client, key: newKey, 2) == 401)
        #expect(kill(child.process.pid, SIGHUP) == 0)
        #expect(try await Self.newKeyWorks(client, key: newKey, child: child, timeout: .seconds(30)))
        #expect(try await Self.send(client, key: oldKey, 3) == 401)
        #expect(child.process.isRunning, "SIGHUP must not stop the server")
        #expect(child.terminate() == 0)
        let log = try String(contentsOfFile: world.directory + "/serve-1.log", encoding: .utf8)
        #expect(log.contains("reload: SIGHUP"), "\(log)")
        #expect(log.contains("herald.trigger=signal"), "the reload is logged with its trigger")
        await world.close()
    }

    @Test(.enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built"))
    func theWatcherAppliesAChangedFileWithoutASignal() async throws {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let world = try await TestWorld.make()
        try Self.writeConfig(world, reload: "{watch: true, watch_interval: 200ms, sighup: false}")
        let child = try await ChildServer.start(binary: binary, directory: world.directory, run: 1)
        defer { child.killIfRunning() }
        let client = APIClient(port: child.port)
        let oldKey = world.tenant("globex").apiKey
        #expect(try await Self.send(client, key: oldKey, 1) == 200)

        let newKey = try Self.rotateAPIKey(world)
        #expect(try await Self.newKeyWorks(client, key: newKey, child: child, timeout: .seconds(30)))
        #expect(try await Self.send(client, key: oldKey, 2) == 401)

        // A broken edit: the watcher reports it and globex keeps running as it was.
        let file = world.tenantsDirectory + "/globex.yaml"
        let good = try String(contentsOfFile: file, encoding: .utf8)
        try (good + "pool: {connections: 0}\n").write(toFile: file, atomically: true, encoding: .utf8)
        let logFile = world.directory + "/serve-1.log"
        let clock = ContinuousClock()
        let end = clock.now.advanced(by: .seconds(30))
        var reported = false
        while clock.now < end, !reported {
            let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
            reported = log.contains("tenant reload failed") && log.contains("pool.connections")
            if !reported { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(reported, "the broken file is reported in the log")
        #expect(try await Self.send(client, key: newKey, 3) == 200)
        #expect(child.terminate() == 0)
        let log = try String(contentsOfFile: logFile, encoding: .utf8)
        #expect(log.contains("reload: watching"), "\(log)")
        #expect(log.contains("herald.trigger=watcher"), "the reload is logged with its trigger")
        await world.close()
    }
}
