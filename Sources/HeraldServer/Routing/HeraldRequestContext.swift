import Herald
import HeraldCore
import Hummingbird
import Logging
import NIOCore

/// The request context of every route: Hummingbird's core storage, and the tenant once
/// ``TenantAuthMiddleware`` has authenticated the request's API key.
public struct HeraldRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The caller's address (the audit log's `source`).
    public let remoteAddress: SocketAddress?
    /// The tenant the request's API key belongs to (set only under `/v1`, by ``TenantAuthMiddleware``).
    var tenant: TenantConfiguration?

    public init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// Answers are JSON in the API's own spelling (``APIResponseEncoder``).
    public var responseEncoder: APIResponseEncoder { APIResponseEncoder() }
}

/// The context of the tenant routes (`/v1`): the authenticated tenant is always there.
///
/// Made from ``HeraldRequestContext`` after ``TenantAuthMiddleware`` ran; a request that reached
/// the group without a tenant (which the middleware does not let happen) is refused as 401.
public struct TenantRequestContext: ChildRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The tenant's configuration as it was when the request was authenticated.
    public let tenant: TenantConfiguration

    public init(context: HeraldRequestContext) throws {
        guard let tenant = context.tenant else {
            throw APIError.unauthorized("an API key is required: Authorization: Bearer <key>")
        }
        self.coreContext = context.coreContext
        self.tenant = tenant
    }

    public var responseEncoder: APIResponseEncoder { APIResponseEncoder() }
}
