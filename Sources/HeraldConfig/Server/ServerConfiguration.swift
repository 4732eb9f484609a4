import Foundation
import HeraldCore
import Yams

/// Herald's own settings, from `config/herald.yaml`.
///
/// ```swift
/// let server = try ServerConfiguration.load(file: "config/herald.yaml")
/// let tenants = try TenantLoader().loadDirectory(server.tenantsDirectory)
/// ```
///
/// Relative paths in the file (`tenants_dir`, `storage_path`) are resolved against the parent of
/// the directory that holds the file: for `/srv/herald/config/herald.yaml` that is `/srv/herald`,
/// so `tenants_dir: tenants` means `/srv/herald/tenants`, wherever Herald is started from. When
/// there is no file, the built-in defaults are relative to the working directory.
public struct ServerConfiguration: Sendable, Hashable {
    /// The directory of tenant files.
    public var tenantsDirectory: String = "tenants"
    /// Where the HTTP API listens.
    public var listen: ListenAddress = ListenAddress()
    /// The durable store's database file (jobs, results, unregistered tokens).
    public var storagePath: String = "data/herald.sqlite"
    /// The store `herald serve` opens: the SQLite file at ``storagePath`` unless `storage.postgres` is set.
    public var storage: Storage = .sqlite
    /// The least severe log level written.
    public var logLevel: LogLevel = .info
    /// The HTTP API's limits and admin token (`api:`).
    public var api: APISettings = APISettings()
    /// The batch job runner (`jobs:`).
    public var jobs: JobSettings = JobSettings()
    /// The in-process APNsSandbox of `herald serve` (`sandbox:`).
    public var sandbox: SandboxSettings = SandboxSettings()
    /// What reloads the tenants besides the admin API: the directory watcher, SIGHUP (`reload:`).
    public var reload: ReloadSettings = ReloadSettings()
    /// The API listener's limits and the per-API-key request rate (`http:`).
    public var http: HTTPSettings = HTTPSettings()
    /// The outbound proxy every tenant's APNs connections go through, unless a tenant file says
    /// otherwise (`proxy:`); nil: directly.
    public var proxy: EgressProxy?
    /// The outbound proxy of webhook posts (`webhooks.proxy`); nil: directly. Separate from
    /// ``proxy``: webhook receivers are the tenants' servers, not APNs.
    public var webhookProxy: EgressProxy?
    /// Seconds a graceful shutdown (SIGTERM, SIGINT) may take (`shutdown_timeout`): API requests
    /// and sends on the wire finish and are recorded within it; what is still running then is
    /// cancelled (a store call that gets no answer among it), so the process ends in time for
    /// its orchestrator (Kubernetes kills a pod 30 s after SIGTERM by default).
    public var shutdownTimeout: Double = 25
    /// The file these settings came from; nil for the built-in defaults.
    public var sourceFile: String?

    public init() {}

    /// The default location of the file, relative to the working directory.
    public static let defaultFile = "config/herald.yaml"

    public struct ListenAddress: Sendable, Hashable, CustomStringConvertible {
        public var host: String = "127.0.0.1"
        /// 0 picks a free port.
        public var port: Int = 8080

        public init(host: String = "127.0.0.1", port: Int = 8080) {
            self.host = host
            self.port = port
        }

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// The log levels of swift-log, by their names.
    public enum LogLevel: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error, critical
        public var description: String { rawValue }
    }

    static let keys = [
        "tenants_dir", "listen", "storage_path", "storage", "log_level", "api", "jobs", "sandbox", "reload", "http",
        "shutdown_timeout", "proxy", "webhooks",
    ]
    static let shutdownTimeoutRange = 1.0...3600.0
    static let listenKeys = ["host", "port"]

    /// Loads the settings. A missing file gives the defaults unless `required` (use `required`
    /// when the user named the file).
    public static func load(
        file: String = defaultFile, required: Bool = false,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigFailure) -> ServerConfiguration {
        let start = SourceLocation(file: file, line: 1, column: 1)
        if !FileManager.default.fileExists(atPath: file), !required { return ServerConfiguration() }
        let bytes: [UInt8]
        switch SourceReader.readFile(file) {
        case .success(let read): bytes = read
        case .failure(let problem):
            throw ConfigFailure(file: file, errors: [ConfigError(location: start, field: "", message: problem.message)])
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigFailure(
                file: file, errors: [ConfigError(location: start, field: "", message: "the file is not UTF-8 text")])
        }
        return try parse(yaml: text, file: file, environment: environment)
    }

