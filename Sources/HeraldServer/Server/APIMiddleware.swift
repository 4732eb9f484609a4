import HeraldStore
import Hummingbird
import Logging
import NIOCore

/// Turns every failure into the API's JSON error: ``APIError``s as they are, requests no route
/// took into 404, or 405 with `Allow` when the path is a route's with another method (Hummingbird's
/// router answers both as not found), oversized bodies into 413, a store that did not answer or
/// could not be reached into 503 `store_unavailable` with `Retry-After`, and anything else into a
/// logged 500 that reveals nothing.
///
/// Every answer carries the request's ``RequestID`` in `x-request-id`; a 5xx is logged with it
/// and with the detail the answer leaves out (socket and TLS errors, paths).
struct APIMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger
    /// The limit a 413 raised by Hummingbird itself names.
    let maxBodyBytes: Int
    /// Whether the admin routes exist (an admin token is set or an account exists): they count
    /// for 405 only then.
    let adminAuthenticator: AdminAuthenticator

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let id = RequestID.accept(request.headers[RequestID.header])
        var response = await RequestID.$current.withValue(id) {
            await answer(request, context: context, next: next)
        }
        response.headers[RequestID.header] = id
        return response
    }

    private func answer(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async -> Response {
        do {
            do {
                return try await next(request, context)
            } catch let error as HTTPError where error.status == .notFound {
                let allowed = APIEndpoint.methods(at: request.uri.path, adminEnabled: adminAuthenticator.wasEnabled)
                throw allowed.isEmpty ? APIError.routeNotFound : APIError.methodNotAllowed(allowed)
            }
        } catch let error as APIError {
            if error.status.code >= 500 {
                var metadata: Logger.Metadata = [
                    "herald.path": "\(request.uri.path)", "herald.status": "\(error.status.code)", "herald.code": "\(error.code)",
                ]
                if let detail = error.logDetail { metadata["herald.error"] = "\(detail)" }
                RequestID.logger(logger).warning("request failed", metadata: metadata)
            }
            return error.response()
        } catch let error as StoreError where error.leftOutcomeUnknown {
            // The store's server is away (restarting, unreachable): the caller may try again.
            RequestID.logger(logger).warning(
                "request failed: the store is unavailable",
                metadata: ["herald.path": "\(request.uri.path)", "herald.error": "\(error.message)"])
            return APIError.storeUnavailable("the store is unavailable; try again", detail: error).response()
        } catch is NIOTooManyBytesError {
            return APIError.bodyTooLarge(limit: maxBodyBytes).response()
        } catch let error as HTTPError {
            if error.status.code >= 500 {
                RequestID.logger(logger).warning(
                    "request failed", metadata: ["herald.path": "\(request.uri.path)", "herald.error": "\(error)"])
                return APIError.internal().response()
            }
            return APIError(status: error.status, code: "http_error", message: error.status.reasonPhrase).response()
        } catch {
            RequestID.logger(logger).error(
                "request failed with an unexpected error", metadata: ["herald.path": "\(request.uri.path)", "herald.error": "\(error)"])
            return APIError.internal().response()
        }
    }
}
