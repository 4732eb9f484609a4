import Foundation
import HeraldCore
import Yams

// The `http:` section of `config/herald.yaml`: the API listener's own limits, which no tenant
// can raise.
extension ServerConfiguration {
    /// The HTTP listener's limits and the per-API-key request rate (`http:`).
    ///
    /// ```yaml
    /// http:
    ///   idle_timeout: 60s       # close a connection with no request in progress (a half-sent head counts as none)
    ///   body_timeout: 30s       # a request's body must arrive within this, from its head
    ///   max_connections: 2048   # open connections at once; beyond, new ones wait in the backlog
    ///   rate_limit:             # per API key, before any work is done
    ///     requests_per_second: 1000
    ///     burst: 2000
    /// ```
    public struct HTTPSettings: Sendable, Hashable {
        /// Seconds a connection may sit with no request in progress (including a request head
        /// that has not finished arriving) before it is closed.
        public var idleTimeout: Double = 60
        /// Seconds a request's body may take to arrive, from the end of its head.
        public var bodyTimeout: Double = 30
        /// Open API connections at once.
        public var maxConnections: Int = 2048
        /// Requests a second one API key may make, and the burst above that rate.
        public var rateLimit: RateLimit = RateLimit()

        public init() {}

        /// A token bucket per API key: `requestsPerSecond` refill, `burst` capacity.
        public struct RateLimit: Sendable, Hashable {
            public var requestsPerSecond: Double = 1000
            public var burst: Int = 2000

            public init(requestsPerSecond: Double = 1000, burst: Int = 2000) {
                self.requestsPerSecond = requestsPerSecond
                self.burst = burst
            }
        }
    }

    static let httpKeys = ["idle_timeout", "body_timeout", "max_connections", "rate_limit"]
    static let httpRateLimitKeys = ["requests_per_second", "burst"]
    static let httpTimeoutRange = 0.1...3600.0

    /// Reads the `http:` section of the top-level mapping.
    static func parseHTTPSection(_ mapping: CheckedMapping, into configuration: inout ServerConfiguration, diagnostics: YAMLDiagnostics) {
        guard let node = mapping["http"],
            let http = CheckedMapping(node, path: FieldPath(text: "http"), allowedKeys: httpKeys, diagnostics: diagnostics)
        else { return }
        for (key, keyPath) in [("idle_timeout", \HTTPSettings.idleTimeout), ("body_timeout", \HTTPSettings.bodyTimeout)] {
            guard let node = http[key],
                let value = diagnostics.duration(node, FieldPath(text: "http.\(key)"), minimum: httpTimeoutRange.lowerBound, allowZero: false)
            else { continue }
            if value > httpTimeoutRange.upperBound {
                diagnostics.error(at: node, "http.\(key)", "must be from 100ms to 1h")
            } else {
                configuration.http[keyPath: keyPath] = value
            }
        }
        if let node = http["max_connections"],
            let value = diagnostics.integer(node, FieldPath(text: "http.max_connections"), in: 1...1_000_000)
        {
            configuration.http.maxConnections = value
        }
        if let node = http["rate_limit"],
            let limit = CheckedMapping(
                node, path: FieldPath(text: "http.rate_limit"), allowedKeys: httpRateLimitKeys, diagnostics: diagnostics)
        {
            if let node = limit["requests_per_second"] {
                if case .scalar = node, node.tagName == .int || node.tagName == .float, let value = node.float, value.isFinite,
                    (0.001...1_000_000).contains(value)
                {
                    diagnostics.record("http.rate_limit.requests_per_second", node)
                    configuration.http.rateLimit.requestsPerSecond = value
                } else {
                    diagnostics.error(at: node, "http.rate_limit.requests_per_second", "must be a number from 0.001 to 1000000")
                }
            }
            if let node = limit["burst"],
                let value = diagnostics.integer(node, FieldPath(text: "http.rate_limit.burst"), in: 1...1_000_000)
            {
                configuration.http.rateLimit.burst = value
            }
        }
    }
}