    /// Parses the settings from text; `file` names it in errors and anchors relative paths.
    /// `environment` gives the `env:` references (the PostgreSQL password).
    public static func parse(
        yaml: String, file: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigFailure) -> ServerConfiguration {
        let diagnostics = YAMLDiagnostics(file: file)
        var configuration = ServerConfiguration()
        configuration.sourceFile = file
        let base = baseDirectory(forConfigFile: file)

        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml, Node.composeResolver, .default, .utf8)
        } catch {
            diagnostics.syntaxError(error)
            throw ConfigFailure(file: file, errors: diagnostics.sortedErrors)
        }
        // An empty file (or one with only comments) means: all defaults.
        guard let root, !root.isNull else {
            configuration.tenantsDirectory = SourceReader.resolve(configuration.tenantsDirectory, against: base)
            configuration.storagePath = SourceReader.resolve(configuration.storagePath, against: base)
            resolveServePaths(&configuration, against: base)
            return configuration
        }
        if let mapping = CheckedMapping(root, path: .root, allowedKeys: keys, diagnostics: diagnostics) {
            if let node = mapping["tenants_dir"], let value = diagnostics.string(node, FieldPath(text: "tenants_dir")) {
                configuration.tenantsDirectory = value
            }
            if let node = mapping["storage_path"], let value = diagnostics.string(node, FieldPath(text: "storage_path"))
            {
                configuration.storagePath = value
            }
            if let node = mapping["log_level"], let value = diagnostics.string(node, FieldPath(text: "log_level")) {
                if let level = LogLevel(rawValue: value.lowercased()) {
                    configuration.logLevel = level
                } else {
                    diagnostics.error(
                        at: node, "log_level",
                        "must be one of \(LogLevel.allCases.map(\.rawValue).joined(separator: ", ")), not '\(value)'")
                }
            }
            if let node = mapping["listen"],
                let listen = CheckedMapping(
                    node, path: FieldPath(text: "listen"), allowedKeys: listenKeys, diagnostics: diagnostics)
            {
                if let hostNode = listen["host"],
                    let host = diagnostics.string(hostNode, FieldPath(text: "listen.host"))
                {
                    configuration.listen.host = host
                }
                if let portNode = listen["port"],
                    let port = diagnostics.integer(portNode, FieldPath(text: "listen.port"), in: 0...65535)
                {
                    configuration.listen.port = port
                }
            }
            if let node = mapping["shutdown_timeout"],
                let value = diagnostics.duration(
                    node, FieldPath(text: "shutdown_timeout"), minimum: shutdownTimeoutRange.lowerBound, allowZero: false)
            {
                if value > shutdownTimeoutRange.upperBound {
                    diagnostics.error(at: node, "shutdown_timeout", "must be from 1s to 1h")
                } else {
                    configuration.shutdownTimeout = value
                }
            }
            parseServeSections(mapping, into: &configuration, diagnostics: diagnostics)
            parseStorageSection(
                mapping, into: &configuration, base: base, environment: environment, diagnostics: diagnostics)
            parseReloadSection(mapping, into: &configuration, diagnostics: diagnostics)
            parseHTTPSection(mapping, into: &configuration, diagnostics: diagnostics)
            if let node = mapping["webhooks"],
                let webhooks = CheckedMapping(node, path: FieldPath(text: "webhooks"), allowedKeys: ["proxy"], diagnostics: diagnostics),
                let proxyNode = webhooks["proxy"]
            {
                configuration.webhookProxy = ProxyParsing.parse(
                    proxyNode, path: FieldPath(text: "webhooks.proxy"), allowNone: false,
                    reader: SourceReader(environment: environment), baseDirectory: base, diagnostics: diagnostics)?.proxy
            }
            if let node = mapping["proxy"] {
                configuration.proxy = ProxyParsing.parse(
                    node, path: FieldPath(text: "proxy"), allowNone: false, reader: SourceReader(environment: environment),
                    baseDirectory: base, diagnostics: diagnostics)?.proxy
            }
        }
        guard !diagnostics.hasErrors else { throw ConfigFailure(file: file, errors: diagnostics.sortedErrors) }
        configuration.tenantsDirectory = SourceReader.resolve(configuration.tenantsDirectory, against: base)
        configuration.storagePath = SourceReader.resolve(configuration.storagePath, against: base)
        resolveServePaths(&configuration, against: base)
        return configuration
    }

    /// The directory relative paths in `file` are resolved against: the parent of the file's directory.
    static func baseDirectory(forConfigFile file: String) -> String {
        let directory = SourceReader.directory(of: file)
        if directory.isEmpty { return ".." }
        if directory == "/" { return "/" }
        let parent = SourceReader.directory(of: directory)
        let last = directory.split(separator: "/").last.map(String.init) ?? directory
        if last == "." { return ".." }
        if last == ".." { return directory + "/.." }
        return parent.isEmpty ? "." : parent
    }
}

/// A configuration file that could not be loaded, with every problem found in it.
public struct ConfigFailure: Error, Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var errors: [ConfigError]

    public init(file: String, errors: [ConfigError]) {
        self.file = file
        self.errors = errors
    }

    public var description: String { errors.map(\.description).joined(separator: "\n") }
}
