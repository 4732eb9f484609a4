/// Which APNs environment a notification goes to.
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable, Codable, CustomStringConvertible {
    case production
    case development
    public var description: String { rawValue }
}

/// An APNs server address: `https://host:port`.
public struct APNsEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int = 443) {
        self.host = host
        self.port = port
    }

    public static let production = APNsEndpoint(host: "api.push.apple.com", port: 443)
    public static let development = APNsEndpoint(host: "api.sandbox.push.apple.com", port: 443)
    /// Apple's channel management service for broadcasts, production.
    public static let channelsProduction = APNsEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
    /// Apple's channel management service for broadcasts, development.
    public static let channelsDevelopment = APNsEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)

    /// Parses `https://host[:port]`; the scheme must be https.
    public init?(url: String) {
        guard url.hasPrefix("https://") else { return nil }
        var rest = Substring(url.dropFirst("https://".count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        // Byte scans: `contains` with a string argument goes through Foundation's text search.
        guard !rest.isEmpty, !rest.utf8.contains(UInt8(ascii: "/")), !rest.utf8.contains(UInt8(ascii: "@")) else { return nil }
        if rest.hasPrefix("[") {  // [v6]:port
            guard let close = rest.firstIndex(of: "]") else { return nil }
            let host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.isEmpty { self.init(host: host, port: 443); return }
            guard after.hasPrefix(":"), let port = Int(after.dropFirst()), (1...65535).contains(port) else { return nil }
            self.init(host: host, port: port)
            return
        }
        let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: self.init(host: String(parts[0]), port: 443)
        case 2:
            guard !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port) else { return nil }
            self.init(host: String(parts[0]), port: port)
        default: return nil
        }
    }

    public var url: String {
        let h = host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]" : host
        return "https://\(h):\(port)"
    }

    public var description: String { url }
}

/// How a tenant authenticates to APNs.
public enum AuthConfiguration: Sendable, Hashable {
    case token(TokenAuthConfiguration)
    case certificate(CertificateAuthConfiguration)

    public var kind: AuthKind {
        switch self {
        case .token: return .token
        case .certificate: return .certificate
        }
    }
}

public enum AuthKind: String, Sendable, Hashable, Codable, CustomStringConvertible {
    case token
    case certificate
    public var description: String { rawValue }
}

/// Token (JWT, ES256) authentication with a `.p8` signing key.
public struct TokenAuthConfiguration: Sendable, Hashable {
    /// The tenant's token signing keys, at least one, in the file's order. A send is signed with
    /// the first key that fits its environment and topic (``key(for:topic:)``).
    public var keys: [TokenKeyConfiguration]

    /// The first key's ID (`kid`).
    public var keyID: String {
        get { keys.first?.keyID ?? "" }
        set { if !keys.isEmpty { keys[0].keyID = newValue } }
    }

    /// The first key's PKCS#8 PEM private key.
    public var privateKey: Secret {
        get { keys.first?.privateKey ?? Secret(bytes: [], origin: "none") }
        set { if !keys.isEmpty { keys[0].privateKey = newValue } }
    }

    /// One unrestricted key.
    public init(keyID: String, privateKey: Secret) {
        self.keys = [TokenKeyConfiguration(keyID: keyID, privateKey: privateKey)]
    }

    /// Several keys, each possibly restricted; `keys` must not be empty (the parser's rule).
    public init(keys: [TokenKeyConfiguration]) {
        self.keys = keys
    }

    /// True when the tenant has more than one key or a key restricted to an environment or to
    /// topics: a send then needs a key that fits it.
    public var isRestricted: Bool {
        keys.count > 1 || keys.contains { $0.environment != nil || $0.topics != nil }
    }

    /// The first key that fits `environment` and `topic`, or nil when none does.
    public func key(for environment: APNsEnvironment, topic: String) -> TokenKeyConfiguration? {
        keys.first { $0.fits(environment: environment, topic: topic) }
    }
}

