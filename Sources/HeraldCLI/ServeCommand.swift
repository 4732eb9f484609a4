import ArgumentParser
import Foundation
import HeraldConfig
import HeraldProcess
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `herald serve`: the whole platform in one process (API, tenants, store, job runner, and the
/// sandbox when `sandbox.enabled`), until SIGTERM or SIGINT.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run Herald: the HTTP API, every tenant, the job runner (and the sandbox when configured).",
        discussion: """
            Reads config/herald.yaml (every key optional). On SIGTERM or SIGINT it stops accepting \
            requests, lets in-flight sends finish, leaves unsent batch items pending in the store, \
            drains the APNs connections and exits 0. The admin routes need the admin token in the \
            variable named by api.admin_token_env (HERALD_ADMIN_TOKEN). Tenant files are reloaded \
            without a restart on SIGHUP and when the tenants directory changes (reload: in \
            herald.yaml; --no-watch turns the watcher off).
            """)

    @Option(name: .long, help: "Herald's configuration file.")
    var config: String?

    @Option(name: .long, help: "Listen on this port instead (0 picks a free one; the port is printed).")
    var port: Int?

    @Option(name: .long, help: "Listen on this address instead.")
    var host: String?

    @Option(name: .long, help: "Read the tenant files from this directory instead.")
    var tenants: String?

    @Option(name: .long, help: "Use this SQLite database file instead of the configured store.")
    var storage: String?

    @Flag(name: .long, help: "Do not start the in-process sandbox even if the configuration enables it.")
    var noSandbox = false

    @Flag(name: .long, help: "Do not watch the tenants directory (SIGHUP and the admin API still reload).")
    var noWatch = false

    func run() async throws {
        var settings: ServerConfiguration
        do {
            settings = try ServerConfiguration.load(
                file: config ?? ServerConfiguration.defaultFile, required: config != nil)
        } catch {
            FileHandle.standardError.write(Data("herald serve: \(error)\n".utf8))
            throw ExitStatus.invalid
        }
        if let port { settings.listen.port = port }
        if let host { settings.listen.host = host }
        if let tenants { settings.tenantsDirectory = tenants }
        if let storage {
            settings.storagePath = storage
            settings.storage = .sqlite
        }
        if noSandbox { settings.sandbox.enabled = false }
        if noWatch { settings.reload.watch = false }

        let level = Logger.Level(rawValue: settings.logLevel.rawValue) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        var options = HeraldProcessOptions(configuration: settings)
        options.logger = Logger(label: "herald")
        options.bootstrapMetricsSystem()
        options.reloadOnSIGHUP = settings.reload.sighup
        if settings.reload.sighup {
            // Until the reload service traps it, a SIGHUP must not end the process (its default action).
            signal(SIGHUP, SIG_IGN)
        }
        options.watchInterval = settings.reload.watch ? .milliseconds(Int64(settings.reload.watchInterval * 1000)) : nil

        let server: HeraldProcess
        do {
            server = try await HeraldProcess.start(options)
        } catch {
            FileHandle.standardError.write(Data("herald serve: \(error)\n".utf8))
            throw ExitStatus.invalid
        }
        var lines: [String] = []
        if let sandbox = server.sandbox {
            lines.append(
                "APNsSandbox listening on https://\(sandbox.host):\(sandbox.port) (config: \(settings.sandbox.configFile))"
            )
        }
        lines.append(
            "tenants: \(server.loadedTenants.map(\.rawValue).joined(separator: ", ")) (from \(settings.tenantsDirectory))"
        )
        for failure in server.loadFailures {
            lines.append("not loaded: \(failure.message)")
        }
        lines.append("instance: \(server.instanceID) (claimant \(options.jobs.claimantName))")
        switch settings.storage {
        case .sqlite: lines.append("store: \(settings.storagePath)")
        case .postgres(let postgres): lines.append("store: \(postgres.displayName) (pool of \(postgres.poolSize))")
        }
        lines.append(
            "admin routes: "
                + (options.adminToken == nil ? "off (\(settings.api.adminTokenVariable) is not set)" : "on"))
        var reloads: [String] = []
        if settings.reload.watch {
            reloads.append("watching \(settings.tenantsDirectory) every \(settings.reload.watchInterval)s")
        }
        if settings.reload.sighup { reloads.append("SIGHUP") }
        if options.adminToken != nil { reloads.append("POST /admin/reload") }
        lines.append("reload: " + reloads.joined(separator: ", "))
        Self.say(lines.joined(separator: "\n"))

        try await server.run { host, port in
            let shown = host.contains(":") ? "[\(host)]" : host
            Self.say("Herald API listening on http://\(shown):\(port)")
        }
        Self.say("herald serve: stopped")
    }

    /// Writes a line to standard output at once (scripts and tests wait for these lines).
    static func say(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }
}
