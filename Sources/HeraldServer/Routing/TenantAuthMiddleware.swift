import Herald
import HeraldConfig
import HeraldCore
import Hummingbird
import Logging
import Synchronization

/// Which tenant an API key belongs to, kept current with the loaded tenants, and each key's
/// request rate at the edge (`http.rate_limit`).
final class APIKeyAuthenticator: Sendable {
    private let router: Herald.Router
    private let keys = Mutex(APIKeyIndex())
    let rateLimiter: APIKeyRateLimiter
    private let logger: Logger

    init(router: Herald.Router, rateLimit: ServerConfiguration.HTTPSettings.RateLimit, logger: Logger) {
        self.router = router
        self.logger = logger
        self.rateLimiter = APIKeyRateLimiter(
            requestsPerSecond: rateLimit.requestsPerSecond, burst: rateLimit.burst, clock: router.configuration.clock)
        rebuild()
    }

    /// Rebuilds the index from the loaded tenants (after a load, a reload or a lifecycle change).
    func rebuild() {
        let tenants = router.tenantIDs.compactMap { router.runtime(for: $0)?.configuration }
        let index = APIKeyIndex(tenants: tenants)
        for conflict in index.conflicts {
            logger.error("an API key is listed by two tenants; it is refused for both", metadata: ["herald.keys": "\(conflict)"])
        }
        keys.withLock { $0 = index }
        rateLimiter.retain(index.digests)
    }

    /// The tenant whose running configuration lists the key of `header` (`Bearer <key>`), after
    /// the key's rate check.
    func authenticate(_ header: String?) throws(APIError) -> TenantConfiguration {
        guard let header else {
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
        if let wait = rateLimiter.admit(entry.sha256Hex) {
            let seconds = APIKeyRateLimiter.retryAfterSeconds(wait)
            var error = APIError(
                status: .tooManyRequests, code: "api_rate_limited",
                message: "this API key is over its request rate (\(Self.rateText(rateLimiter.requestsPerSecond)) requests a second, "
                    + "bursts of \(Int(rateLimiter.burst))); retry after \(seconds) s")
            error.headers[.retryAfter] = "\(seconds)"
            throw error
        }
        return runtime.configuration
    }

    static func rateText(_ rate: Double) -> String {
        rate.rounded() == rate && rate < 1e15 ? String(Int64(rate)) : String(rate)
    }
}

/// Authenticates the tenant routes (`/v1`): the request's API key names its tenant, which the
/// ``TenantRequestContext`` of the group's handlers then carries. 401 without a valid key, 429
/// over the key's rate.
struct TenantAuthMiddleware: RouterMiddleware {
    typealias Context = HeraldRequestContext
    let authenticator: APIKeyAuthenticator

    func handle(
        _ request: Request, context: HeraldRequestContext,
        next: (Request, HeraldRequestContext) async throws -> Response
    ) async throws -> Response {
        var context = context
        context.tenant = try authenticator.authenticate(request.headers[.authorization])
        return try await next(request, context)
    }
}
