import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldStore
import Hummingbird
import Logging
import NIOCore
import Prometheus
import Synchronization

/// A tenant file that did not load (at start or at the last reload).
public struct TenantFailure: Sendable, Hashable {
    public var file: String
    public var tenant: TenantID?
    /// The errors, one per line, naming file:line:column and the field.
    public var message: String

    public init(file: String, tenant: TenantID?, message: String) {
        self.file = file
        self.tenant = tenant
        self.message = message
    }
}

/// Where the server is in its life, for `/readyz`.
enum ServerPhase: String, Sendable {
    case starting
    case ready
    case stopping
}

/// What the route handlers share: the engine, the store, the key index, the settings.
final class APIContext: Sendable {
    let router: Herald.Router
    let store: any PushStore
    let reports: any JobReports
    let runner: JobRunner
    let health: TenantHealthRegistry
    let metrics: PrometheusCollectorRegistry
    let settings: ServerConfiguration
    let adminToken: AdminToken?
    let logger: Logger
    let openAPIDocument: [UInt8]
    private let keys: Mutex<APIKeyIndex>
    /// Each API key's request rate at the edge (`http.rate_limit`).
    let keyRateLimiter: APIKeyRateLimiter
    private let phaseState = Mutex(ServerPhase.starting)
    /// The circuits whose gauges `/metrics` shows: a circuit that is gone (its tenant removed)
    /// has its gauges unregistered at the next scrape instead of keeping their last value.
    private let circuitGaugeKeys = Mutex<Set<DeliveryCircuits.Key>>([])
    /// Reloads and credential uploads (one at a time, inside).
    let reloader: ReloadCoordinator
    /// The instances sharing the store (`GET /admin/instances`).
    let instances: InstanceDirectory
    /// Batch bodies are decoded on the blocking pool, one at a time per tenant.
    let batchDecoder = BatchDecoder()

    init(
        router: Herald.Router, store: any PushStore, reports: any JobReports, runner: JobRunner, health: TenantHealthRegistry,
        metrics: PrometheusCollectorRegistry, settings: ServerConfiguration, adminToken: AdminToken?, logger: Logger,
        openAPIDocument: [UInt8], reloader: ReloadCoordinator, instances: InstanceDirectory
    ) {
        self.router = router
        self.store = store
        self.reports = reports
        self.runner = runner
        self.health = health
        self.metrics = metrics
        self.settings = settings
        self.adminToken = adminToken
        self.logger = logger
        self.openAPIDocument = openAPIDocument
        self.reloader = reloader
        self.instances = instances
        self.keys = Mutex(APIKeyIndex())
        self.keyRateLimiter = APIKeyRateLimiter(
            requestsPerSecond: settings.http.rateLimit.requestsPerSecond, burst: settings.http.rateLimit.burst,
            clock: router.configuration.clock)
        rebuildKeyIndex()
    }

    var phase: ServerPhase {
        get { phaseState.withLock { $0 } }
        set { phaseState.withLock { $0 = newValue } }
    }

    /// The tenant files that failed at the last reload (or at start) and have not loaded since.
    var loadFailures: [TenantFailure] {
        reloader.failures.map { TenantFailure(file: $0.file, tenant: $0.tenant, message: $0.message) }
    }

    /// Rebuilds the API key index from the loaded tenants (after a load or reload).
    func rebuildKeyIndex() {
        let tenants = router.tenantIDs.compactMap { router.runtime(for: $0)?.configuration }
        let index = APIKeyIndex(tenants: tenants)
        for conflict in index.conflicts {
            logger.error("an API key is listed by two tenants; it is refused for both", metadata: ["herald.keys": "\(conflict)"])
        }
        keys.withLock { $0 = index }
        keyRateLimiter.retain(index.digests)
    }

    /// The logger, with the current request's ID (``RequestID``) when there is one.
    var requestLogger: Logger {
        var logger = logger
        if let id = RequestID.current { logger[metadataKey: "herald.request-id"] = "\(id)" }
        return logger
    }

    // MARK: Dispatch

