import Crypto
import Foundation
import HeraldServer
import HeraldTestSupport
import Testing

/// `herald tenants create|show|update|add-key|remove-key|delete`: the real `herald` executable
/// against a live server's admin API (the same routes the API tests call).
@Suite("herald tenants: the lifecycle from the command line")
struct TenantsCommandTests {
    struct Run {
        var status: Int32
        var output: String
        var errors: String
    }

    /// Runs `herald` with `arguments` and the admin token in its environment; waits for it
    /// without blocking a thread (the server answering it runs in this process).
    static func herald(_ binary: String, _ arguments: [String], token: String, environment extra: [String: String] = [:])
        async throws -> Run
    {
        var environment = ProcessInfo.processInfo.environment.merging(extra) { $1 }
        environment["HERALD_ADMIN_TOKEN"] = token
        let output = Pipe()
        let errors = Pipe()
        let process = try ChildProcess.spawn(
            binary, arguments: arguments, environment: environment,
            standardOutput: .descriptor(output.fileHandleForWriting.fileDescriptor),
            standardError: .descriptor(errors.fileHandleForWriting.fileDescriptor))
        // The child holds its own copies: with these closed, the reads below end at its exit.
        try output.fileHandleForWriting.close()
        try errors.fileHandleForWriting.close()
        let status = await process.exit()
        // The answers are a few KiB, far below a pipe's buffer: the child never waited on them.
        return Run(
            status: status,
            output: String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self),
            errors: String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
    }

    static func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    @Test(
        "herald tenants validate builds each tenant's plugins as a reload does: bad options are named with file:line",
        .enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built"))
    func validateChecksPlugins() async throws {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let directory = NSTemporaryDirectory() + "herald-validate-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: directory + "/key.p8", atomically: true, encoding: .utf8)
        func tenant(_ id: String, plugins: String) -> String {
            """
            id: \(id)
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: key.p8
            topics: [com.acme.app]
            plugins:
            \(plugins)
            """
        }
        try tenant("good", plugins: "  - name: rate-limit\n    options: {per_second: 50}\n  - metrics")
            .write(toFile: directory + "/good.yaml", atomically: true, encoding: .utf8)
        try tenant("bad", plugins: "  - metrics\n  - name: rate-limit\n    options: {per_second: -5}")
            .write(toFile: directory + "/bad.yaml", atomically: true, encoding: .utf8)

        let run = try await Self.herald(binary, ["tenants", "validate", directory], token: "unused")
        #expect(run.status == 1, "\(run.output)\(run.errors)")
        #expect(
            run.output.contains(
                "\(directory)/bad.yaml:11:5: plugins[1].options.per_second: plugin 'rate-limit': must be greater than 0, got -5"),
            "\(run.output)")
        #expect(run.output.contains("ok       good  \(directory)/good.yaml"), "\(run.output)")
        #expect(run.output.contains("1 valid, 1 invalid"), "\(run.output)")
    }

