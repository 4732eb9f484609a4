import Foundation
import HeraldCore
import Yams

// The `storage:` section of `config/herald.yaml`: which store `herald serve` opens. Without it,
// the embedded SQLite file at `storage_path` (the default, for a single instance). With
// `storage.postgres`, everything (jobs, results, invalid tokens, reports, provider tokens, the
// webhook outbox, the instance registry) is in PostgreSQL and `storage_path` is not used.
//
//   storage:
//     postgres:
//       url: postgres://herald@db.internal:5432/herald   # no password in the URL
//       password: env:HERALD_POSTGRES_PASSWORD            # or file:PATH
//       pool_size: 10
//       schema: herald                                    # optional
//       tls: true
//       call_timeout: 30s                                  # the longest one call waits for the server
extension ServerConfiguration {
    /// The store `herald serve` opens.
    public enum Storage: Sendable, Hashable {
        /// The SQLite file at ``ServerConfiguration/storagePath``.
        case sqlite
        /// A PostgreSQL database shared by every instance.
        case postgres(PostgresSettings)
    }

    /// `storage.postgres`: where the shared database is and how to sign in. The password is read
    /// from the environment or a file when the configuration loads; it is never part of the URL,
    /// and neither the URL nor any message shows it.
    public struct PostgresSettings: Sendable, Hashable {
        public var host: String
        public var port: Int = 5432
        public var username: String
        public var database: String
        /// The password, from ``passwordReference``; nil when the server needs none.
        public var password: Secret?
        public var passwordReference: SecretReference?
        /// The connections this instance opens at start and keeps open (1 to 1000).
        public var poolSize: Int = 10
        /// The schema Herald's tables live in; nil: the role's search path.
        public var schema: String?
        /// TLS to the server (required when true).
        public var tls: Bool = false
        /// The longest one store call (a query, or a transaction with its queries) waits for the
        /// server before it fails, in seconds (1 to 3600).
        public var callTimeout: Double = 30

        public init(host: String, port: Int = 5432, username: String, database: String) {
            self.host = host
            self.port = port
            self.username = username
            self.database = database
        }

        /// `host:port/database`, for logs and the startup banner (no user, no password).
        public var displayName: String { "postgres \(host):\(port)/\(database)" }
    }

    static let storageKeys = ["postgres"]
    static let postgresKeys = ["url", "password", "pool_size", "schema", "tls", "call_timeout"]

    /// Reads `storage:`; `base` anchors a relative `file:` password path.
    static func parseStorageSection(
        _ mapping: CheckedMapping, into configuration: inout ServerConfiguration, base: String,
        environment: [String: String], diagnostics: YAMLDiagnostics
    ) {
        guard let node = mapping["storage"],
            let storage = CheckedMapping(
                node, path: FieldPath(text: "storage"), allowedKeys: storageKeys, diagnostics: diagnostics)
        else { return }
        guard let postgresNode = storage["postgres"],
            let postgres = CheckedMapping(
                postgresNode, path: FieldPath(text: "storage.postgres"), allowedKeys: postgresKeys,
                diagnostics: diagnostics)
        else { return }
        guard let urlNode = postgres["url"] else {
            diagnostics.error(
                at: postgresNode, "storage.postgres.url", "is required: postgres://USER@HOST[:PORT]/DATABASE")
            return
        }
        guard let url = diagnostics.string(urlNode, FieldPath(text: "storage.postgres.url")) else { return }
        // The URL is never repeated in a message: it might hold the password.
        guard let components = URLComponents(string: url),
            components.scheme == "postgres" || components.scheme == "postgresql",
            let host = components.host, !host.isEmpty, let user = components.user, !user.isEmpty
        else {
            diagnostics.error(
                at: urlNode, "storage.postgres.url", "must read postgres://USER@HOST[:PORT]/DATABASE")
            return
        }
        if components.password != nil {
            diagnostics.error(
                at: urlNode, "storage.postgres.url",
                "must not hold the password: give it as storage.postgres.password: env:NAME or file:PATH")
        }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/"), components.query == nil else {
            diagnostics.error(
                at: urlNode, "storage.postgres.url",
                "must name the database and nothing after it: postgres://USER@HOST[:PORT]/DATABASE")
            return
        }
        var settings = PostgresSettings(
            host: host, port: components.port ?? 5432, username: user, database: database)
        if let node = postgres["password"],
            let text = diagnostics.string(node, FieldPath(text: "storage.postgres.password"))
        {
            switch SecretReference.parse(text, plainIsPath: false) {
            case .success(let reference):
                settings.passwordReference = reference
                switch SourceReader(environment: environment).load(reference, baseDirectory: base, trimNewline: true) {
                case .success(let secret): settings.password = secret
                case .failure(let problem):
                    diagnostics.error(at: node, "storage.postgres.password", problem.message)
                }
            case .failure(.notAReference):
                diagnostics.error(
                    at: node, "storage.postgres.password",
                    "must be env:NAME or file:PATH; a password is never written in this file")
            case .failure(.badEnvironmentName):
                diagnostics.error(
                    at: node, "storage.postgres.password", "env: must name a variable (A-Z, a-z, 0-9, _)")
            case .failure(.emptyPath):
                diagnostics.error(at: node, "storage.postgres.password", "file: must name a file")
            }
        }
        if let node = postgres["pool_size"],
            let value = diagnostics.integer(node, FieldPath(text: "storage.postgres.pool_size"), in: 1...1_000)
        {
            settings.poolSize = value
        }
        if let node = postgres["schema"], let value = diagnostics.string(node, FieldPath(text: "storage.postgres.schema"))
        {
            if isValidSchemaName(value) {
                settings.schema = value
            } else {
                diagnostics.error(
                    at: node, "storage.postgres.schema",
                    "must be 1 to 63 of a-z 0-9 _, not starting with a digit, not '\(value)'")
            }
        }
        if let node = postgres["tls"] {
            if case .scalar = node, node.tagName == .bool, let value = node.bool {
                settings.tls = value
                diagnostics.record("storage.postgres.tls", node)
            } else {
                diagnostics.error(at: node, "storage.postgres.tls", "must be true or false, not \(node.kindForMessages)")
            }
        }
        if let node = postgres["call_timeout"],
            let value = diagnostics.duration(node, FieldPath(text: "storage.postgres.call_timeout"), minimum: 1, allowZero: false)
        {
            if value <= 3600 {
                settings.callTimeout = value
            } else {
                diagnostics.error(at: node, "storage.postgres.call_timeout", "must be at most 1h")
            }
        }
        configuration.storage = .postgres(settings)
    }

    /// A schema name Herald may put in SQL as an identifier (the same rule as the PostgreSQL store's).
    static func isValidSchemaName(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63,
            !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first)
        else { return false }
        return name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
        }
    }
}
