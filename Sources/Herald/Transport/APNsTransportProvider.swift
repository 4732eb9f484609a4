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

    public init(
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, clock: any WallClock = SystemWallClock(),
        tokenRefresh: TokenRefreshPolicy = TokenRefreshPolicy()
    ) {
        self.eventLoopGroup = eventLoopGroup
        self.clock = clock
        self.tokenRefresh = tokenRefresh
    }

    public func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport {
        let credentials = try CredentialProviders.make(for: tenant, clock: clock, tokenRefresh: tokenRefresh)
        return LazyAPNsTransport(tenant: tenant, credentials: credentials, eventLoopGroup: eventLoopGroup, logger: logger)
    }
}

/// A tenant's `TenantTransport`, made at the first send.
final class LazyAPNsTransport: PushTransport {
    private enum State {
        case idle
        case open(TenantTransport)
        case closed
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

    func shutdown() async {
        let open = state.withLock { state -> TenantTransport? in
            defer { state = .closed }
            if case .open(let transport) = state { return transport }
            return nil
        }
        await open?.drain()
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
        if error.isPoolClosed {
            return PushError(code: .shuttingDown, message: "the tenant's connections are closing", mayHaveReachedAPNs: false)
        }
        return PushError.transport(error.description, surelyNotProcessed: !error.mayHaveBeenProcessed)
    }
}
