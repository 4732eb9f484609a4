import Foundation
import Herald
import HeraldAPNs
import HeraldConfig
import HeraldCore
import Hummingbird

/// How the admin API shows a loaded tenant: its settings (never a secret: API keys by name
/// only), credential health, pool state, reload state and delivery circuits.
struct TenantView: ResponseEncodable, Sendable {
    struct Auth: Encodable, Sendable {
        /// A token key and what Apple restricted it to (never the key).
        struct Key: Encodable, Sendable {
            var keyID: String
            @Nullable var environment: String?
            @Nullable var topics: [String]?
        }
        var kind: String
        var teamID: String
        /// The first token key's ID.
        var keyID: String?
        /// Token tenants: every key, in the file's order.
        var keys: [Key]?
        /// Certificate tenants: always present (null until the credential was read).
        var certificateSubject: Nullable<String>?
        var notAfter: Nullable<Date>?
        var expiresInDays: Int?
    }

    /// What the credential health monitor last saw (null before its first look).
    struct CredentialHealthView: Encodable, Sendable {
        var checkedAt: Date
        @Nullable var certificateNotAfter: Date?
        @Nullable var expiresInDays: Int?
        @Nullable var keyWrittenAt: Date?
        @Nullable var keyAgeDays: Int?
        @Nullable var problem: String?
    }

    struct Pool: Encodable, Sendable {
        var state: String
        var connectionsPerEndpoint: Int
        var inFlight: Int
        var answered: Int
        var errors: Int
        @Nullable var lastAnswerAt: Date?
    }

    struct LastError: Encodable, Sendable {
        var message: String
        @Nullable var at: Date?
    }

    struct Reload: Encodable, Sendable {
        struct Failure: Encodable, Sendable {
            var message: String
            @Nullable var at: Date?
            var consecutiveFailures: Int
        }
        @Nullable var loadedAt: Date?
        @Nullable var lastReloadAt: Date?
        var swaps: Int
        @Nullable var lastError: Failure?
    }

    struct Delivery: Encodable, Sendable {
        struct Circuit: Encodable, Sendable {
            var endpoint: String
            var state: String
            var failures: Int
            var openings: Int
            @Nullable var probeInSeconds: Double?
        }
        var guarantee: String
        var maxRetryDurationSeconds: Double
        var circuits: [Circuit]
    }

    /// Where Herald tells the tenant about events: the URL and delivery settings, never the secret.
    struct Webhook: Encodable, Sendable {
        var url: String
        var attempts: Int
        var timeoutMs: Int64
        var backoffMs: Int64
        var allowPrivateAddresses: Bool
        /// Where the tenant file sets it: `webhook`, or `plugins[feedback].options` (deprecated).
        var setIn: String

        init(_ webhook: TenantWebhook) {
            url = webhook.url
            attempts = webhook.attempts
            timeoutMs = webhook.timeoutMilliseconds
            backoffMs = webhook.backoffMilliseconds
            allowPrivateAddresses = webhook.allowPrivateAddresses
            setIn = webhook.origin.rawValue
        }
    }

    var id: String
    var file: String
    var auth: Auth
    var topics: [String]
    /// The endpoint URL per environment (null where the tenant has none).
    var endpoints: [String: Nullable<String>]
    var defaultEnvironment: String
    var plugins: [String]
    var apiKeys: [String]
    var pool: Pool
    @Nullable var credentialHealth: CredentialHealthView?
    @Nullable var lastError: LastError?
    @Nullable var reload: Reload?
    var delivery: Delivery
    /// null: the tenant has no webhook, and is told about no event.
    @Nullable var webhook: Webhook?
    /// The tenant file's `proxy`: the proxy's address (never its credentials), `none` for
    /// directly; null: as `config/herald.yaml` says.
    @Nullable var proxy: String?