/// One token signing key (an Apple `.p8` key): its ID, the key, and what Apple restricted it to.
/// Apple issues keys for one environment (team-scoped keys) or for some topics (topic-specific
/// keys); a key without restrictions signs every send.
public struct TokenKeyConfiguration: Sendable, Hashable {
    /// The 10-character key ID (`kid`).
    public var keyID: String
    /// The PKCS#8 PEM private key.
    public var privateKey: Secret
    /// The only environment the key signs for; nil: both.
    public var environment: APNsEnvironment?
    /// The only bundle IDs or topics the key signs for; nil: every topic of the tenant.
    public var topics: [String]?

    public init(keyID: String, privateKey: Secret, environment: APNsEnvironment? = nil, topics: [String]? = nil) {
        self.keyID = keyID
        self.privateKey = privateKey
        self.environment = environment
        self.topics = topics
    }

    /// Whether the key signs a send to `topic` in `environment`: the environment is the key's (or
    /// it has none), and the topic is one of the key's or a push-type form of one
    /// (`com.acme.app.voip` for `com.acme.app`).
    public func fits(environment: APNsEnvironment, topic: String) -> Bool {
        if let restricted = self.environment, restricted != environment { return false }
        guard let topics else { return true }
        return topics.contains { allowed in
            topic == allowed
                || PushType.allCases.contains { type in type.requiredTopicSuffix.map { topic == allowed + $0 } ?? false }
        }
    }

    /// What the key is restricted to, in words ("development only, topics com.acme.app").
    public var restrictionText: String {
        var parts: [String] = []
        if let environment { parts.append("\(environment) only") }
        if let topics { parts.append("topics " + topics.joined(separator: ", ")) }
        return parts.isEmpty ? "unrestricted" : parts.joined(separator: ", ")
    }
}

/// Certificate (mutual TLS) authentication.
public struct CertificateAuthConfiguration: Sendable, Hashable {
    public enum Identity: Sendable, Hashable {
        /// A PEM certificate (chain, leaf first) and its PEM private key (possibly encrypted).
        case pem(certificateChain: [UInt8], privateKey: Secret)
        /// A PKCS#12 bundle holding both.
        case pkcs12(Secret)
    }

    public var identity: Identity
    /// Decrypts an encrypted PEM key or the PKCS#12 bundle.
    public var passphrase: Secret?
    /// Where the certificate came from, for messages (a path, never the key).
    public var origin: String

    public init(identity: Identity, passphrase: Secret?, origin: String) {
        self.identity = identity
        self.passphrase = passphrase
        self.origin = origin
    }
}

/// The APNs servers a tenant sends to.
public struct EndpointsConfiguration: Sendable, Hashable {
    public var production: APNsEndpoint?
    public var development: APNsEndpoint?
    /// The environment used when a send names none.
    public var defaultEnvironment: APNsEnvironment
    /// Extra trust roots (PEM) for a non-Apple endpoint such as APNsSandbox.
    public var trustRootsPEM: [UInt8]?
    /// The path `trustRootsPEM` came from, for messages.
    public var trustRootsOrigin: String?
    /// The channel management service (broadcast channels) of each environment.
    public var channelsProduction: APNsEndpoint?
    public var channelsDevelopment: APNsEndpoint?

    public init(
        production: APNsEndpoint? = .production, development: APNsEndpoint? = .development,
        defaultEnvironment: APNsEnvironment = .production, trustRootsPEM: [UInt8]? = nil,
        trustRootsOrigin: String? = nil,
        channelsProduction: APNsEndpoint? = .channelsProduction, channelsDevelopment: APNsEndpoint? = .channelsDevelopment
    ) {
        self.production = production
        self.development = development
        self.channelsProduction = channelsProduction
        self.channelsDevelopment = channelsDevelopment
        self.defaultEnvironment = defaultEnvironment
        self.trustRootsPEM = trustRootsPEM
        self.trustRootsOrigin = trustRootsOrigin
    }

    public func endpoint(for environment: APNsEnvironment) -> APNsEndpoint? {
        switch environment {
        case .production: return production
        case .development: return development
        }
    }

    /// The channel management service of `environment`; nil when switched off.
    public func channelEndpoint(for environment: APNsEnvironment) -> APNsEndpoint? {
        switch environment {
        case .production: return channelsProduction
        case .development: return channelsDevelopment
        }
    }
}

