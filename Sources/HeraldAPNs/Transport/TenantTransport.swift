import EventLoopExecutors
import Foundation
import HeraldCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// One tenant's client to APNs: its credential, its connection pools (one per endpoint, opened
/// at the first send), its counters, and the translation of transport failures into
/// ``PushError``. It is the whole per-tenant send stack: the router's ``PushTransport`` for the
/// tenant, made unopened when the tenant loads.
///
/// Transports of different tenants share nothing but the `EventLoopGroup` (and, for token
/// tenants, an immutable TLS context per set of trust roots): connections, queues and limits
/// are their own.
///
/// ```swift
/// let credentials = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
/// try TenantTransport.validate(tenant: tenant, credentials: credentials)   // TLS builds
/// let transport = TenantTransport(tenant: tenant, credentials: credentials, logger: logger)
/// let admitted = try tenant.admit(notification, id: ids.nextID(), environment: .production)
/// let response = try await transport.send(admitted, deadline: .now + .seconds(30))
/// await transport.shutdown()
/// ```
///
/// It takes only notifications the tenant admitted (``HeraldCore/AdmittedNotification``): the
/// apns-id, topic, headers and environment are sent as the admission fixed them, unchecked.
///
/// Every APNs answer comes back as an ``APNsResponse`` (a 400 or a 410 is not an error). When
/// there is no answer, the `async` send throws ``PushError`` (which says whether a resend could
/// duplicate the notification). A cancelled send lets go at once: out of the queue
/// (`CancellationError`: nothing was sent), or its stream reset (`PushError`, may have reached
/// APNs, so that at-most-once callers never send it again). The transport sends each
/// notification once and reports what happened; whether to send again is the router's decision.
/// On a 403 `ExpiredProviderToken` it tells the credential (which drops that token) before it
/// hands the answer on, so that a resend goes with a fresh token. The provider token is read
/// from the credential's own cache on every send (a lock and a comparison); nothing here caches
/// it again.
public final class TenantTransport: PushTransport {
    /// The pools, one per endpoint. A transport has one credential, so this is "per endpoint ×
    /// credential"; a rotated credential gets a new transport (and new pools). At most two
    /// endpoints (production, development): a short list beats hashing on every send.
    private struct Pools {
        var byEndpoint: [(endpoint: APNsEndpoint, pool: ConnectionPool)] = []
        /// Built with the first pool: an idle tenant holds no TLS context of its own.
        var sslContext: NIOSSLContext?
        var closed = false

        var all: [ConnectionPool] { byEndpoint.map(\.pool) }
    }

    /// The counters behind ``status`` that are not read from the pools.
    private final class Counters: Sendable {
        let answered = Atomic<Int>(0)
        let errors = Atomic<Int>(0)
        /// Milliseconds since 1970 of the last answer; 0: none yet.
        let lastAnswerMillis = Atomic<Int64>(0)
        let lastError = Mutex<(message: String, at: Date)?>(nil)
        /// Sends that failed because the tenant's proxy did, by ``ProxyError/Kind``.
        let proxyFailures = Mutex<[String: Int]>([:])
    }

    public let tenant: TenantConfiguration
    public let configuration: TransportConfiguration
    private let credentials: any CredentialProvider
    private let group: any EventLoopGroup
    private let logger: Logger
    private let pools = Mutex(Pools())
    /// The transport's home loop, one of the group's (chosen when the transport is made, so
    /// tenants spread over the loops): each pool opens a connection here whenever none of its
    /// connections runs here, and ``sendingExecutor`` runs tasks here.
    private let home: EventLoopTaskExecutor
    private let counters = Counters()

