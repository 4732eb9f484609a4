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
        /// The environment variable that holds the break-glass admin token. While it is unset or
        /// empty and the store holds no admin account, the `/admin` routes answer 404.
        public var adminTokenVariable: String = "HERALD_ADMIN_TOKEN"
        /// How long an audit log entry is kept, in seconds (one year).
        public var auditRetention: Double = 365 * 86_400
        /// How long a tenant's usage counts of an hour are kept, in seconds (400 days).
        public var usageRetention: Double = 400 * 86_400
        /// Whether sends are counted in the tenants' usage (`GET /admin/usage`).
        public var countUsage: Bool = true
        /// The bcrypt cost of console passwords set from now on (each hash keeps its own).
        public var passwordCost: Int = 12
        /// The costs `api.password_cost` accepts.
        public static let passwordCosts = 10...16

        public init() {}
    }

    /// How the job runner sends accepted batches (`jobs:`).
    public struct JobSettings: Sendable, Hashable {
        /// Notifications of one tenant's jobs on the wire at once.
        public var concurrencyPerTenant: Int = 100
        /// Items claimed from the store at a time, per job.
        public var claimSize: Int = 500
        /// True (the default): a job sent by callback runs its own tasks on its tenant's
        /// connection loop (`jobs.on_connection_loop`), so the sends' ends and the next sends
        /// share one thread: less CPU a batch notification. Its steps are not preempted there;
        /// false keeps them on the global executor.
        public var onConnectionLoop: Bool = true
        /// How long a claim holds items (seconds) before another runner may take them.
        public var lease: Double = 300
        /// The base of the name this server claims items under (`<claimant>/<instance id>`); a
        /// restarted server with the same base takes the unfinished items of its earlier
        /// instances back at once.
        public var claimant: String = "herald"
        /// Jobs of one tenant worked on at once; its other unfinished jobs wait in the store.
        public var jobsPerTenant: Int = 2
        /// A tenant's unfinished jobs (accepted or running) at most; a batch beyond gets 429 `quota_exceeded`.
        public var maxActiveJobsPerTenant: Int = 20
        /// Items of a tenant's unfinished jobs together at most; a batch beyond gets 429 `quota_exceeded`.
        public var maxPendingItemsPerTenant: Int = 1_000_000
        /// How long a finished or cancelled job (its report and items) is kept, in seconds.
        public var retention: Double = 7 * 24 * 3600
        /// Webhooks (the tenants' events) posted at once, all tenants together.
        public var webhookSenders: Int = 4
        /// Webhooks one tenant may have waiting in the outbox; beyond, new ones are refused and logged.
        public var webhookOutboxPerTenant: Int = 100_000
        /// Seconds between two heartbeats of this instance in the store's instance registry.
        public var heartbeatInterval: Double = 5
        /// Seconds after its last heartbeat another instance is taken for dead (its leases are
        /// released at once). At least three heartbeat intervals.
        public var instanceTimeout: Double = 30

        public init() {}
    }

    /// The APNsSandbox started inside `herald serve` (`sandbox:`); off unless enabled.
    public struct SandboxSettings: Sendable, Hashable {
        public var enabled: Bool = false
        /// The sandbox's own configuration file (`config/sandbox.yaml`).
        public var configFile: String = "config/sandbox.yaml"

        public init() {}
    }

    static let apiKeys = [
        "max_body_bytes", "max_batch_body_bytes", "max_batch_items", "admin_token_env", "audit_retention", "usage_retention",
        "count_usage", "password_cost",
    ]
    static let jobsKeys = [
        "concurrency_per_tenant", "claim_size", "lease", "claimant", "jobs_per_tenant", "max_active_jobs_per_tenant",
        "max_pending_items_per_tenant", "retention", "webhook_senders", "webhook_outbox_per_tenant", "heartbeat_interval",
        "instance_timeout", "on_connection_loop",
    ]
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
            if let node = api["audit_retention"],
                let value = diagnostics.duration(node, FieldPath(text: "api.audit_retention"), minimum: 86_400, allowZero: false)
            {
                if value <= 3_650 * 86_400 {
                    configuration.api.auditRetention = value
                } else {
                    diagnostics.error(at: node, "api.audit_retention", "must be at most 10 years (3650d)")
                }
            }
            if let node = api["usage_retention"],
                let value = diagnostics.duration(node, FieldPath(text: "api.usage_retention"), minimum: 7 * 86_400, allowZero: false)
            {
                if value <= 3_650 * 86_400 {
                    configuration.api.usageRetention = value
                } else {
                    diagnostics.error(at: node, "api.usage_retention", "must be at most 10 years (3650d)")
                }
            }
            if let node = api["count_usage"], let value = boolean(node, "api.count_usage", diagnostics: diagnostics) {
                configuration.api.countUsage = value
            }
            if let node = api["password_cost"],
                let value = diagnostics.integer(node, FieldPath(text: "api.password_cost"), in: APISettings.passwordCosts)
            {
                configuration.api.passwordCost = value
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
            if let node = jobs["on_connection_loop"], let value = boolean(node, "jobs.on_connection_loop", diagnostics: diagnostics) {
                configuration.jobs.onConnectionLoop = value
            }
            if let node = jobs["lease"], let value = diagnostics.duration(node, FieldPath(text: "jobs.lease"), minimum: 1, allowZero: false) {
                if value <= 86_400 {
                    configuration.jobs.lease = value
                } else {
                    diagnostics.error(at: node, "jobs.lease", "must be at most 1 day (24h)")
                }
            }
            if let node = jobs["claimant"], let value = diagnostics.string(node, FieldPath(text: "jobs.claimant")) {
                if !value.isEmpty, value.utf8.count <= 64, !value.contains("/") {
                    configuration.jobs.claimant = value
                } else {
                    diagnostics.error(at: node, "jobs.claimant", "must be 1 to 64 bytes without '/' (the instance id is added after a '/')")
                }
            }
            if let node = jobs["jobs_per_tenant"], let value = diagnostics.integer(node, FieldPath(text: "jobs.jobs_per_tenant"), in: 1...100) {
                configuration.jobs.jobsPerTenant = value
            }
            if let node = jobs["max_active_jobs_per_tenant"],
                let value = diagnostics.integer(node, FieldPath(text: "jobs.max_active_jobs_per_tenant"), in: 1...100_000)
            {
                configuration.jobs.maxActiveJobsPerTenant = value
            }
            if let node = jobs["max_pending_items_per_tenant"],
                let value = diagnostics.integer(node, FieldPath(text: "jobs.max_pending_items_per_tenant"), in: 1...1_000_000_000)
            {
                configuration.jobs.maxPendingItemsPerTenant = value
            }
            if let node = jobs["heartbeat_interval"],
                let value = diagnostics.duration(node, FieldPath(text: "jobs.heartbeat_interval"), minimum: 0.1, allowZero: false)
            {
                if value <= 60 {
                    configuration.jobs.heartbeatInterval = value
                } else {
                    diagnostics.error(at: node, "jobs.heartbeat_interval", "must be at most 60s")
                }
            }
            if let node = jobs["instance_timeout"],
                let value = diagnostics.duration(node, FieldPath(text: "jobs.instance_timeout"), minimum: 1, allowZero: false)
            {
                if value <= 3600 {
                    configuration.jobs.instanceTimeout = value
                } else {
                    diagnostics.error(at: node, "jobs.instance_timeout", "must be at most 1h")
                }
            }
            if configuration.jobs.instanceTimeout < 3 * configuration.jobs.heartbeatInterval {
                diagnostics.error(
                    at: jobs["instance_timeout"] ?? jobs["heartbeat_interval"] ?? node, "jobs.instance_timeout",
                    "must be at least three jobs.heartbeat_interval (a live instance must never look dead)")
            }
            if let node = jobs["webhook_senders"], let value = diagnostics.integer(node, FieldPath(text: "jobs.webhook_senders"), in: 1...256) {
                configuration.jobs.webhookSenders = value
            }
            if let node = jobs["webhook_outbox_per_tenant"],
                let value = diagnostics.integer(node, FieldPath(text: "jobs.webhook_outbox_per_tenant"), in: 1...10_000_000)
            {
                configuration.jobs.webhookOutboxPerTenant = value
            }
            if let node = jobs["retention"], let value = diagnostics.duration(node, FieldPath(text: "jobs.retention"), minimum: 60, allowZero: false) {
                if value <= 3_650 * 86_400 {
                    configuration.jobs.retention = value
                } else {
                    diagnostics.error(at: node, "jobs.retention", "must be at most 10 years (3650d)")
                }
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
