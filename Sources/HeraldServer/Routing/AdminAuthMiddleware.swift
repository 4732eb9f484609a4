import HeraldStore
import Hummingbird

/// The admin token, held only as its SHA-256 digest.
struct AdminToken: Sendable {
    private let digest: [UInt8]

    /// nil when `token` is nil or empty.
    init?(_ token: String?) {
        guard let token, !token.isEmpty else { return nil }
        digest = APIKeys.digest(of: token)
    }

    func matches(_ presented: String) -> Bool {
        APIKeys.constantTimeEquals(APIKeys.digest(of: presented), digest)
    }
}

/// Guards the operator's routes (`/admin/…`, `/metrics`): an admin credential as
/// `Authorization: Bearer <token>` (an account's token, or the break-glass admin token), else
/// 401 (a source address whose wrong credentials emptied its bucket gets 429 with `Retry-After`
/// before any credential is compared: ``AdminAuthenticator/failures``). The actor it authenticates is ``AdminActor/current`` for the rest of the request; each
/// route then checks its own permission (``APIEndpoint/access``). While neither the admin token
/// is set nor an account exists, the routes do not exist (404, as for any unknown path).
struct AdminAuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let authenticator: AdminAuthenticator

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard try await authenticator.isEnabled() else { throw APIError.routeNotFound }
        let source = AdminActor.source(of: context)
        if let wait = authenticator.failures.wait(source: source) {
            throw APIError.adminGuessing(retryAfter: wait)
        }
        guard let presented = APIKeys.bearer(request.headers[.authorization]),
            let actor = try await authenticator.authenticate(presented, source: source)
        else {
            // A request without any credential is not a guess; a wrong one is.
            if request.headers[.authorization] != nil { authenticator.failures.failed(source: source) }
            throw APIError.unauthorized("an admin token is required: Authorization: Bearer <token>")
        }
        return try await AdminActor.$current.withValue(actor) { try await next(request, context) }
    }
}
