import FeedbackPlugin
import HeraldCore
import Metrics
import MetricsPlugin
import RateLimitPlugin

/// Maps plugin names, as tenants write them under `plugins:`, to the factories that build them.
///
/// `retry` is reserved for the built-in retry: listing it sets the retry's options (``RetryPolicy``;
/// the router resends around the whole pipeline, wherever the entry is); a tenant that does not
/// list it gets the defaults.
///
/// ```swift
/// var registry = PluginRegistry.standard()
/// registry.register(MyPluginFactory())
/// ```
public struct PluginRegistry: Sendable {
    /// The name of the built-in retry entry.
    public static let retryName = "retry"

    private var factories: [String: any PluginFactory] = [:]

    public init() {}

    /// The plugins that ship with Herald: `rate-limit`, `feedback` and `metrics`.
    /// - Parameter metricsFactory: the metrics backend of the `metrics` plugin (nil: `MetricsSystem`'s).
    public static func standard(metricsFactory: (any MetricsFactory)? = nil) -> PluginRegistry {
        var registry = PluginRegistry()
        registry.register(RateLimitPluginFactory())
        registry.register(FeedbackPluginFactory())
        registry.register(MetricsPluginFactory(factory: metricsFactory))
        return registry
    }

    /// Adds (or replaces) a factory under its name.
    public mutating func register(_ factory: any PluginFactory) {
        precondition(factory.name != Self.retryName, "'retry' is the built-in retry's name")
        factories[factory.name] = factory
    }

    public func factory(named name: String) -> (any PluginFactory)? { factories[name] }

    /// Every name a tenant may use, sorted, `retry` included.
    public var names: [String] { (Array(factories.keys) + [Self.retryName]).sorted() }

    /// Builds a tenant's middlewares in the order its YAML lists them, and its retry policy.
    /// - Throws: ``PluginConfigurationError`` for the first entry that is unknown or has bad options.
    public func makePlugins(
        for tenant: TenantConfiguration, environment makeEnvironment: (PluginConfiguration) -> PluginEnvironment
    ) throws(PluginConfigurationError) -> TenantPlugins {
        var middlewares: [any PushMiddleware] = []
        var retry = RetryPolicy()
        var seen: [String: SourceLocation] = [:]
        for (index, entry) in tenant.plugins.enumerated() {
            if let first = seen[entry.name] {
                throw PluginConfigurationError(
                    location: entry.location, index: index, plugin: entry.name, option: nil,
                    message: "is listed twice (first at line \(first.line))")
            }
            seen[entry.name] = entry.location
            if entry.name == Self.retryName {
                do {
                    retry = try RetryPolicy(options: entry.options)
                } catch {
                    throw PluginConfigurationError(
                        location: entry.location, index: index, plugin: entry.name, option: error.option,
                        message: error.message)
                }
                continue
            }
            guard let factory = factories[entry.name] else {
                throw PluginConfigurationError(
                    location: entry.location, index: index, plugin: entry.name, option: nil,
                    message: "unknown plugin (known: \(names.joined(separator: ", ")))")
            }
            do {
                middlewares.append(try factory.make(options: entry.options, environment: makeEnvironment(entry)))
            } catch {
                throw PluginConfigurationError(
                    location: entry.location, index: index, plugin: entry.name, option: error.option,
                    message: error.message)
            }
        }
        return TenantPlugins(middlewares: middlewares, retry: retry)
    }
}

/// A tenant's `plugins:` as built: its middlewares, outermost first, and its retry policy.
public struct TenantPlugins: Sendable {
    public var middlewares: [any PushMiddleware]
    public var retry: RetryPolicy

    public init(middlewares: [any PushMiddleware] = [], retry: RetryPolicy = RetryPolicy()) {
        self.middlewares = middlewares
        self.retry = retry
    }
}

/// A tenant's `plugins:` entry that cannot be used: an unknown name or bad options. The tenant
/// does not load; the others are not disturbed.
///
/// Reads like the rest of the config errors:
/// `tenants/acme.yaml:14:7: plugins[0].options.per_second: plugin 'rate-limit': must be greater than 0, got -5`
public struct PluginConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Where the plugin entry is in the tenant file.
    public var location: SourceLocation
    /// The entry's position in the `plugins:` list.
    public var index: Int
    public var plugin: String
    /// The option at fault (`per_topic.burst`), nil when the entry as a whole is.
    public var option: String?
    public var message: String

    public init(location: SourceLocation, index: Int, plugin: String, option: String?, message: String) {
        self.location = location
        self.index = index
        self.plugin = plugin
        self.option = option
        self.message = message
    }

    /// The field path, in the style of the tenant loader's errors.
    public var field: String {
        var path = "plugins[\(index)]"
        if let option { path += ".options." + option }
        return path
    }

    public var description: String { "\(location): \(field): plugin '\(plugin)': \(message)" }
}
