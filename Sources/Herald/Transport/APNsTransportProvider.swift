import HeraldAPNs
import HeraldCore
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Makes real APNs transports (HeraldAPNs' `TenantTransport`).
///
/// At load it builds and checks the tenant's credential provider (a bad key or certificate
/// fails the tenant's load). The `TenantTransport` itself, with its TLS context and pools, is
/// made at the tenant's first send, so an idle tenant holds no TLS context, connection or task.
public struct APNsTransportProvider: TransportProvider {
    public var eventLoopGroup: any EventLoopGroup
    public var clock: any WallClock
    public var tokenRefresh: TokenRefreshPolicy
    /// Where provider tokens are shared with other instances and kept across restarts (the
    /// server's store); nil: each credential provider signs its own.
    public var tokenStore: (any ProviderTokenStore)?
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
        return LazyAPNsTransport(tenant: tenant, credentials: credentials, eventLoopGroup: eventLoopGroup, logger: logger)
    }
}

/// A tenant's `TenantTransport`, made at the first send.
final class LazyAPNsTransport: PushTransport {
    private enum State {
        case idle
        case open(TenantTransport)
        /// Draining or closed; the transport, if it was opened (a revocation may still close it at once).
        case closed(TenantTransport?)
    }

    private let tenant: TenantConfiguration
    private let credentials: any CredentialProvider
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State.idle)

    init(tenant: TenantConfiguration, credentials: any CredentialProvider, eventLoopGroup: any EventLoopGroup, logger: Logger) {
        self.tenant = tenant
        self.credentials = credentials
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
    }

    func send(_ notification: Notification, environment: APNsEnvironment, deadline: ContinuousClock.Instant) async throws -> APNsResponse {
        let transport = try opened()
        do {
            return try await transport.send(notification, environment: environment, deadline: deadline)
        } catch let error as APNsTransportError {
            throw Self.pushError(error)
        }
    }

    var credentialIdentity: String? { credentials.identity }

    func shutdown() async {
        await takeForClosing()?.drain()
    }

    func close() async {
        await takeForClosing()?.close()
    }

    private func takeForClosing() -> TenantTransport? {
        state.withLock { state -> TenantTransport? in
            switch state {
            case .idle:
                state = .closed(nil)
                return nil
            case .open(let transport), .closed(let transport?):
                state = .closed(transport)
                return transport
            case .closed(nil):
                return nil
            }
        }
    }

    private func opened() throws -> TenantTransport {
        try state.withLock { state throws -> TenantTransport in
            switch state {
            case .open(let transport):
                return transport
            case .closed:
                throw PushError.shuttingDown(tenant.id)
            case .idle:
                do {
                    let transport = try TenantTransport(tenant: tenant, credentials: credentials, eventLoopGroup: eventLoopGroup, logger: logger)
                    state = .open(transport)
                    return transport
                } catch let error as APNsTransportError {
                    throw Self.pushError(error)
                }
            }
        }
    }

    static func pushError(_ error: APNsTransportError) -> PushError {
        if error.isTimedOut {
            return PushError.deadlineExceeded(
                error.mayHaveBeenProcessed ? "no answer from APNs before the deadline" : "no stream became free before the deadline",
                mayHaveReachedAPNs: error.mayHaveBeenProcessed)
        }
        if error.isQueueFull {
            return PushError.queueFull()
        }
        if error.isPoolClosed {
            return PushError(code: .shuttingDown, message: "the tenant's connections are closing", mayHaveReachedAPNs: false)
        }
        return PushError.transport(error.description, surelyNotProcessed: !error.mayHaveBeenProcessed)
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
