import HeraldCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Sends one tenant's notifications to APNs: the tenant's credential, and one
/// ``ConnectionPool`` per endpoint × credential, opened lazily on the first send.
///
/// Transports of different tenants share nothing but the `EventLoopGroup`: connections,
/// queues and limits are their own.
///
/// ```swift
/// let credentials = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
/// let transport = try TenantTransport(tenant: tenant, credentials: credentials, logger: logger)
/// let response = try await transport.send(notification)      // APNsResponse, any status
/// await transport.drain()
/// ```
///
/// Every APNs answer comes back as an ``APNsResponse`` (a 400 or a 410 is not an error). When
/// there is no answer, `send` throws ``APNsTransportError``, which says whether a resend could
/// duplicate the notification. A 403 `ExpiredProviderToken` is handled here: the credential is
/// told, and the notification is sent once more with a fresh token.
public final class TenantTransport: Sendable {
    /// The pools, one per endpoint. A transport has one credential, so this is "per endpoint ×
    /// credential"; a rotated credential gets a new transport (and new pools). At most two
    /// endpoints (production, development): a short list beats hashing on every send.
    private struct Pools {
        var byEndpoint: [(endpoint: APNsEndpoint, pool: ConnectionPool)] = []
        var closed = false

        var all: [ConnectionPool] { byEndpoint.map(\.pool) }
    }

    private struct CachedAuthorization {
        var value: String?
        var fetchedAt: NIODeadline
    }

    public let tenant: TenantConfiguration
    public let configuration: TransportConfiguration
    private let credentials: any CredentialProvider
    private let group: any EventLoopGroup
    private let logger: Logger
    private let sslContext: NIOSSLContext
    private let topics: Set<String>
    private let pools = Mutex(Pools())
    private let cachedAuthorization = Mutex<CachedAuthorization?>(nil)
    private let idGenerator = APNsIDGenerator()
    /// How long a fetched authorization header is reused before asking the credential again.
    /// The credential refreshes its token well before the hour, so a short reuse is safe.
    private let authorizationRecheck: TimeAmount = .seconds(30)

    /// - Parameters:
    ///   - tenant: the tenant (topics, endpoints, trust roots, pool settings).
    ///   - credentials: its credential provider (token or certificate).
    ///   - configuration: overrides of the tenant's pool settings; `nil` uses them.
    ///   - eventLoopGroup: the event loops to run connections on (shared by all tenants).
    /// - Throws: ``APNsTransportError`` `invalidConfiguration` when the trust roots or the
    ///   client identity cannot be used.
    public init(
        tenant: TenantConfiguration, credentials: any CredentialProvider, configuration: TransportConfiguration? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger
    ) throws {
        self.tenant = tenant
        self.credentials = credentials
        self.configuration = configuration ?? TransportConfiguration(pool: tenant.pool)
        self.group = eventLoopGroup
        var logger = logger
        logger[metadataKey: "herald.tenant"] = "\(tenant.id)"
        self.logger = logger
        self.topics = Set(tenant.topics)
        self.sslContext = try Self.makeSSLContext(tenant: tenant, credentials: credentials)
    }

