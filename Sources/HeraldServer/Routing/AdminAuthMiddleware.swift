import Hummingbird

/// The admin token, held only as its SHA-256 digest.
struct AdminToken: Sendable {
    private let digest: [UInt8]

    /// nil when `token` is nil or empty: the admin routes are then disabled.
    init?(_ token: String?) {
        guard let token, !token.isEmpty else { return nil }
        digest = APIKeys.digest(of: token)
    }

    func matches(_ presented: String) -> Bool {
        APIKeys.constantTimeEquals(APIKeys.digest(of: presented), digest)
    }
}

/// Guards the operator's routes (`/admin/…`, `/metrics`): the admin token as
/// `Authorization: Bearer <token>`, else 401. While no admin token is set the routes do not
/// exist (404, as for any unknown path).
struct AdminAuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: AdminToken?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let token else { throw APIError.routeNotFound }
        guard let key = APIKeys.bearer(request.headers[.authorization]), token.matches(key) else {
            throw APIError.unauthorized("the admin token is missing or wrong")
        }
        return try await next(request, context)
    }
}
