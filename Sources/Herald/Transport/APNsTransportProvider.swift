import HeraldAPNs
import HeraldCore
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Makes real APNs transports: one ``TenantTransport`` per tenant, the whole send stack.
///
/// At load it builds and checks the tenant's credential provider (a bad key or certificate
/// fails the tenant's load) and returns the transport unopened: its TLS context and pools are
/// made at the tenant's first send, so an idle tenant holds no connection or task.
public struct APNsTransportProvider: TransportProvider {
    public var eventLoopGroup: any EventLoopGroup
    public var clock: any WallClock
    public var tokenRefresh: TokenRefreshPolicy
    /// Where provider tokens are shared with other instances and kept across restarts (the
    /// server's store); nil: each credential provider signs its own.
    public var tokenStore: (any ProviderTokenStore)?
    /// The most streams a transport opens on one connection, whatever APNs allows; nil: the
    /// transport's default (`herald bench --max-streams`).
    public var streamCeiling: Int?
    /// The outbound proxy of every tenant whose file does not choose (`config/herald.yaml`'s
    /// `proxy:`); nil: directly.
    public var defaultProxy: EgressProxy?
    /// The credential providers made so far, per tenant and credential identity: a tenant that
    /// is reloaded with the same key or certificate keeps its provider (and its cached token),
    /// so a reload never signs a second token for a key within APNs' 20 minutes.
    let credentialCache = CredentialProviderCache()

    public init(
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, clock: any WallClock = SystemWallClock(),
        tokenRefresh: TokenRefreshPolicy = TokenRefreshPolicy()
    ) {
        self.eventLoopGroup = eventLoopGroup
        self.clock = clock
        self.tokenRefresh = tokenRefresh
    }

    public func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport {
        let made = try CredentialProviders.make(
            for: tenant, clock: clock, tokenRefresh: tokenRefresh, tokenStore: tokenStore)
        let credentials = credentialCache.provider(for: tenant.id, made)
        var configuration = TransportConfiguration(pool: tenant.pool)
        switch tenant.proxy {
        case .direct?: configuration.proxy = nil
        case .proxy(let proxy)?: configuration.proxy = proxy
        case nil: configuration.proxy = defaultProxy
        }
        if let streamCeiling { configuration.streamCeiling = streamCeiling }
        return TenantTransport(
            tenant: tenant, credentials: credentials, configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
    }
}

/// Credential providers by credential identity, remembered for the last few credentials of
/// each tenant.
///
/// A provider is reused whenever a tenant is (re)loaded with a credential already in use: after a
/// reload that kept the key or certificate, after switching back to a key used shortly before,
/// and when several tenants are configured with the same key. Its cached token then stays in use:
/// APNs refuses a key's new token within 20 minutes of the last one, whichever connection or
/// tenant carries it.
final class CredentialProviderCache: Sendable {
    /// Credentials remembered per tenant (older ones are forgotten; rotations are rare).
    static let perTenant = 4

    private struct State {
        var providers: [String: any CredentialProvider] = [:]
        /// Per tenant, the identities it used, oldest first.
        var recent: [TenantID: [String]] = [:]
    }

    private let state = Mutex(State())

    /// The provider already in use for `made`'s credential, or `made` (then remembered).
    func provider(for tenant: TenantID, _ made: any CredentialProvider) -> any CredentialProvider {
        let identity = made.identity
        return state.withLock { state in
            let provider = state.providers[identity] ?? made
            state.providers[identity] = provider
            var recent = state.recent[tenant, default: []].filter { $0 != identity }
            recent.append(identity)
            let dropped = recent.count > Self.perTenant ? Array(recent.prefix(recent.count - Self.perTenant)) : []
            recent.removeFirst(dropped.count)
            state.recent[tenant] = recent
            for old in dropped where !state.recent.values.contains(where: { $0.contains(old) }) {
                state.providers[old] = nil
            }
            return provider
        }
    }
}