    /// Sends one notification and returns APNs' answer.
    ///
    /// - Parameters:
    ///   - environment: production or development; `nil` uses the tenant's default.
    ///   - deadline: when to give up (queue time included); `nil` uses the request timeout.
    /// - Throws: ``APNsTransportError`` when there is no answer.
    public func send(_ notification: Notification, environment: APNsEnvironment? = nil, deadline: NIODeadline? = nil) async throws -> APNsResponse {
        // Unsafe (unchecked) continuation: the completion runs exactly once (see `send(…completion:)`).
        try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<APNsResponse, any Error>) in
            send(notification, environment: environment, deadline: deadline) { result in
                continuation.resume(with: result)
            }
        }
    }

    /// The outcome of one send: APNs' answer, or why there is none.
    public typealias Completion = @Sendable (Result<APNsResponse, APNsTransportError>) -> Void

    /// Sends one notification and calls `completion` exactly once with APNs' answer or the
    /// error. For callers that keep many notifications in flight without a task each (the
    /// completion runs on a connection's event loop: keep it short, and sending the next
    /// notification from it is cheap). Same rules as the `async` form, including the single
    /// resend after 403 ExpiredProviderToken.
    public func send(
        _ notification: Notification, environment: APNsEnvironment? = nil, deadline: NIODeadline? = nil,
        completion: @escaping Completion
    ) {
        let prepared: Prepared
        do {
            prepared = try prepare(notification, environment: environment, deadline: deadline)
        } catch let error as APNsTransportError {
            completion(.failure(error))
            return
        } catch {
            completion(.failure(.invalidConfiguration("\(error)")))
            return
        }
        if let authorization = freshCachedAuthorization() {
            submit(prepared, authorization: authorization, mayRetryExpired: true, completion: completion)
            return
        }
        Task { await self.submitWithCurrentAuthorization(prepared, mayRetryExpired: true, completion: completion) }
    }

    /// Gets the authorization (signing a token when needed) and submits, or completes with the error.
    private func submitWithCurrentAuthorization(_ prepared: Prepared, mayRetryExpired: Bool, completion: @escaping Completion) async {
        do {
            let authorization = try await currentAuthorization()
            submit(prepared, authorization: authorization, mayRetryExpired: mayRetryExpired, completion: completion)
        } catch let error as APNsTransportError {
            completion(.failure(error))
        } catch {
            completion(.failure(.invalidConfiguration("\(error)")))
        }
    }

    /// A checked notification on its way to one pool.
    private struct Prepared: Sendable {
        var notification: Notification
        var apnsID: NotificationID
        var deadline: NIODeadline
        var pool: ConnectionPool
    }

    private func prepare(_ notification: Notification, environment: APNsEnvironment?, deadline: NIODeadline?) throws -> Prepared {
        let environment = environment ?? tenant.endpoints.defaultEnvironment
        guard let endpoint = tenant.endpoints.endpoint(for: environment) else {
            throw APNsTransportError.noEndpoint(environment)
        }
        if let topic = notification.topic {
            guard topics.contains(topic) else { throw APNsTransportError.topicNotAllowed(topic) }
            try Self.checkFieldValue(topic, field: "topic")
        }
        if let collapseID = notification.collapseID {
            try Self.checkFieldValue(collapseID, field: "collapse_id")
        }
        return Prepared(
            notification: notification, apnsID: notification.id ?? idGenerator.next(),
            deadline: deadline ?? (NIODeadline.now() + configuration.requestTimeout), pool: try pool(for: endpoint))
    }

    private func submit(_ prepared: Prepared, authorization: String?, mayRetryExpired: Bool, completion: @escaping Completion) {
        let request = APNsRequest(
            notification: prepared.notification, apnsID: prepared.apnsID, authorization: authorization, deadline: prepared.deadline
        ) { result in
            if mayRetryExpired, let authorization, case .success(let response) = result, response.status == 403,
                response.reason == .expiredProviderToken
            {
                self.resendWithFreshToken(prepared, rejected: authorization, completion: completion)
                return
            }
            completion(result)
        }
        prepared.pool.submit(request)
    }

    /// The token expired under us: tell the credential, get a fresh token and resend once
    /// (APNs did not accept the first attempt, so this cannot duplicate it).
    private func resendWithFreshToken(_ prepared: Prepared, rejected: String, completion: @escaping Completion) {
        logger.info(
            "APNs rejected the provider token as expired; resending with a fresh one",
            metadata: ["herald.apns-id": "\(prepared.apnsID)"])
        Task {
            await self.credentials.tokenRejectedAsExpired(rejected)
            self.cachedAuthorization.withLock { $0 = nil }
            await self.submitWithCurrentAuthorization(prepared, mayRetryExpired: false, completion: completion)
        }
    }

    /// ``send(_:environment:deadline:)`` with a `ContinuousClock` deadline.
    public func send(_ notification: Notification, environment: APNsEnvironment?, deadline: ContinuousClock.Instant) async throws -> APNsResponse {
        let remaining = ContinuousClock.now.duration(to: deadline)
        let (seconds, attoseconds) = remaining.components
        let nanos = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let amount: TimeAmount = nanos.overflow ? .hours(24) : .nanoseconds(nanos.partialValue + attoseconds / 1_000_000_000)
        return try await send(notification, environment: environment, deadline: NIODeadline.now() + amount)
    }

    /// One task executor per event loop of the transport's group, for callers that send a lot:
    /// tasks running on them send through a connection on their own loop when it has room.
    public func eventLoopExecutors() -> [EventLoopTaskExecutor] {
        group.makeIterator().map { EventLoopTaskExecutor($0) }
    }

    /// Stops taking sends, lets queued and in-flight notifications finish, then closes every connection.
    public func drain() async {
        let all = pools.withLock { pools in
            pools.closed = true
            return pools.all
        }
        await withTaskGroup(of: Void.self) { group in
            for pool in all { group.addTask { await pool.drain() } }
        }
    }

    /// Closes every connection now; queued and in-flight notifications fail.
    public func close() async {
        let all = pools.withLock { pools in
            pools.closed = true
            return pools.all
        }
        await withTaskGroup(of: Void.self) { group in
            for pool in all { group.addTask { await pool.close() } }
        }
    }

    /// Connections per endpoint and queued requests right now (for diagnostics and tests).
    public var status: [TransportPoolStatus] {
        let all = pools.withLock { $0.all }
        return all.map { pool in
            let snapshot = pool.snapshot
            var ready = 0
            var maxStreams = 0
            var inFlight = 0
            for connection in snapshot.connections {
                if case .active(let max) = connection.state {
                    ready += 1
                    maxStreams += max
                }
                inFlight += connection.inFlight
            }
            return TransportPoolStatus(
                endpoint: pool.endpoint, connections: snapshot.connections.count, readyConnections: ready,
                maxStreams: maxStreams, inFlight: inFlight, queued: snapshot.queued)
        }
    }

    // MARK: Internals

    /// The values a caller chooses must be valid HTTP/2 field values (RFC 9113 8.2.1): no
    /// control characters, no whitespace at either end. The connections do not re-validate
    /// every header block (the rest is built here and known to be valid), so this is the check.
    static func checkFieldValue(_ value: String, field: String) throws(APNsTransportError) {
        if let problem = Notification.headerValueProblem(value) { throw .invalidRequest(field: field, problem) }
    }

    private func pool(for endpoint: APNsEndpoint) throws -> ConnectionPool {
        try pools.withLock { pools in
            guard !pools.closed else { throw APNsTransportError.poolClosed }
            for entry in pools.byEndpoint where entry.endpoint == endpoint { return entry.pool }
            var logger = logger
            logger[metadataKey: "herald.credential"] = "\(credentials.identity)"
            let pool = ConnectionPool(
                endpoint: endpoint, sslContext: sslContext, configuration: configuration.poolConfiguration, group: group,
                logger: logger)
            pools.byEndpoint.append((endpoint, pool))
            return pool
        }
    }

    /// The authorization header to send now, when known without asking the credential:
    /// `.some(nil)` for certificates, `.some(value)` when cached and fresh, `nil` otherwise.
    private func freshCachedAuthorization() -> String?? {
        guard credentials.kind == .token else { return .some(nil) }
        let now = NIODeadline.now()
        let recheck = authorizationRecheck
        return cachedAuthorization.withLock { cached -> String?? in
            guard let cached, now - cached.fetchedAt < recheck else { return nil }
            return .some(cached.value)
        }
    }

    private func currentAuthorization() async throws -> String? {
        if let cached = freshCachedAuthorization() { return cached }
        let now = NIODeadline.now()
        let value: String?
        do {
            value = try await credentials.authorization()
        } catch {
            throw APNsTransportError.invalidConfiguration(
                "the provider token could not be made", underlying: error)
        }
        cachedAuthorization.withLock { $0 = CachedAuthorization(value: value, fetchedAt: now) }
        return value
    }

    private static func makeSSLContext(tenant: TenantConfiguration, credentials: any CredentialProvider) throws -> NIOSSLContext {
        // Without a client identity (token tenants) the context depends only on the trust roots;
        // building one reads and parses the system trust store (milliseconds), so tenants that
        // trust the same roots share one context (contexts are immutable and thread-safe).
        guard credentials.kind == .token else { return try buildSSLContext(tenant: tenant, credentials: credentials) }
        return try SharedTLSContexts.shared.context(trustRootsPEM: tenant.endpoints.trustRootsPEM) {
            try buildSSLContext(tenant: tenant, credentials: credentials)
        }
    }

    private static func buildSSLContext(tenant: TenantConfiguration, credentials: any CredentialProvider) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        if let pem = tenant.endpoints.trustRootsPEM {
            do {
                let roots = try NIOSSLCertificate.fromPEMBytes(pem)
                guard !roots.isEmpty else {
                    throw APNsTransportError.invalidConfiguration("no certificate in \(tenant.endpoints.trustRootsOrigin ?? "ca_file")")
                }
                tls.additionalTrustRoots = [.certificates(roots)]
            } catch let error as APNsTransportError {
                throw error
            } catch {
                throw APNsTransportError.invalidConfiguration(
                    "the trust roots in \(tenant.endpoints.trustRootsOrigin ?? "ca_file") could not be read",
                    underlying: error)
            }
        }
        do {
            tls = try credentials.tlsConfiguration(base: tls)
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw APNsTransportError.invalidConfiguration(
                "the TLS configuration could not be built", underlying: error)
        }
    }
}

/// TLS client contexts without a client identity, one per set of trust roots (`nil`: the system's
/// only), kept for the process's life (a handful: one per distinct `ca_file`, at most `limit`).
final class SharedTLSContexts: Sendable {
    static let shared = SharedTLSContexts()
    static let limit = 64

    private let contexts = Mutex<[[UInt8]?: NIOSSLContext]>([:])

    func context(trustRootsPEM: [UInt8]?, make: () throws -> NIOSSLContext) throws -> NIOSSLContext {
        if let known = contexts.withLock({ $0[trustRootsPEM] }) { return known }
        let made = try make()
        return contexts.withLock { contexts in
            if let known = contexts[trustRootsPEM] { return known }
            if contexts.count >= Self.limit { contexts.removeAll() }
            contexts[trustRootsPEM] = made
            return made
        }
    }
}

/// One pool's state, for diagnostics.
public struct TransportPoolStatus: Sendable, Hashable {
    public var endpoint: APNsEndpoint
    public var connections: Int
    public var readyConnections: Int
    /// The sum of the ready connections' stream limits.
    public var maxStreams: Int
    public var inFlight: Int
    public var queued: Int
}