    /// Answers one request for a route of the table.
    func handle(_ endpoint: APIEndpoint, request: Request, parameters: [String: String]) async throws -> Response {
        // `PUT /v1/devices/invalid` reaches `PUT /v1/devices/{token}` in the router's trie, but
        // the path is another route's: its methods are the ones allowed.
        if !parameters.isEmpty {
            let path = request.uri.path
            let literal = APIEndpoint.allCases.filter { !$0.path.contains("{") && $0.match(path) != nil }
            if !literal.isEmpty { throw APIError.methodNotAllowed(literal.map(\.method)) }
        }
        switch endpoint.access {
        case .open:
            break
        case .tenant:
            let tenant = try authenticateTenant(request)
            return try await handleTenant(endpoint, request: request, tenant: tenant, parameters: parameters)
        case .admin:
            try authenticateAdmin(request)
        }
        switch endpoint {
        case .healthz: return JSONResponse.make(.object([("status", .string("ok"))]))
        case .readyz: return readiness()
        case .metrics: return metricsText()
        case .openAPI:
            var headers = HTTPFields()
            headers[.contentType] = "application/yaml"
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: openAPIDocument)))
        case .adminTenants: return adminTenants()
        case .adminReload: return try await adminReloadAll(request)
        case .adminReloadTenant: return try await adminReload(request, tenant: parameters["id"] ?? "")
        case .adminUploadCredentials: return try await adminUploadCredentials(request, tenant: parameters["id"] ?? "")
        case .adminInstances: return try await adminInstances()
        default: throw APIError.routeNotFound
        }
    }

    private func handleTenant(
        _ endpoint: APIEndpoint, request: Request, tenant: TenantConfiguration, parameters: [String: String]
    ) async throws -> Response {
        switch endpoint {
        case .sendNotification: return try await sendNotification(request, tenant: tenant)
        case .sendBatch: return try await sendBatch(request, tenant: tenant)
        case .job: return try await job(request, tenant: tenant, id: parameters["id"] ?? "")
        case .invalidDevices: return try await invalidDevices(request, tenant: tenant)
        case .registerDevice: return try await registerDevice(request, tenant: tenant, token: parameters["token"] ?? "")
        default: throw APIError.routeNotFound
        }
    }

    /// A request the router did not route: a known path with another method (405), a route the
    /// router's trie shadowed (dispatched here), or no route (404).
    func fallback(_ request: Request) async throws -> Response {
        let path = request.uri.path
        var allowed: [HTTPRequest.Method] = []
        // A path that is a route's own literal path (`/v1/devices/invalid`) belongs to that route
        // only, not also to the parameterised ones it happens to match (`/v1/devices/{token}`).
        let literal = APIEndpoint.allCases.contains { !$0.path.contains("{") && $0.match(path) != nil }
        for endpoint in APIEndpoint.allCases where !(literal && endpoint.path.contains("{")) {
            guard let parameters = endpoint.match(path) else { continue }
            if endpoint.access == .admin, adminToken == nil { continue }
            if endpoint.method == request.method {
                return try await handle(endpoint, request: request, parameters: parameters)
            }
            allowed.append(endpoint.method)
        }
        guard !allowed.isEmpty else { throw APIError.routeNotFound }
        throw APIError.methodNotAllowed(allowed)
    }

    // MARK: Authentication

    private func authenticateTenant(_ request: Request) throws(APIError) -> TenantConfiguration {
        guard let header = request.headers[.authorization] else {
            throw APIError.unauthorized("an API key is required: Authorization: Bearer <key>")
        }
        guard let key = APIKeys.bearer(header) else {
            throw APIError.unauthorized("the Authorization header must be 'Bearer <key>'")
        }
        // The tenant's running configuration must still list the key: a key removed by a reload
        // stops working at the swap, before the index is rebuilt.
        guard let entry = keys.withLock({ $0.authenticate(key) }), let runtime = router.runtime(for: entry.tenant),
            runtime.configuration.apiKeys.contains(where: { $0.sha256Hex.lowercased() == entry.sha256Hex })
        else {
            throw APIError.unauthorized("the API key is not valid")
        }
        if let wait = keyRateLimiter.admit(entry.sha256Hex) {
            let seconds = APIKeyRateLimiter.retryAfterSeconds(wait)
            var error = APIError(
                status: .tooManyRequests, code: "api_rate_limited",
                message: "this API key is over its request rate (\(Self.rateText(keyRateLimiter.requestsPerSecond)) requests a second, "
                    + "bursts of \(Int(keyRateLimiter.burst))); retry after \(seconds) s")
            error.headers[.retryAfter] = "\(seconds)"
            throw error
        }
        return runtime.configuration
    }

    static func rateText(_ rate: Double) -> String {
        rate.rounded() == rate && rate < 1e15 ? String(Int64(rate)) : String(rate)
    }

    private func authenticateAdmin(_ request: Request) throws(APIError) {
        guard let adminToken else { throw APIError.routeNotFound }
        guard let key = APIKeys.bearer(request.headers[.authorization]), adminToken.matches(key) else {
            throw APIError.unauthorized("the admin token is missing or wrong")
        }
    }

    // MARK: Bodies

    /// The request body as JSON, within `limit` bytes.
    func jsonBody(_ request: Request, limit: Int) async throws(APIError) -> (bytes: [UInt8], root: JSONNode) {
        let contentType = request.headers[.contentType]
        guard let contentType, Self.isJSON(contentType) else { throw APIError.unsupportedMediaType(contentType) }
        let bytes = try await body(request, limit: limit)
        do {
            return (bytes, try StrictJSONParser.parse(bytes))
        } catch {
            throw APIError.malformedJSON(error)
        }
    }

    /// The raw body, within `limit` bytes (413 beyond).
    func body(_ request: Request, limit: Int) async throws(APIError) -> [UInt8] {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit {
            throw APIError.bodyTooLarge(limit: limit)
        }
        do {
            let buffer = try await request.body.collect(upTo: limit)
            return Array(buffer.readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge(limit: limit)
        } catch {
            throw APIError(status: .badRequest, code: "body_unreadable", message: "the request body could not be read")
        }
    }

    static func isJSON(_ contentType: String) -> Bool {
        let media = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        return media == "application/json" || (media?.hasPrefix("application/") == true && media?.hasSuffix("+json") == true)
    }

    // MARK: Health

    private func readiness() -> Response {
        switch phase {
        case .ready:
            return JSONResponse.make(.object([("status", .string("ready")), ("tenants", .count(router.tenantIDs.count))]))
        case .starting:
            return APIError.unavailable("not_ready", "Herald is starting").response()
        case .stopping:
            return APIError.unavailable("shutting_down", "Herald is shutting down").response()
        }
    }

    private func metricsText() -> Response {
        updateCircuitGauges()
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.emitToBuffer())))
    }

    /// The delivery circuits as gauges, refreshed at each scrape: `herald_delivery_circuit_state`
    /// (0 closed, 1 half-open, 2 open) and `herald_delivery_circuit_openings`, by tenant and endpoint.
    private func updateCircuitGauges() {
        let statuses = router.circuits.statuses(now: router.configuration.clock.now)
        let current = Set(statuses.map(\.key))
        let gone = circuitGaugeKeys.withLock { keys -> Set<DeliveryCircuits.Key> in
            defer { keys = current }
            return keys.subtracting(current)
        }
        for key in gone {
            let labels = [("tenant", key.tenant.rawValue), ("endpoint", key.endpoint)]
            metrics.unregisterGauge(metrics.makeGauge(descriptor: Self.circuitState, labels: labels))
            metrics.unregisterGauge(metrics.makeGauge(descriptor: Self.circuitOpenings, labels: labels))
        }
        for status in statuses {
            let labels = [("tenant", status.key.tenant.rawValue), ("endpoint", status.key.endpoint)]
            let state: Double
            switch status.state {
            case "open": state = 2
            case "half-open": state = 1
            default: state = 0
            }
            metrics.makeGauge(descriptor: Self.circuitState, labels: labels).set(state)
            metrics.makeGauge(descriptor: Self.circuitOpenings, labels: labels).set(Double(status.openings))
        }
    }

    private static var circuitState: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", subsystem: "delivery", metricName: "circuit", unitName: "state",
            helpText: "A tenant's circuit to an APNs endpoint: 0 closed, 1 half-open (probing), 2 open")
    }
    private static var circuitOpenings: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", subsystem: "delivery", metricName: "circuit", unitName: "openings",
            helpText: "How many times a tenant's circuit to an APNs endpoint opened")
    }
}
