/// Builds one runtime plugin's middleware from the options a tenant's YAML gives it.
///
/// Factories are registered by name in Herald's plugin registry; a tenant switches a plugin on
/// by listing its name under `plugins:`. `make` runs once per tenant load; it validates the
/// options and throws a ``PluginOptionError`` naming the offending option.
///
/// ```swift
/// struct EchoPluginFactory: PluginFactory {
///     let name = "echo"
///     func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware {
///         let reader = try PluginOptions(options, allowed: ["loud"])
///         return EchoMiddleware(loud: try reader.bool("loud", default: false))
///     }
/// }
/// ```
public protocol PluginFactory: Sendable {
    /// The name tenants use in their YAML (`rate-limit`, `feedback`, …).
    var name: String { get }
    func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware
}

/// Bad options for a plugin. Herald adds the tenant file, line and plugin name.
public struct PluginOptionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The option's path, e.g. `per_second` or `per_topic.burst`; nil for the options as a whole.
    public var option: String?
    public var message: String

    public init(option: String?, message: String) {
        self.option = option
        self.message = message
    }

    public var description: String {
        if let option { return "option '\(option)': \(message)" }
        return message
    }
}

/// What a plugin may use: everything in here is scoped to the one tenant the plugin is built
/// for. A plugin has no way to reach another tenant's runtime, store rows or credentials.
public struct PluginEnvironment: Sendable {
    public var tenant: TenantID
    /// The tenant's topics (bounded; safe as metric label values).
    public var topics: [String]
    /// The tenant file's path (to resolve relative `file:` references).
    public var tenantFile: String
    /// Where in the tenant file this plugin was listed.
    public var location: SourceLocation?
    public var logger: PushLogger
    public var clock: any PushClock
    /// The tenant's invalid device tokens.
    public var invalidTokens: any InvalidTokenRecorder
    /// Sends HTTP POSTs (webhooks).
    public var webhooks: any WebhookSender
    /// Runs work after the send it belongs to has returned (webhook retries without a queue).
    public var tasks: any PluginTaskRunner
    /// The durable webhook queue, when the server has one (`herald serve` does): webhooks go
    /// there rather than into a task each.
    public var webhookQueue: (any WebhookQueue)?
    /// Resolves a secret reference (`env:NAME` or `file:path`, relative to the tenant file).
    public var secrets: any SecretResolver
    /// The tenant's webhook (its `webhook:` section), where a plugin tells the tenant about
    /// events; nil when the tenant has none.
    public var webhook: TenantWebhook?

    public init(
        tenant: TenantID, topics: [String], tenantFile: String, location: SourceLocation? = nil,
        logger: PushLogger = .disabled, clock: any PushClock = SystemPushClock(),
        invalidTokens: any InvalidTokenRecorder, webhooks: any WebhookSender, tasks: any PluginTaskRunner,
        secrets: any SecretResolver, webhookQueue: (any WebhookQueue)? = nil, webhook: TenantWebhook? = nil
    ) {
        self.tenant = tenant
        self.topics = topics
        self.tenantFile = tenantFile
        self.location = location
        self.logger = logger
        self.clock = clock
        self.invalidTokens = invalidTokens
        self.webhooks = webhooks
        self.tasks = tasks
        self.secrets = secrets
        self.webhookQueue = webhookQueue
        self.webhook = webhook
    }
}

/// Resolves `env:NAME` and `file:path` secret references for plugin options.
public protocol SecretResolver: Sendable {
    /// - Throws: a message fit for a ``PluginOptionError`` (never the secret itself).
    func resolve(_ reference: String) throws -> Secret
}

/// Runs work that outlives the send it was started by (e.g. a webhook's retries), so that the
/// send itself does not wait for it. Herald tracks these tasks and waits for them on shutdown.
public protocol PluginTaskRunner: Sendable {
    func run(_ operation: @escaping @Sendable () async -> Void)
}
