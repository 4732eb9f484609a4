import Crypto
import Foundation
import HeraldConfig
import HeraldCore
import HeraldStore
import Logging

/// The idle-tenant benchmark behind `herald bench-tenants`: how long N tenant files take to
/// load into a router, and how much memory N idle tenants hold.
public enum TenantBench {
    public struct Figures: Sendable, Hashable {
        public var tenants: Int
        public var failed: Int
        /// Reading and checking the files (HeraldConfig).
        public var parseSeconds: Double
        /// Building the runtimes: credentials, plugins, pipelines (no connection).
        public var installSeconds: Double
        public var totalSeconds: Double { parseSeconds + installSeconds }
        /// Resident memory before loading and after, in bytes (nil where /proc is missing).
        public var rssBefore: Int?
        public var rssAfter: Int?
        public var rssAdded: Int? { rssBefore.flatMap { before in rssAfter.map { $0 - before } } }
    }

    /// A client certificate and its key (PEM) that every certificate tenant of the bench uses.
    public struct BenchCertificate: Sendable {
        public var certificatePEM: String
        public var keyPEM: String
        /// The topic the certificate allows (its subject's UID or topics extension).
        public var topic: String

        public init(certificatePEM: String, keyPEM: String, topic: String) {
            self.certificatePEM = certificatePEM
            self.keyPEM = keyPEM
            self.topic = topic
        }
    }

    /// Writes `count` tenant files with the `rate-limit`, `feedback` and `metrics` plugins into
    /// `directory`: token tenants sharing one freshly generated P-256 key, or, given
    /// `certificate`, certificate tenants sharing that certificate (each still builds its own
    /// credential and TLS context, as tenants with their own certificates do).
    public static func writeTenantFiles(count: Int, directory: String, certificate: BenchCertificate? = nil) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let auth: String
        if let certificate {
            try certificate.certificatePEM.write(toFile: directory + "/bench-cert.pem", atomically: true, encoding: .utf8)
            try certificate.keyPEM.write(toFile: directory + "/bench-cert.key", atomically: true, encoding: .utf8)
            auth = """
                auth:
                  certificate:
                    cert_file: bench-cert.pem
                    key_file: bench-cert.key
                """
        } else {
            let key =
                "# Throwaway key generated for herald bench-tenants\n" + P256.Signing.PrivateKey().pemRepresentation + "\n"
            try key.write(toFile: directory + "/bench-key.p8", atomically: true, encoding: .utf8)
            auth = """
                auth:
                  token:
                    key_id: BENCHKEY01
                    key_file: bench-key.p8
                """
        }
        for index in 0..<count {
            let id = String(format: "bench-%05d", index)
            let topics =
                certificate.map { "[\($0.topic)]" } ?? "[com.example.bench\(index), com.example.bench\(index).voip]"
            let yaml = """
                id: \(id)
                team_id: BENCHTEAM1
                \(auth)
                topics: \(topics)
                endpoints:
                  production: https://127.0.0.1:2197
                  development: https://127.0.0.1:2197
                  default: development
                plugins:
                  - name: rate-limit
                    options: { per_second: 500, burst: 1000 }
                  - name: feedback
                  - name: metrics

                """
            try yaml.write(toFile: "\(directory)/\(id).yaml", atomically: true, encoding: .utf8)
        }
    }

    /// Loads the tenant files of `directory` into a fresh router with real (unopened) APNs
    /// transports, and measures time and resident memory. The router is returned so that the
    /// caller keeps it alive while reading the figures.
    public static func measure(directory: String, dataDirectory: String) async throws -> (Figures, Router) {
        let router = try makeRouter(dataDirectory: dataDirectory)
        // Warm up what every load pays once (code paths, the loader's and the plugins' statics).
        _ = try? TenantLoader().loadDirectory(NSTemporaryDirectory() + "/does-not-exist")

        let rssBefore = residentBytes()
        let clock = ContinuousClock()
        let parseStart = clock.now
        let load = try TenantLoader().loadDirectory(directory)
        let parseEnd = clock.now
        let report = await router.install(load.tenants)
        let installEnd = clock.now
        let rssAfter = residentBytes()
        let figures = Figures(
            tenants: report.loaded.count, failed: load.failures.count + report.failures.count,
            parseSeconds: parseStart.duration(to: parseEnd).secondsValue,
            installSeconds: parseEnd.duration(to: installEnd).secondsValue,
            rssBefore: rssBefore, rssAfter: rssAfter)
        return (figures, router)
    }

    /// What `herald serve` pays at start: the same directory loaded into a fresh router through a
    /// ``ReloadCoordinator``, which validates each tenant in full (the key loads, a provider
    /// token signs, the TLS context builds, the plugins build) before installing it.
    public struct StartupFigures: Sendable, Hashable {
        public var tenants: Int
        public var failed: Int
        public var seconds: Double
    }

    public static func measureStartup(directory: String, dataDirectory: String) async throws -> (StartupFigures, Router) {
        let router = try makeRouter(dataDirectory: dataDirectory)
        let coordinator = ReloadCoordinator(router: router, configuration: ReloadConfiguration(tenantsDirectory: directory))
        let clock = ContinuousClock()
        let start = clock.now
        let report = try await coordinator.reloadAll(trigger: .startup)
        let figures = StartupFigures(
            tenants: report.added.count, failed: report.failures.count, seconds: start.duration(to: clock.now).secondsValue)
        return (figures, router)
    }

    /// A router with real (unopened) APNs transports and a SQLite store, logging errors only.
    private static func makeRouter(dataDirectory: String) throws -> Router {
        let store = try SQLitePushStore(directory: dataDirectory)
        var logger = Logger(label: "herald.bench")
        logger.logLevel = .error
        return Router(configuration: RouterConfiguration(store: store, transports: APNsTransportProvider(), logger: logger))
    }

    /// The process's resident set size, from /proc/self/status (Linux); nil elsewhere.
    public static func residentBytes() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let digits = line.split(separator: " ").compactMap { Int($0) }
            return digits.first.map { $0 * 1024 }
        }
        return nil
    }
}
