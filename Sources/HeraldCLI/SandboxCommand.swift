import APNsSandbox
import ArgumentParser
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `herald sandbox`: a local APNs (TLS, HTTP/2) for demos, integration tries and tests.
struct SandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract: "Run a local APNs sandbox (HTTP/2 over TLS) that answers like Apple's servers.",
        subcommands: [Run.self, DemoCredentials.self, DemoToken.self],
        defaultSubcommand: Run.self
    )

    /// `herald sandbox [run]`
    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "run", abstract: "Start the sandbox and serve until SIGINT or SIGTERM.")

        @Option(name: .long, help: "The sandbox configuration file.")
        var config: String = "config/sandbox.yaml"

        @Option(name: .long, help: "Listen on this port instead (0 picks a free one).")
        var port: Int?

        @Option(
            name: .long,
            help: "The channel management service's port (0 picks a free one; with --port and without this, a free one).")
        var channelsPort: Int?

        @Option(name: .long, help: "Listen on this address instead.")
        var host: String?

        @Option(name: .long, help: "Append every request as a JSON line to this file.")
        var record: String?

        @Option(name: .long, help: "Event loop threads (default: one per core).")
        var threads: Int?

        @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error.")
        var logLevel: String = "info"

        func run() async throws {
            var file: SandboxConfigFile
            do {
                file = try SandboxConfigFile.load(path: config)
            } catch let error as SandboxError {
                FileHandle.standardError.write(Data("herald sandbox: \(error)\n".utf8))
                throw ExitCode(2)
            }
            if let port {
                file.configuration.port = port
                // Another device port is another sandbox: its channels port must not collide.
                file.configuration.channelsPort = 0
            }
            if let channelsPort { file.configuration.channelsPort = channelsPort }
            if let host { file.configuration.host = host }
            if let record { file.configuration.recordFile = URL(fileURLWithPath: record) }

            var caPath = file.caCertificatePath
            if caPath == nil {
                let target =
                    file.writeCATo ?? FileManager.default.temporaryDirectory
                    .appendingPathComponent("herald-sandbox-ca-\(getpid()).pem").path
                try Data(file.configuration.certificateAuthority.certificatePEM.utf8)
                    .write(to: URL(fileURLWithPath: target))
                caPath = target
            }

            var logger = Logger(label: "herald.sandbox")
            logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
            let sandbox: APNsSandbox
            if let threads {
                sandbox = try await APNsSandbox.start(file.configuration, threads: threads, logger: logger)
            } else {
                sandbox = try await APNsSandbox.start(file.configuration, logger: logger)
            }
            // Unbuffered: scripts read the port while the sandbox runs.
            let keys = file.configuration.tokenKeys.map { "\($0.teamID)/\($0.keyID)" }.joined(separator: ", ")
            FileHandle.standardOutput.write(
                Data(
                    """
                    APNsSandbox listening on https://\(sandbox.host):\(sandbox.port)
                    port: \(sandbox.port)
                    channels port: \(sandbox.channelsPort)
                    trust this CA: \(caPath ?? "-")
                    token keys: \(keys)

                    """.utf8))

            let signal = await SignalWaiter.waitForTermination()
            print("herald sandbox: \(signal), shutting down")
            let counters = sandbox.counters
            try await sandbox.shutdown()
            print(
                "requests: \(counters.requests), answered: \(counters.answered), cut off: \(counters.cutOff), "
                    + "by status: \(counters.byStatus.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))"
            )
        }
    }

    /// `herald sandbox demo-credentials`
    struct DemoCredentials: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "demo-credentials",
            abstract: "Generate the demo PKI: sandbox CA, demo token key pair, demo client certificate.")

        @Option(name: .customLong("out-config"), help: "The sandbox's directory (CA, token public key).")
        var outConfig: String = "config/sandbox"

        @Option(name: .customLong("out-tenants"), help: "The tenants directory (keys/, certs/).")
        var outTenants: String = "tenants"

        @Flag(help: "Replace existing demo files.")
        var force = false

        func run() throws {
            do {
                let written = try SandboxDemoCredentials.generate(
                    configDirectory: outConfig, tenantsDirectory: outTenants, force: force)
                for path in written { print("wrote \(path)") }
                print("These are DEMO credentials for the local APNsSandbox only.")
            } catch let error as SandboxError {
                FileHandle.standardError.write(Data("herald sandbox demo-credentials: \(error)\n".utf8))
                throw ExitCode(2)
            }
        }
    }

    /// `herald sandbox demo-token`: prints a provider token for the demo key (benchmarks, curl).
    struct DemoToken: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "demo-token", abstract: "Print a provider token signed with the demo key.",
            shouldDisplay: false)

        @Option(help: "The demo token key (.p8).")
        var key: String = "tenants/keys/AuthKey_DEMOKEY001.p8"

        @Option(help: "The team ID (iss).")
        var team: String = SandboxDemoCredentials.tokenTeamID

        @Option(help: "The key ID (kid).")
        var kid: String = SandboxDemoCredentials.tokenKeyID

        func run() throws {
            do {
                print(try SandboxDemoCredentials.demoToken(privateKeyPath: key, teamID: team, keyID: kid))
            } catch let error as SandboxError {
                FileHandle.standardError.write(Data("herald sandbox demo-token: \(error)\n".utf8))
                throw ExitCode(2)
            }
        }
    }
}

/// Waits for SIGINT or SIGTERM: the signals are taken from default handling and delivered
/// through dispatch sources, which live as long as the wait.
enum SignalWaiter {
    static func waitForTermination() async -> String {
        await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            let queue = DispatchQueue(label: "herald.sandbox.signals")
            let waiter = ResumeOnce(continuation)
            for (number, name) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler { waiter.resume(name) }
                source.resume()
                waiter.keep(source)
            }
        }
    }
}

private final class ResumeOnce: Sendable {
    private struct State {
        var continuation: CheckedContinuation<String, Never>?
        var sources: [SignalSource] = []
    }

    private let state: Mutex<State>

    init(_ continuation: CheckedContinuation<String, Never>) {
        self.state = Mutex(State(continuation: continuation))
    }

    func keep(_ source: any DispatchSourceSignal) {
        let box = SignalSource(source)
        state.withLock { $0.sources.append(box) }
    }

    func resume(_ value: String) {
        let continuation = state.withLock { state in
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: value)
    }
}

/// A dispatch signal source, immutable once made; dispatch sources are thread-safe.
private final class SignalSource: @unchecked Sendable {
    let source: any DispatchSourceSignal
    init(_ source: any DispatchSourceSignal) { self.source = source }
}
