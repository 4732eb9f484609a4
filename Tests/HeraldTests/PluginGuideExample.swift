import HeraldCore

/// `device-blocklist`: refuses sends to the device tokens a tenant lists, before they reach APNs.
///
/// ```yaml
/// plugins:
///   - name: device-blocklist
///     options:
///       tokens: ["00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0"]
/// ```
public struct DeviceBlocklistPluginFactory: PluginFactory {
    public let name = "device-blocklist"
    /// A tenant file cannot make the plugin hold more than this many tokens.
    public static let maximumTokens = 10_000

    public init() {}

    public func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware {
        let reader = try PluginOptions(options, allowed: ["tokens"])
        guard let listed = try reader.strings("tokens"), !listed.isEmpty else {
            throw reader.error("tokens", "is required: a list of device tokens")
        }
        guard listed.count <= Self.maximumTokens else {
            throw reader.error("tokens", "lists \(listed.count) tokens; at most \(Self.maximumTokens)")
        }
        var blocked: Set<DeviceToken> = []
        for (index, hex) in listed.enumerated() {
            do {
                blocked.insert(try DeviceToken(hex: hex))
            } catch {
                throw reader.error("tokens[\(index)]", error.message)
            }
        }
        environment.logger.info("device blocklist loaded", metadata: ["herald.blocked-devices": "\(blocked.count)"])
        return DeviceBlocklistMiddleware(blocked: blocked)
    }
}

/// The `device-blocklist` middleware of one tenant: a decision before each send, from memory
/// (it never waits, so it needs neither `.notBefore` nor `.check`, and nothing after the send).
public struct DeviceBlocklistMiddleware: PushMiddleware {
    let blocked: Set<DeviceToken>

    public func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
        guard let token = notification.deviceToken, blocked.contains(token) else { return .proceed }
        context.logger.debug("device on the blocklist: refused")
        throw PushError(
            code: .tokenRefused, message: "the device token is on the tenant's blocklist", field: "device_token")
    }
}
