import Foundation
import Hummingbird

/// Every route of the HTTP API: its method, its path (OpenAPI's `{param}` spelling) and who may
/// call it. The router is built from this list and `openapi.yaml` must describe exactly these
/// routes (a test checks both ways).
public enum APIEndpoint: String, CaseIterable, Sendable {
    case healthz
    case readyz
    case metrics
    case openAPI
    case sendNotification
    case sendBatch
    case jobs
    case job
    case cancelJob
    case invalidDevices
    case registerDevice
    case adminTenants
    case adminReload
    case adminReloadTenant
    case adminUploadCredentials
    case adminCreateTenant
    case adminTenant
    case adminUpdateTenant
    case adminDeleteTenant
    case adminCreateAPIKey
    case adminDeleteAPIKey
    case adminInstances
    case adminJobs
    case adminCancelJob
    case adminWhoAmI
    case adminAccounts
    case adminCreateAccount
    case adminUpdateAccount
    case adminDeleteAccount
    case adminAccountTokens
    case adminCreateAccountToken
    case adminRevokeAccountToken
    case adminSetAccountPassword
    case adminAudit
    case adminUsage
    case usage
    case channels
    case createChannel
    case channel
    case deleteChannel
    case syncChannels
    case sendBroadcast
    case adminChannels
    case adminCreateChannel
    case adminChannel
    case adminDeleteChannel
    case adminSyncChannels

    /// Who may call a route.
    public enum Access: Sendable {
        /// Anyone (health, readiness, the API description).
        case open
        /// A tenant, with one of its API keys as `Authorization: Bearer <key>`.
        case tenant
        /// An operator with an admin credential whose role has the permission (`/admin/…` and
        /// `/metrics`); the routes do not exist while neither the admin token nor an account is set.
        case admin(AdminPermission)

        var isAdmin: Bool {
            if case .admin = self { return true }
            return false
        }
    }

    public var method: HTTPRequest.Method {
        switch self {
        case .healthz, .readyz, .metrics, .openAPI, .jobs, .job, .invalidDevices, .adminTenants, .adminTenant, .adminInstances,
            .adminJobs, .adminWhoAmI, .adminAccounts, .adminAccountTokens, .adminAudit, .adminUsage, .usage, .channels, .channel,
            .adminChannels, .adminChannel:
            return .get
        case .sendNotification, .sendBatch, .cancelJob, .adminReload, .adminReloadTenant, .adminCreateTenant, .adminCreateAPIKey,
            .adminCancelJob, .adminCreateAccount, .adminCreateAccountToken, .createChannel, .syncChannels, .sendBroadcast,
            .adminCreateChannel, .adminSyncChannels:
            return .post
        case .registerDevice, .adminUploadCredentials, .adminSetAccountPassword: return .put
        case .adminUpdateTenant, .adminUpdateAccount: return .patch
        case .adminDeleteTenant, .adminDeleteAPIKey, .adminDeleteAccount, .adminRevokeAccountToken, .deleteChannel,
            .adminDeleteChannel:
            return .delete
        }
    }

    /// The path, with parameters as `{name}`.
    public var path: String {
        switch self {
        case .healthz: return "/healthz"
        case .readyz: return "/readyz"
        case .metrics: return "/metrics"
        case .openAPI: return "/openapi.yaml"
        case .sendNotification: return "/v1/notifications"
        case .sendBatch: return "/v1/notifications/batch"
        case .jobs: return "/v1/jobs"
        case .job: return "/v1/jobs/{id}"
        case .cancelJob: return "/v1/jobs/{id}/cancel"
        case .invalidDevices: return "/v1/devices/invalid"
        case .registerDevice: return "/v1/devices/{token}"
        case .adminTenants: return "/admin/tenants"
        case .adminReload: return "/admin/reload"
        case .adminReloadTenant: return "/admin/tenants/{id}/reload"
        case .adminUploadCredentials: return "/admin/tenants/{id}/credentials"
        case .adminCreateTenant: return "/admin/tenants"
        case .adminTenant, .adminUpdateTenant, .adminDeleteTenant: return "/admin/tenants/{id}"
        case .adminCreateAPIKey: return "/admin/tenants/{id}/api-keys"
        case .adminDeleteAPIKey: return "/admin/tenants/{id}/api-keys/{name}"
        case .adminInstances: return "/admin/instances"
        case .adminJobs: return "/admin/tenants/{id}/jobs"
        case .adminCancelJob: return "/admin/tenants/{id}/jobs/{job}/cancel"
        case .adminWhoAmI: return "/admin/me"
        case .adminAccounts, .adminCreateAccount: return "/admin/accounts"
        case .adminUpdateAccount, .adminDeleteAccount: return "/admin/accounts/{name}"
        case .adminAccountTokens, .adminCreateAccountToken: return "/admin/accounts/{name}/tokens"
        case .adminRevokeAccountToken: return "/admin/accounts/{name}/tokens/{token}"
        case .adminSetAccountPassword: return "/admin/accounts/{name}/password"
        case .adminAudit: return "/admin/audit"
        case .adminUsage: return "/admin/usage"
        case .usage: return "/v1/usage"
        case .channels, .createChannel: return "/v1/channels"
        case .channel, .deleteChannel: return "/v1/channels/{channel}"
        case .syncChannels: return "/v1/channels/sync"
        case .sendBroadcast: return "/v1/broadcasts"
        case .adminChannels, .adminCreateChannel: return "/admin/tenants/{id}/channels"
        case .adminChannel, .adminDeleteChannel: return "/admin/tenants/{id}/channels/{channel}"
        case .adminSyncChannels: return "/admin/tenants/{id}/channels/sync"
        }
    }