/// Connection-pool settings for a tenant (per endpoint).
public struct PoolConfiguration: Sendable, Hashable {
    /// HTTP/2 connections per endpoint.
    public var connections: Int = 2
    /// Notifications that may wait for a free stream before sends fail fast.
    public var maxQueued: Int = 10_000
    /// How long a notification may wait for a stream, and then for its answer, in seconds.
    public var requestTimeout: Double = 30
    /// An idle connection is closed after this many seconds (0: never).
    public var idleTimeout: Double = 600
    /// An idle connection is PINGed after this many seconds to check its health.
    public var pingInterval: Double = 60
    /// When every open connection of an endpoint carries this many notifications in flight, the
    /// next one opens (up to ``connections``), and sends spread over them and their event loops.
    /// 0: the next opens only when every open one's streams are full.
    public var openNextAt: Int = 0
    /// The most notifications in flight on one connection: the lower of this and what APNs
    /// allows (its SETTINGS_MAX_CONCURRENT_STREAMS). Sends beyond it wait in the pool's queue
    /// (``maxQueued``) and take the streams that end; a connection at the cap counts as full, so
    /// the next of ``connections`` opens. 1–1000; 1000 is also Herald's ceiling.
    public var maxStreams: Int = 1000

    public init() {}
}

/// A plugin switched on for a tenant: its name and its options as written in the YAML.
public struct PluginConfiguration: Sendable, Hashable {
    public var name: String
    public var options: JSONValue
    /// Where in the tenant file it was declared (for errors).
    public var location: SourceLocation

    public init(name: String, options: JSONValue, location: SourceLocation) {
        self.name = name
        self.options = options
        self.location = location
    }
}

/// An API key as stored in a tenant file: a name and the SHA-256 of the key, in hex.
public struct APIKeyEntry: Sendable, Hashable {
    public var name: String
    public var sha256Hex: String

    public init(name: String, sha256Hex: String) {
        self.name = name
        self.sha256Hex = sha256Hex
    }
}

/// A place in a configuration file.
public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int

    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }

    public var description: String { "\(file):\(line):\(column)" }
}

/// Everything Herald knows about one tenant, loaded and checked from its YAML file.
public struct TenantConfiguration: Sendable, Hashable {
    public var id: TenantID
    /// The 10-character Apple team ID (`iss` of the JWT).
    public var teamID: String
    public var auth: AuthConfiguration
    /// The topics (bundle IDs, with push-type suffixes) this tenant may push to.
    public var topics: [String]
    public var endpoints: EndpointsConfiguration
    public var pool: PoolConfiguration
    public var plugins: [PluginConfiguration]
    public var apiKeys: [APIKeyEntry]
    /// How its batch items are retried, and its circuit per endpoint (`delivery:`).
    public var delivery: DeliveryPolicy
    /// Where Herald tells the tenant about events (`webhook:`); nil: the tenant is told nothing.
    public var webhook: TenantWebhook?
    /// How its connections to APNs leave the network (`proxy:`); nil: as `config/herald.yaml`'s
    /// `proxy:` says (directly when it says nothing).
    public var proxy: ProxySetting?
    /// The tenant file's path.
    public var sourceFile: String

    public init(
        id: TenantID, teamID: String, auth: AuthConfiguration, topics: [String],
        endpoints: EndpointsConfiguration = EndpointsConfiguration(), pool: PoolConfiguration = PoolConfiguration(),
        plugins: [PluginConfiguration] = [], apiKeys: [APIKeyEntry] = [], delivery: DeliveryPolicy = DeliveryPolicy(),
        webhook: TenantWebhook? = nil, proxy: ProxySetting? = nil, sourceFile: String
    ) {
        self.id = id
        self.teamID = teamID
        self.auth = auth
        self.topics = topics
        self.endpoints = endpoints
        self.pool = pool
        self.plugins = plugins
        self.apiKeys = apiKeys
        self.delivery = delivery
        self.webhook = webhook
        self.proxy = proxy
        self.sourceFile = sourceFile
    }

    /// True when the tenant may push to `topic`.
    public func allows(topic: String) -> Bool { topics.contains(topic) }
}
