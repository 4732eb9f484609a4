import Hummingbird
import Logging
import NIOCore

/// Turns every failure into the API's JSON error: ``APIError``s as they are, requests the
/// router did not route into 404/405 (or dispatches them, see ``APIContext/fallback(_:)``),
/// oversized bodies into 413, and anything else into a logged 500 that reveals nothing.
struct APIMiddleware<Context: RequestContext>: RouterMiddleware {
    let api: APIContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            do {
                return try await next(request, context)
            } catch let error as HTTPError where error.status == .notFound {
                return try await api.fallback(request)
            }
        } catch let error as APIError {
            if error.status.code >= 500 {
                api.logger.warning(
                    "request failed",
                    metadata: ["herald.path": "\(request.uri.path)", "herald.status": "\(error.status.code)", "herald.code": "\(error.code)"])
            }
            return error.response()
        } catch is NIOTooManyBytesError {
            return APIError.bodyTooLarge(limit: api.settings.api.maxBodyBytes).response()
        } catch let error as HTTPError {
            return APIError(status: error.status, code: "http_error", message: error.body ?? error.status.reasonPhrase).response()
        } catch {
            api.logger.error(
                "request failed with an unexpected error", metadata: ["herald.path": "\(request.uri.path)", "herald.error": "\(error)"])
            return APIError.internal().response()
        }
    }
}