    /// Makes the transport, unopened: no TLS context, connection or task until the first send.
    /// ``validate(tenant:credentials:)`` checks up front what the first send would build.
    ///
    /// - Parameters:
    ///   - tenant: the tenant (topics, endpoints, trust roots, pool settings).
    ///   - credentials: its credential provider (token or certificate).
    ///   - configuration: overrides of the tenant's pool settings; `nil` uses them.
    ///   - eventLoopGroup: the event loops to run connections on (shared by all tenants).
    public init(
        tenant: TenantConfiguration, credentials: any CredentialProvider, configuration: TransportConfiguration? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger
    ) {
        self.tenant = tenant
        self.credentials = credentials
        self.configuration = configuration ?? TransportConfiguration(pool: tenant.pool)
        self.group = eventLoopGroup
        self.home = EventLoopTaskExecutor(eventLoopGroup.next())
        var logger = logger
        logger[metadataKey: "herald.tenant"] = "\(tenant.id)"
        self.logger = logger
    }

    /// Checks that the tenant's transport can be opened: its TLS context builds with the trust
    /// roots and the credential's client identity. Opens nothing.
    ///
    /// A token tenant's context is the one its transport will share. A certificate tenant's is
    /// built without the system's roots, which are no part of its file and would only be added
    /// to a context that is thrown away; its transport builds the one it uses.
    /// - Throws: ``APNsTransportError`` `invalidConfiguration`, naming the file or field.
    public static func validate(tenant: TenantConfiguration, credentials: any CredentialProvider) throws {
        if credentials.kind == .token {
            _ = try makeSSLContext(tenant: tenant, credentials: credentials)
        } else {
            _ = try buildSSLContext(tenant: tenant, credentials: credentials, systemRoots: false)
        }
    }

    /// ``validate(tenant:credentials:)`` with this transport's own tenant and credential.
    public func validate() throws {
        try Self.validate(tenant: tenant, credentials: credentials)
    }

    // MARK: PushTransport