    init(
        _ tenant: TenantConfiguration, health: TenantHealth?, credential look: CredentialHealth?, reload status: TenantReloadStatus?,
        circuits: [DeliveryCircuits.Status], now: Date
    ) {
        let credential = health?.credential
        var auth = Auth(kind: tenant.auth.kind.rawValue, teamID: tenant.teamID)
        switch tenant.auth {
        case .token(let token):
            auth.keyID = token.keyID
            auth.keys = token.keys.map { Auth.Key(keyID: $0.keyID, environment: $0.environment?.rawValue, topics: $0.topics) }
        case .certificate:
            auth.certificateSubject = Nullable(wrappedValue: credential?.certificateSubject)
            auth.notAfter = Nullable(wrappedValue: credential?.notAfter)
            auth.expiresInDays = credential?.notAfter.map { Int($0.timeIntervalSince(now) / 86_400) }
        }
        id = tenant.id.rawValue
        file = tenant.sourceFile
        proxy = tenant.proxy?.shown
        self.auth = auth
        topics = tenant.topics
        var endpoints: [String: Nullable<String>] = [:]
        for environment in APNsEnvironment.allCases {
            endpoints[environment.rawValue] = Nullable(wrappedValue: tenant.endpoints.endpoint(for: environment)?.url)
        }
        self.endpoints = endpoints
        defaultEnvironment = tenant.endpoints.defaultEnvironment.rawValue
        plugins = tenant.plugins.map(\.name)
        apiKeys = tenant.apiKeys.map(\.name)
        pool = Pool(
            state: health?.poolState ?? "idle", connectionsPerEndpoint: tenant.pool.connections, inFlight: health?.inFlight ?? 0,
            answered: health?.answered ?? 0, errors: health?.errors ?? 0, lastAnswerAt: health?.lastAnswerAt)
        credentialHealth = look.map { look in
            CredentialHealthView(
                checkedAt: look.checkedAt, certificateNotAfter: look.certificateNotAfter,
                expiresInDays: look.secondsUntilExpiry(at: now).map { Int(($0 / 86_400).rounded(.down)) },
                keyWrittenAt: look.keyWrittenAt, keyAgeDays: look.keyAge(at: now).map { Int(($0 / 86_400).rounded(.down)) },
                problem: look.problem)
        }
        lastError = health?.lastError.map { LastError(message: $0, at: health?.lastErrorAt) }
        reload = status.map { status in
            Reload(
                loadedAt: status.loadedAt, lastReloadAt: status.lastReloadAt, swaps: status.swaps,
                lastError: status.lastError.map { message in
                    Reload.Failure(message: message, at: status.lastErrorAt, consecutiveFailures: status.consecutiveFailures)
                })
        }
        webhook = tenant.webhook.map(Webhook.init)
        delivery = Delivery(
            guarantee: tenant.delivery.guarantee.rawValue, maxRetryDurationSeconds: tenant.delivery.maxRetryDuration.secondsValue,
            circuits: circuits.map { status in
                Delivery.Circuit(
                    endpoint: status.key.endpoint, state: status.state, failures: status.failures, openings: status.openings,
                    probeInSeconds: status.probeIn.map(\.secondsValue))
            })
    }
}

/// A tenant file that failed to load, as the admin API lists it.
struct FailureView: Encodable, Sendable {
    var file: String
    @Nullable var tenant: String?
    /// The errors, one per line, naming file:line:column and the field.
    var message: String
}

/// What a reload (or a credential upload) did.
struct ReloadAnswer: ResponseEncodable {
    /// Every tenant that got a new runtime (added or changed).
    var reloaded: [String]
    var added: [String]
    var revoked: [String]
    var unchanged: [String]
    var removed: [String]
    var failures: [FailureView]

    init(_ report: ReloadReport) {
        func ids(_ list: [TenantID]) -> [String] { list.map(\.rawValue) }
        reloaded = ids(report.added + report.reloaded)
        added = ids(report.added)
        revoked = ids(report.revoked)
        unchanged = ids(report.unchanged)
        removed = ids(report.removed)
        failures = report.failures.map { FailureView(file: $0.file, tenant: $0.tenant?.rawValue, message: $0.message) }
    }
}