    public var access: Access {
        switch self {
        case .healthz, .readyz, .openAPI: return .open
        case .sendNotification, .sendBatch, .jobs, .job, .cancelJob, .invalidDevices, .registerDevice, .usage, .channels,
            .createChannel, .channel, .deleteChannel, .syncChannels, .sendBroadcast:
            return .tenant
        // Metrics name tenants, topics and volumes: not for tenants or anonymous callers.
        case .metrics, .adminTenants, .adminTenant, .adminInstances, .adminJobs, .adminAudit, .adminWhoAmI, .adminUsage,
            .adminChannels, .adminChannel:
            return .admin(.read)
        case .adminReload, .adminReloadTenant, .adminUploadCredentials, .adminCreateTenant, .adminUpdateTenant, .adminDeleteTenant,
            .adminCreateAPIKey, .adminDeleteAPIKey, .adminCancelJob, .adminCreateChannel, .adminDeleteChannel, .adminSyncChannels:
            return .admin(.operate)
        // An account's own tokens are also its own to list, make and revoke (``APIRoutes``).
        case .adminAccounts, .adminCreateAccount, .adminUpdateAccount, .adminDeleteAccount, .adminAccountTokens,
            .adminCreateAccountToken, .adminRevokeAccountToken, .adminSetAccountPassword:
            return .admin(.accounts)
        }
    }

    /// Whether an account may call this route on its own account (`{name}`) without the route's
    /// permission: its own tokens and password.
    var isSelfService: Bool {
        self == .adminAccountTokens || self == .adminCreateAccountToken || self == .adminRevokeAccountToken
            || self == .adminSetAccountPassword
    }

    /// The path in Hummingbird's router syntax (`:name`), relative to a group mounted at `prefix`.
    func routerPath(under prefix: String = "") -> String {
        precondition(path.hasPrefix(prefix), "\(path) is not under \(prefix)")
        return path.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false).map { segment in
            segment.hasPrefix("{") && segment.hasSuffix("}") ? ":" + segment.dropFirst().dropLast() : String(segment)
        }.joined(separator: "/")
    }

    /// The methods the API serves at `requestPath`: the routes that match it with the most
    /// literal segments, so that a path whose segment is a route's own word
    /// (`/v1/devices/invalid`, `/admin/tenants/{id}/channels/sync`) belongs to that route only, not
    /// also to the parameterised ones it happens to match (`/v1/devices/{token}`,
    /// `…/channels/{channel}`). Admin routes count only while they are enabled.
    static func methods(at requestPath: String, adminEnabled: Bool) -> [HTTPRequest.Method] {
        let matching = allCases.filter { (adminEnabled || !$0.access.isAdmin) && $0.match(requestPath) != nil }
        let literals = matching.map { $0.path.split(separator: "/").filter { !$0.hasPrefix("{") }.count }
        guard let most = literals.max() else { return [] }
        return zip(matching, literals).filter { $0.1 == most }.map(\.0.method)
    }

    /// The path parameters of `requestPath` if it matches this route's path, else nil.
    func match(_ requestPath: String) -> [String: String]? {
        let pattern = path.split(separator: "/", omittingEmptySubsequences: false)
        var actual = requestPath.split(separator: "/", omittingEmptySubsequences: false)
        if actual.count > 1, actual.last == "" { actual.removeLast() }
        guard pattern.count == actual.count else { return nil }
        var parameters: [String: String] = [:]
        for (expected, segment) in zip(pattern, actual) {
            if expected.hasPrefix("{"), expected.hasSuffix("}") {
                guard !segment.isEmpty else { return nil }
                parameters[String(expected.dropFirst().dropLast())] = String(segment).removingPercentEncoding ?? String(segment)
            } else if expected != segment {
                return nil
            }
        }
        return parameters
    }
}