    /// Sends one notification and returns APNs' answer (any status).
    ///
    /// - Throws: ``PushError`` when there is no answer (the one translation of transport
    ///   failures); `CancellationError` when the calling task was cancelled before the request
    ///   was written (it left the queue). Cancelled after it was written, its stream is reset and
    ///   the send throws `PushError` `.transport` with `mayHaveReachedAPNs` (APNs may have it).
    public func send(_ notification: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse {
        try await send(notification, deadline: Self.nioDeadline(deadline))
    }

    /// ``send(_:deadline:)`` with the tenant's request timeout when `deadline` is nil.
    public func send(_ notification: AdmittedNotification, deadline: NIODeadline? = nil) async throws -> APNsResponse {
        let result = await outcome(notification, deadline: deadline ?? (NIODeadline.now() + configuration.requestTimeout))
        switch result {
        case .success(let response):
            return response
        case .failure(let error) where error.isCancelled && !error.mayHaveBeenProcessed:
            throw CancellationError()
        case .failure(let error):
            throw error.pushError(tenant: tenant.id)
        }
    }

    /// One send's outcome, cancellable by the calling task.
    private func outcome(_ notification: AdmittedNotification, deadline: NIODeadline) async
        -> Result<APNsResponse, APNsTransportError>
    {
        let cancellation = SendCancellation()
        // The request's completion holds `prepared`, which holds the cancellation, which holds
        // the request: once the send is over the cancellation lets go of it, or every send would
        // keep its request, payload and this transport alive for ever.
        defer { cancellation.finish() }
        return await withTaskCancellationHandler {
            // Unsafe (unchecked) continuation: the completion runs exactly once (see `send(…completion:)`).
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<APNsResponse, APNsTransportError>, Never>) in
                start(notification, deadline: deadline, cancellation: cancellation) { result in
                    continuation.resume(returning: result)
                }
            }
        } onCancel: {
            cancellation.cancel()
        }
    }

    public var credentialIdentity: String? { credentials.identity }

    /// One call to the channel management service of `environment` (its pool opened at the
    /// first call, with the tenant's credential), and APNs' answer (any status). As with a send,
    /// a 403 `ExpiredProviderToken` drops the token before the answer is handed on.
    /// - Throws: ``PushError`` when there is no answer, or when the tenant has no channel
    ///   management endpoint for `environment`.
    public func manageChannels(
        _ call: ChannelCall, requestID: NotificationID, environment: APNsEnvironment, deadline: PushInstant
    ) async throws
        -> APNsResponse
    {
        let pool: ConnectionPool
        do {
            guard let endpoint = tenant.endpoints.channelEndpoint(for: environment) else {
                throw APNsTransportError.noEndpoint(environment)
            }
            pool = try self.pool(for: endpoint)
        } catch let error as APNsTransportError {
            throw error.pushError(tenant: tenant.id)
        }
        let authorization: String?
        if credentials.kind == .token {
            do {
                authorization = try await credentials.authorization(environment: environment, topic: call.bundleID)
            } catch {
                throw APNsTransportError.invalidConfiguration("the provider token could not be made", underlying: error)
                    .pushError(tenant: tenant.id)
            }
        } else {
            authorization = nil
        }
        let nioDeadline = Self.nioDeadline(deadline)
        let result = await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<APNsResponse, APNsTransportError>, Never>) in
            let request = APNsRequest(
                management: call.method, path: call.path, requestID: requestID, channelID: call.channel?.rawValue,
                body: call.body, authorization: authorization, deadline: nioDeadline
            ) { result in
                continuation.resume(returning: result)
            }
            pool.submit(request)
        }
        switch result {
        case .success(let response):
            if let authorization, response.status == 403, response.reason == .expiredProviderToken {
                await credentials.tokenRejectedAsExpired(authorization)
            }
            count(result)
            return response
        case .failure(let error):
            count(result)
            throw error.pushError(tenant: tenant.id)
        }
    }

    /// What the credential is (never secret), for the admin API.
    public var credentialSummary: CredentialSummary { credentials.summary }

    /// Stops taking sends, lets queued and in-flight notifications finish, then closes every connection.
    public func shutdown() async {
        await closePools { await $0.drain() }
    }

    /// The same as ``shutdown()``.
    public func drain() async { await shutdown() }

    /// Closes every connection now; queued and in-flight notifications fail.
    public func close() async {
        await closePools { await $0.close() }
    }

    /// Takes no more sends and runs `body` on every pool at once.
    private func closePools(_ body: @escaping @Sendable (ConnectionPool) async -> Void) async {
        let all = pools.withLock { pools in
            pools.closed = true
            return pools.all
        }
        await withTaskGroup(of: Void.self) { group in
            for pool in all { group.addTask { await body(pool) } }
        }
    }

    /// The pools' connections, streams and queues as they are now, and the counters.
    public var status: TransportStatus {
        let (all, closed) = pools.withLock { ($0.all, $0.closed) }
        var status = TransportStatus()
        status.state = closed ? .closed : all.isEmpty ? .idle : .active
        for pool in Self.statuses(of: all) {
            status.connections += pool.connections
            status.readyConnections += pool.readyConnections
            status.inFlight += pool.inFlight
            status.queued += pool.queued
        }
        status.answered = counters.answered.load(ordering: .relaxed)
        status.errors = counters.errors.load(ordering: .relaxed)
        let millis = counters.lastAnswerMillis.load(ordering: .relaxed)
        status.lastAnswerAt = millis > 0 ? Date(timeIntervalSince1970: Double(millis) / 1000) : nil
        if let last = counters.lastError.withLock({ $0 }) {
            status.lastError = last.message
            status.lastErrorAt = last.at
        }
        status.proxyFailures = counters.proxyFailures.withLock { $0 }
        return status
    }

    /// Connections per endpoint and queued requests right now (for diagnostics and tests).
    public var poolStatus: [TransportPoolStatus] {
        Self.statuses(of: pools.withLock { $0.all })
    }

    // MARK: The callback API

    /// The outcome of one send: APNs' answer, or why there is none.
    public typealias Completion = @Sendable (consuming Result<APNsResponse, APNsTransportError>) -> Void

    /// Sends one notification and calls `completion` exactly once with APNs' answer or the
    /// error. For callers that keep many notifications in flight without a task each (the
    /// completion runs on a connection's event loop: keep it short, and sending the next
    /// notification from it is cheap). Same rules as the `async` form; not cancellable.
    public func send(_ notification: AdmittedNotification, deadline: NIODeadline? = nil, completion: @escaping Completion) {
        start(
            notification, deadline: deadline ?? (NIODeadline.now() + configuration.requestTimeout), cancellation: nil,
            completion: completion)
    }

    /// ``PushTransport``'s callback form: ``send(_:deadline:completion:)`` with the
    /// failures translated as the `async` form translates them.
    public var sendsByCallback: Bool { true }

    public func startSend(
        _ notification: AdmittedNotification, deadline: PushInstant,
        completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void
    ) {
        start(notification, deadline: Self.nioDeadline(deadline), cancellation: nil, reply: .translated(completion))
    }

    /// The home loop's executor: a task running there sends through the connection on that loop
    /// (when it has room), and the answers' completions run on the same thread as the task.
    public var sendingExecutor: (any TaskExecutor)? { home }

    /// The executors of the loops an endpoint's connections open on, the home loop first, one
    /// for each connection up to ``TransportConfiguration/connectionsPerEndpoint`` (the pool
    /// opens its connections on distinct loops, home first, in the group's order), for callers
    /// that send a lot from several tasks: a task on one of them sends through the connection on
    /// its own loop when it has room, and is resumed on the thread that answered. A task on a
    /// loop without a connection would wake another thread for every send.
    public var sendingExecutors: [any TaskExecutor] {
        var executors: [any TaskExecutor] = [home]
        for loop in group.makeIterator() where executors.count < configuration.connectionsPerEndpoint {
            if loop !== home.eventLoop { executors.append(EventLoopTaskExecutor(loop)) }
        }
        return executors
    }

    // MARK: Internals

    /// An admitted notification on its way to one pool.
    private struct Prepared: Sendable {
        var notification: AdmittedNotification
        var deadline: NIODeadline
        var pool: ConnectionPool
        var cancellation: SendCancellation?
    }

    /// Where a send's answer goes: to a caller of ``send(_:deadline:completion:)`` as it came, or
    /// to a caller of ``PushTransport/startSend(_:deadline:completion:)`` with the failure
    /// translated there, so that neither form wraps the request's callback in one of its own.
    private enum Reply: Sendable {
        case untranslated(Completion)
        case translated(@Sendable (consuming Result<APNsResponse, PushError>) -> Void)

        func callAsFunction(_ result: consuming Result<APNsResponse, APNsTransportError>, tenant: TenantID) {
            switch self {
            case .untranslated(let completion):
                completion(result)
            case .translated(let completion):
                // Moved, not copied (a copy of the answer retains each of its strings).
                switch consume result {
                case .success(let response): completion(.success(response))
                case .failure(let error): completion(.failure(error.pushError(tenant: tenant)))
                }
            }
        }
    }

    private func start(
        _ notification: AdmittedNotification, deadline: NIODeadline, cancellation: SendCancellation?, completion: @escaping Completion
    ) {
        start(notification, deadline: deadline, cancellation: cancellation, reply: .untranslated(completion))
    }

    private func start(
        _ notification: AdmittedNotification, deadline: NIODeadline, cancellation: SendCancellation?, reply completion: Reply
    ) {
        let prepared: Prepared
        do {
            prepared = Prepared(
                notification: notification, deadline: deadline, pool: try pool(for: notification.environment),
                cancellation: cancellation)
        } catch let error as APNsTransportError {
            count(.failure(error))
            completion(.failure(error), tenant: tenant.id)
            return
        } catch {
            let failure = APNsTransportError.invalidConfiguration("\(error)")
            count(.failure(failure))
            completion(.failure(failure), tenant: tenant.id)
            return
        }
        if credentials.kind != .token {
            submit(prepared, authorization: nil, completion: completion)
        } else if let authorization = credentials.cachedAuthorization(
            environment: notification.environment, topic: notification.topic)
        {
            submit(prepared, authorization: authorization, completion: completion)
        } else {
            Task { await self.submitWithCurrentAuthorization(prepared, completion: completion) }
        }
    }

    /// Gets the authorization (signing a token when needed) and submits, or completes with the error.
    private func submitWithCurrentAuthorization(_ prepared: Prepared, completion: Reply) async {
        let authorization: String?
        do {
            authorization = try await credentials.authorization(
                environment: prepared.notification.environment, topic: prepared.notification.topic)
        } catch {
            let failure = APNsTransportError.invalidConfiguration("the provider token could not be made", underlying: error)
            count(.failure(failure))
            completion(.failure(failure), tenant: tenant.id)
            return
        }
        submit(prepared, authorization: authorization, completion: completion)
    }

    private func submit(_ prepared: Prepared, authorization: String?, completion: Reply) {
        let request = APNsRequest(
            notification: prepared.notification, authorization: authorization, deadline: prepared.deadline,
            cancellable: prepared.cancellation != nil
        ) { result in
            if let authorization, Self.isExpiredToken(result) {
                self.reportExpiredToken(authorization, apnsID: prepared.notification.id, result: result, completion: completion)
                return
            }
            self.count(result)
            completion(consume result, tenant: self.tenant.id)
        }
        if let cancellation = prepared.cancellation, !cancellation.attach(request) {
            request.complete(.failure(.cancelled(mayHaveBeenProcessed: false)))
            return
        }
        prepared.pool.submit(request)
    }

    /// Whether APNs answered 403 `ExpiredProviderToken` (read in place: a copy of the answer
    /// retains each of its strings).
    private static func isExpiredToken(_ result: borrowing Result<APNsResponse, APNsTransportError>) -> Bool {
        switch result {
        case .success(let response): response.status == 403 && response.reason == .expiredProviderToken
        case .failure: false
        }
    }

    /// APNs rejected the provider token as expired: the credential is told (it drops the token,
    /// so the next send signs or reads a fresh one) before the answer is handed on.
    private func reportExpiredToken(
        _ rejected: String, apnsID: NotificationID, result: Result<APNsResponse, APNsTransportError>, completion: Reply
    ) {
        logger.info("APNs rejected the provider token as expired", metadata: ["herald.apns-id": "\(apnsID)"])
        Task {
            await self.credentials.tokenRejectedAsExpired(rejected)
            self.count(result)
            completion(result, tenant: self.tenant.id)
        }
    }

    /// Counts a send's final outcome (for ``status``), just before its completion runs. Not a
    /// wrapping closure: one allocation and one indirect call fewer per send.
    private func count(_ result: borrowing Result<APNsResponse, APNsTransportError>) {
        switch result {
        case .success(let response):
            counters.answered.add(1, ordering: .relaxed)
            let now = Date()
            let millis = Int64(now.timeIntervalSince1970 * 1000)
            // Stored once a millisecond at most: the connections' loops share this word.
            if counters.lastAnswerMillis.load(ordering: .relaxed) != millis {
                counters.lastAnswerMillis.store(millis, ordering: .relaxed)
            }
            if TransportStatus.concernsTheTenant(response) {
                counters.errors.add(1, ordering: .relaxed)
                let answer = "APNs answered \(response.status) \(response.reason?.wireValue ?? "")"
                let message = response.reason?.isCredentialProblem == true ? "credential problem: " + answer : answer
                counters.lastError.withLock { $0 = (message, now) }
            }
        case .failure(let error) where error.isCancelled:
            break
        case .failure(let error):
            counters.errors.add(1, ordering: .relaxed)
            let message = error.description
            counters.lastError.withLock { $0 = (message, Date()) }
            if let proxy = error.underlying as? ProxyError {
                counters.proxyFailures.withLock { $0[proxy.kind.rawValue, default: 0] += 1 }
            }
        }
    }

    /// The pool of the environment's endpoint, made at its first send.
    private func pool(for environment: APNsEnvironment) throws -> ConnectionPool {
        // The admission checked that the tenant has this endpoint; the same configuration is here.
        guard let endpoint = tenant.endpoints.endpoint(for: environment) else {
            throw APNsTransportError.noEndpoint(environment)
        }
        return try pool(for: endpoint)
    }

    /// The pool of `endpoint` (a device endpoint or a channel management service), made at its
    /// first request.
    private func pool(for endpoint: APNsEndpoint) throws -> ConnectionPool {
        try pools.withLock { pools in
            guard !pools.closed else { throw APNsTransportError.poolClosed }
            for entry in pools.byEndpoint where entry.endpoint == endpoint { return entry.pool }
            let sslContext = try pools.sslContext ?? Self.makeSSLContext(tenant: tenant, credentials: credentials)
            pools.sslContext = sslContext
            var logger = logger
            logger[metadataKey: "herald.credential"] = "\(credentials.identity)"
            let pool = ConnectionPool(
                endpoint: endpoint, sslContext: sslContext, configuration: configuration.poolConfiguration, group: group,
                homeLoop: home.eventLoop, logger: logger)
            pools.byEndpoint.append((endpoint, pool))
            return pool
        }
    }

    private static func statuses(of all: [ConnectionPool]) -> [TransportPoolStatus] {
        all.map { pool in
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

    /// The same instant as NIO's deadline: both count `CLOCK_MONOTONIC`'s nanoseconds.
    static func nioDeadline(_ deadline: PushInstant) -> NIODeadline {
        NIODeadline.uptimeNanoseconds(deadline.uptimeNanoseconds)
    }

    private static func makeSSLContext(tenant: TenantConfiguration, credentials: any CredentialProvider) throws -> NIOSSLContext {
        // Without a client identity (token tenants) the context depends only on the trust roots,
        // so tenants that trust the same roots share one context (contexts are immutable and
        // thread-safe).
        guard credentials.kind == .token else { return try buildSSLContext(tenant: tenant, credentials: credentials) }
        return try SharedTLSContexts.shared.context(trustRootsPEM: tenant.endpoints.trustRootsPEM) {
            try buildSSLContext(tenant: tenant, credentials: credentials)
        }
    }

    private static func buildSSLContext(
        tenant: TenantConfiguration, credentials: any CredentialProvider, systemRoots: Bool = true
    ) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        var roots: [NIOSSLCertificate] = []
        if let pem = tenant.endpoints.trustRootsPEM {
            do {
                roots = try NIOSSLCertificate.fromPEMBytes(pem)
                guard !roots.isEmpty else {
                    throw APNsTransportError.invalidConfiguration("no certificate in \(tenant.endpoints.trustRootsOrigin ?? "ca_file")")
                }
            } catch let error as APNsTransportError {
                throw error
            } catch {
                throw APNsTransportError.invalidConfiguration(
                    "the trust roots in \(tenant.endpoints.trustRootsOrigin ?? "ca_file") could not be read",
                    underlying: error)
            }
        }
        // The system's roots, and the tenant's `ca_file` roots beside them.
        if systemRoots {
            PlatformTrustRoots.configure(&tls, additional: roots)
        } else {
            tls.trustRoots = .certificates(roots)
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


/// Links an `async` send to the request carrying it, so that cancelling the task lets go of it.
final class SendCancellation: Sendable {
    private struct State {
        var cancelled = false
        var request: APNsRequest?
    }

    private let state = Mutex(State())

    /// Makes `request` the one to cancel. False when the send was already cancelled.
    func attach(_ request: APNsRequest) -> Bool {
        state.withLock { state in
            guard !state.cancelled else { return false }
            state.request = request
            return true
        }
    }

    /// The send is over (answered, failed or cancelled): nothing is left to cancel.
    func finish() {
        state.withLock { $0.request = nil }
    }

    func cancel() {
        let request = state.withLock { state -> APNsRequest? in
            state.cancelled = true
            defer { state.request = nil }
            return state.request
        }
        request?.cancel()
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
