import Foundation
import HeraldCore
import Yams

// The `api:`, `jobs:` and `sandbox:` sections of `config/herald.yaml`, read by `herald serve`.
extension ServerConfiguration {
    /// The HTTP API's limits and where the admin token comes from (`api:`).
    public struct APISettings: Sendable, Hashable {
        /// The largest request body of single requests (`POST /v1/notifications`, `PUT /v1/devices/…`), in bytes.
        public var maxBodyBytes: Int = 64 * 1024
        /// The largest request body of `POST /v1/notifications/batch`, in bytes.
        public var maxBatchBodyBytes: Int = 32 * 1024 * 1024
        /// The most notifications one batch may hold.
        public var maxBatchItems: Int = 100_000
        /// The environment variable that holds the admin token. While it is unset or empty, the
        /// `/admin` routes answer 404.
        public var adminTokenVariable: String = "HERALD_ADMIN_TOKEN"

        public init() {}
    }

    /// How the job runner sends accepted batches (`jobs:`).
    public struct JobSettings: Sendable, Hashable {
        /// Notifications of one tenant's jobs on the wire at once.
        public var concurrencyPerTenant: Int = 100
        /// Items claimed from the store at a time, per job.
        public var claimSize: Int = 500
        /// How long a claim holds items (seconds) before another runner may take them.
        public var lease: Double = 300
        /// The name this server claims items under; a restarted server with the same name takes
        /// its unfinished items back at once.
        public var claimant: String = "herald"

        public init() {}
    }

    /// The APNsSandbox started inside `herald serve` (`sandbox:`); off unless enabled.
    public struct SandboxSettings: Sendable, Hashable {
        public var enabled: Bool = false
        /// The sandbox's own configuration file (`config/sandbox.yaml`).
        public var configFile: String = "config/sandbox.yaml"

        public init() {}
    }

    static let apiKeys = ["max_body_bytes", "max_batch_body_bytes", "max_batch_items", "admin_token_env"]
    static let jobsKeys = ["concurrency_per_tenant", "claim_size", "lease", "claimant"]
    static let sandboxKeys = ["enabled", "config"]

    /// Reads the `api:`, `jobs:` and `sandbox:` sections of the top-level mapping.
    static func parseServeSections(_ mapping: CheckedMapping, into configuration: inout ServerConfiguration, diagnostics: YAMLDiagnostics) {
        if let node = mapping["api"],
            let api = CheckedMapping(node, path: FieldPath(text: "api"), allowedKeys: apiKeys, diagnostics: diagnostics)
        {
            if let node = api["max_body_bytes"],
                let value = diagnostics.integer(node, FieldPath(text: "api.max_body_bytes"), in: 1024...(16 * 1024 * 1024))
            {
                configuration.api.maxBodyBytes = value
            }
            if let node = api["max_batch_body_bytes"],
                let value = diagnostics.integer(node, FieldPath(text: "api.max_batch_body_bytes"), in: 1024...(1024 * 1024 * 1024))
            {
                configuration.api.maxBatchBodyBytes = value
            }
            if let node = api["max_batch_items"],
                let value = diagnostics.integer(node, FieldPath(text: "api.max_batch_items"), in: 1...1_000_000)
            {
                configuration.api.maxBatchItems = value
            }
            if let node = api["admin_token_env"], let value = diagnostics.string(node, FieldPath(text: "api.admin_token_env")) {
                if value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) {
                    configuration.api.adminTokenVariable = value
                } else {
                    diagnostics.error(at: node, "api.admin_token_env", "must be an environment variable name (A-Z, a-z, 0-9, _), not '\(value)'")
                }
            }
        }
        if let node = mapping["jobs"],
            let jobs = CheckedMapping(node, path: FieldPath(text: "jobs"), allowedKeys: jobsKeys, diagnostics: diagnostics)
        {
            if let node = jobs["concurrency_per_tenant"],
                let value = diagnostics.integer(node, FieldPath(text: "jobs.concurrency_per_tenant"), in: 1...10_000)
            {
                configuration.jobs.concurrencyPerTenant = value
            }
            if let node = jobs["claim_size"], let value = diagnostics.integer(node, FieldPath(text: "jobs.claim_size"), in: 1...100_000) {
                configuration.jobs.claimSize = value
            }
            if let node = jobs["lease"], let value = diagnostics.duration(node, FieldPath(text: "jobs.lease"), minimum: 1, allowZero: false) {
                configuration.jobs.lease = value
            }
            if let node = jobs["claimant"], let value = diagnostics.string(node, FieldPath(text: "jobs.claimant")) {
                configuration.jobs.claimant = value
            }
        }
        if let node = mapping["sandbox"],
            let sandbox = CheckedMapping(node, path: FieldPath(text: "sandbox"), allowedKeys: sandboxKeys, diagnostics: diagnostics)
        {
            if let node = sandbox["enabled"] {
                if case .scalar = node, node.tagName == .bool, let value = node.bool {
                    configuration.sandbox.enabled = value
                    diagnostics.record("sandbox.enabled", node)
                } else {
                    diagnostics.error(at: node, "sandbox.enabled", "must be true or false, not \(node.kindForMessages)")
                }
            }
            if let node = sandbox["config"], let value = diagnostics.string(node, FieldPath(text: "sandbox.config")) {
                configuration.sandbox.configFile = value
            }
        }
    }

    /// Resolves the relative paths of the serve sections against the configuration's base directory.
    static func resolveServePaths(_ configuration: inout ServerConfiguration, against base: String) {
        configuration.sandbox.configFile = SourceReader.resolve(configuration.sandbox.configFile, against: base)
    }
}
