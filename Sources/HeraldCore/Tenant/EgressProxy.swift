import Foundation

/// An outbound proxy that Herald's connections to APNs go through: HTTP `CONNECT` or SOCKS5
/// (the APNs host name resolved by the proxy). TLS to APNs runs inside the tunnel, unchanged.
///
/// ```yaml
/// proxy: http://proxy.internal:3128          # config/herald.yaml: every tenant; a tenant file: this tenant
/// proxy:                                     # with credentials and exceptions
///   url: socks5://proxy.internal:1080
///   username: herald
///   password: env:HERALD_PROXY_PASSWORD      # or file:PATH; never inline
///   no_proxy: [localhost, .internal]
/// proxy: none                                # a tenant file: connect directly
/// ```
public struct EgressProxy: Sendable, Hashable, CustomStringConvertible {
    public enum Scheme: String, Sendable, Hashable, CaseIterable {
        /// HTTP `CONNECT host:port`, with `Proxy-Authorization: Basic` when credentials are set.
        case http
        /// SOCKS5, the target given by name.
        case socks5
    }

    public var scheme: Scheme
    public var host: String
    public var port: Int
    /// The user the proxy knows Herald by; with ``password``.
    public var username: String?
    public var password: Secret?
    /// Hosts reached directly, as `NO_PROXY` lists them: a name (`localhost`), a domain and its
    /// subdomains (`.internal` or `internal`), an address, or `*` for every host.
    public var bypass: [String]

    public init(
        scheme: Scheme, host: String, port: Int, username: String? = nil, password: Secret? = nil, bypass: [String] = []
    ) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.bypass = bypass
    }

    /// What is wrong with a proxy URL.
    public enum URLProblem: Error, Sendable, Hashable {
        /// Not `http://HOST[:PORT]` or `socks5://HOST[:PORT]` (a path, a query, another scheme).
        case shape
        /// It holds a user or password: credentials are given apart, never in the URL.
        case credentials
        /// The port is outside 1...65535.
        case port
    }

    /// Reads `http://HOST[:PORT]` or `socks5://HOST[:PORT]` (an IPv6 host in brackets; the
    /// scheme's usual port when none is given). Nothing else may be in the URL.
    public static func parse(url text: String) -> Result<EgressProxy, URLProblem> {
        guard let components = URLComponents(string: text), let schemeName = components.scheme?.lowercased(),
            let scheme = Scheme(rawValue: schemeName)
        else { return .failure(.shape) }
        if components.user != nil || components.password != nil { return .failure(.credentials) }
        guard var host = components.host, !host.isEmpty, components.path.isEmpty || components.path == "/",
            components.query == nil, components.fragment == nil
        else { return .failure(.shape) }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = components.port ?? defaultPort(scheme)
        guard (1...65_535).contains(port) else { return .failure(.port) }
        return .success(EgressProxy(scheme: scheme, host: host, port: port))
    }

    /// ``parse(url:)``, nil for a URL it refuses.
    public init?(url: String) {
        guard case .success(let proxy) = Self.parse(url: url) else { return nil }
        self = proxy
    }

    /// The port a scheme's proxy listens on when the URL names none.
    public static func defaultPort(_ scheme: Scheme) -> Int {
        switch scheme {
        case .http: return 3128
        case .socks5: return 1080
        }
    }

    /// True when a connection to `host` goes through the proxy (it is not one of ``bypass``).
    public func applies(to host: String) -> Bool {
        let target = Self.normalized(host)
        for entry in bypass {
            let rule = Self.normalized(entry)
            if rule == "*" { return false }
            let domain = rule.hasPrefix("*.") ? String(rule.dropFirst(2)) : rule.hasPrefix(".") ? String(rule.dropFirst()) : rule
            if domain.isEmpty { continue }
            if target == domain || target.hasSuffix("." + domain) { return false }
        }
        return true
    }

    private static func normalized(_ host: String) -> String {
        var text = host.lowercased()
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        while text.hasSuffix(".") { text.removeLast() }
        return text
    }

    /// `scheme://host:port`, without credentials: for logs, errors and health.
    public var address: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(scheme.rawValue)://\(shownHost):\(port)"
    }

    public var description: String { address }
}

/// How a tenant's connections leave the network.
public enum ProxySetting: Sendable, Hashable {
    /// Directly (`proxy: none`), whatever `config/herald.yaml` says.
    case direct
    case proxy(EgressProxy)

    /// The proxy in use, if any.
    public var proxy: EgressProxy? {
        if case .proxy(let proxy) = self { return proxy }
        return nil
    }

    /// As a tenant file's `proxy:` reads in short: `none`, or the proxy's address (never its
    /// credentials).
    public var shown: String {
        switch self {
        case .direct: return "none"
        case .proxy(let proxy): return proxy.address
        }
    }
}