    @Test(.enabled(if: CrashResumeTests.heraldBinary != nil, "the herald executable is not built"))
    func onboardChangeAndOffboardFromTheCommandLine() async throws {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let world = try await LifecycleAPITests.world()
        let initech = world.tenant("initech")
        let keyFile = world.directory + "/AuthKey_INITECHK01.p8"
        try initech.key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let config = world.directory + "/cli-herald.yaml"
        try "tenants_dir: tenants\nlisten: {host: 127.0.0.1, port: 1}\n".write(toFile: config, atomically: true, encoding: .utf8)
        let token = LifecycleAPITests.admin
        try await LiveServer.with(world.options(adminToken: token)) { live async throws in
            let server = ["--config", config, "--server", "http://127.0.0.1:\(live.port)"]
            let sandbox = "https://127.0.0.1:\(world.sandbox.port)"
            let created = try await Self.herald(
                binary,
                ["tenants", "create"] + server + [
                    "--id", "initech", "--team-id", initech.teamID, "--topic", "com.initech.app", "--key", keyFile,
                    "--key-id", "INITECHK01", "--development", sandbox, "--production", sandbox,
                    "--default-environment", "development", "--ca-file", world.caPath,
                ], token: token)
            #expect(created.status == 0, "\(created.errors)")
            let apiKey = try #require((Self.json(created.output)["api_key"] as? [String: Any])?["key"] as? String, "\(created.output)")
            #expect(!created.output.contains("PRIVATE KEY"))
            #expect(try await LifecycleAPITests.send(live.client(), key: apiKey).status == 200)

            let shown = try await Self.herald(binary, ["tenants", "show"] + server + ["initech"], token: token)
            #expect(shown.status == 0, "\(shown.errors)")
            #expect(Self.json(shown.output)["api_keys"] as? [String] == ["default"])

            let updated = try await Self.herald(
                binary, ["tenants", "update"] + server + ["initech", "--topic", "com.initech.app", "--topic", "com.initech.other"],
                token: token)
            #expect(updated.status == 0, "\(updated.errors)")
            #expect(Self.json(updated.output)["topics"] as? [String] == ["com.initech.app", "com.initech.other"])
            // Any section PATCH takes, from a JSON file; --pool-connections wins over the file's.
            let settingsFile = world.directory + "/initech-settings.json"
            try #"{"pool": {"connections": 3, "max_queued": 500}, "plugins": [{"name": "metrics"}]}"#.write(
                toFile: settingsFile, atomically: true, encoding: .utf8)
            let fromFile = try await Self.herald(
                binary, ["tenants", "update"] + server + ["initech", "--settings", settingsFile, "--pool-connections", "4"], token: token)
            #expect(fromFile.status == 0, "\(fromFile.errors)")
            #expect(Self.json(fromFile.output)["plugins"] as? [String] == ["metrics"], "\(fromFile.output)")
            let pool = Self.json(fromFile.output)["pool"] as? [String: Any]
            #expect(pool?["connections_per_endpoint"] as? Int == 4, "\(fromFile.output)")
            #expect(Self.json(fromFile.output)["topics"] as? [String] == ["com.initech.app", "com.initech.other"])

            // The webhook: its secret from this side's environment, written by the server to a 0600 file.
            let hookSecret = "cli-webhook-secret-0123456789"
            let hooked = try await Self.herald(
                binary,
                ["tenants", "update"] + server + [
                    "initech", "--webhook-url", "https://hooks.initech.example/h", "--webhook-secret-env", "CLI_HOOK_SECRET",
                ], token: token, environment: ["CLI_HOOK_SECRET": hookSecret])
            #expect(hooked.status == 0, "\(hooked.errors)")
            #expect((Self.json(hooked.output)["webhook"] as? [String: Any])?["url"] as? String == "https://hooks.initech.example/h")
            #expect(!hooked.output.contains(hookSecret))
            #expect(try String(contentsOfFile: world.tenantsDirectory + "/initech/webhook.secret", encoding: .utf8) == hookSecret)
            let unhooked = try await Self.herald(binary, ["tenants", "update"] + server + ["initech", "--remove-webhook"], token: token)
            #expect(unhooked.status == 0, "\(unhooked.errors)")
            #expect(Self.json(unhooked.output)["webhook"] is NSNull, "\(unhooked.output)")

            let proxied = try await Self.herald(
                binary, ["tenants", "update"] + server + ["initech", "--proxy", "socks5://127.0.0.1:1081"], token: token)
            #expect(proxied.status == 0 && Self.json(proxied.output)["proxy"] as? String == "socks5://127.0.0.1:1081", "\(proxied.output)")
            let unproxied = try await Self.herald(binary, ["tenants", "update"] + server + ["initech", "--remove-proxy"], token: token)
            #expect(Self.json(unproxied.output)["proxy"] is NSNull, "\(unproxied.output)")

            let added = try await Self.herald(binary, ["tenants", "add-key"] + server + ["initech", "ci"], token: token)
            #expect(added.status == 0, "\(added.errors)")
            let ciKey = try #require(Self.json(added.output)["key"] as? String, "\(added.output)")
            #expect(try await LifecycleAPITests.send(live.client(), key: ciKey).status == 200)
            let removed = try await Self.herald(binary, ["tenants", "remove-key"] + server + ["initech", "ci"], token: token)
            #expect(removed.status == 0, "\(removed.errors)")
            #expect(try await LifecycleAPITests.send(live.client(), key: ciKey).status == 401)

            // Refusals: the server's answer on stderr and exit 1; a usage error exits 2; a wrong token is refused.
            let again = try await Self.herald(binary, ["tenants", "add-key"] + server + ["initech", "default"], token: token)
            #expect(again.status == 1 && again.errors.contains("409"), "\(again.errors)")
            let usage = try await Self.herald(
                binary, ["tenants", "create"] + server + ["--id", "x", "--team-id", "TEAM000001", "--key", keyFile], token: token)
            #expect(usage.status == 2, "\(usage.errors)")
            let wrong = try await Self.herald(binary, ["tenants", "show"] + server + ["initech"], token: "not-the-token")
            #expect(wrong.status == 1 && wrong.errors.contains("401"), "\(wrong.errors)")

            let deleted = try await Self.herald(binary, ["tenants", "delete"] + server + ["initech"], token: token)
            #expect(deleted.status == 0, "\(deleted.errors)")
            #expect(try await LifecycleAPITests.send(live.client(), key: apiKey).status == 401)
            let gone = try await Self.herald(binary, ["tenants", "show"] + server + ["initech"], token: token)
            #expect(gone.status == 1 && gone.errors.contains("404"), "\(gone.errors)")
        }
        await world.close()
    }
}
