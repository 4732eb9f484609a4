import APNsSandbox
import ArgumentParser
import Foundation
import Herald

/// `herald bench-tenants --count 1000`: load time and memory of many idle tenants.
struct BenchTenantsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-tenants",
        abstract:
            "Write N tenant files to a temporary directory, load them into a router, and print the load time and the memory N idle tenants add."
    )

    @Option(name: .long, help: "How many tenant files to write and load.")
    var count: Int = 1000

    @Option(
        name: .long, help: "Where to write the tenant files (default: a new temporary directory, removed afterwards).")
    var directory: String?

    enum Auth: String, ExpressibleByArgument, CaseIterable {
        case token
        case certificate
    }

    @Option(
        name: .long,
        help: "The tenants' authentication: token (one shared .p8 key) or certificate (one shared client certificate, issued by a throwaway CA; each tenant builds its own TLS context).")
    var auth: Auth = .token

    func validate() throws {
        guard count > 0, count <= 1_000_000 else { throw ValidationError("--count must be between 1 and 1000000") }
    }

    func run() async throws {
        let root =
            directory ?? (NSTemporaryDirectory() + "herald-bench-tenants-\(ProcessInfo.processInfo.processIdentifier)")
        let tenantsDirectory = root + "/tenants"
        defer {
            if directory == nil { try? FileManager.default.removeItem(atPath: root) }
        }
        var certificate: TenantBench.BenchCertificate?
        if auth == .certificate {
            let topic = "com.example.bench"
            let issued = try SandboxCertificateAuthority.generate(commonName: "Herald bench-tenants throwaway CA")
                .issueClientCertificate(
                    commonName: "herald bench-tenants", topics: [topic], notBefore: Date().addingTimeInterval(-3600),
                    notAfter: Date().addingTimeInterval(86_400))
            certificate = TenantBench.BenchCertificate(
                certificatePEM: issued.certificatePEM, keyPEM: issued.privateKeyPEM, topic: topic)
        }
        try TenantBench.writeTenantFiles(count: count, directory: tenantsDirectory, certificate: certificate)
        let (figures, router) = try await TenantBench.measure(
            directory: tenantsDirectory, dataDirectory: root + "/data")
        print("tenants loaded:     \(figures.tenants) of \(count) (\(figures.failed) failed)")
        print(String(format: "parse files:        %.3f s", figures.parseSeconds))
        print(String(format: "build runtimes:     %.3f s", figures.installSeconds))
        print(String(format: "load total:         %.3f s  (goal: < 1 s for 1000)", figures.totalSeconds))
        if let before = figures.rssBefore, let after = figures.rssAfter, let added = figures.rssAdded {
            print(
                String(
                    format: "RSS before / after: %.1f MB / %.1f MB", Double(before) / 1_048_576,
                    Double(after) / 1_048_576))
            print(
                String(
                    format: "RSS added:          %.1f MB  (%.1f KB per idle tenant; goal: < 50 MB for 1000)",
                    Double(added) / 1_048_576, Double(added) / 1024 / Double(max(1, figures.tenants))))
        } else {
            print("RSS:                not available on this system")
        }
        await router.shutdown()

        // The same files the way `herald serve` loads them at start: each tenant validated in full.
        let (startup, validated) = try await TenantBench.measureStartup(
            directory: tenantsDirectory, dataDirectory: root + "/data-startup")
        print(
            String(
                format: "serve start:        %.3f s  (%d loaded, %d failed; full validation: key, TLS context, plugins)",
                startup.seconds, startup.tenants, startup.failed))
        await validated.shutdown()
        if figures.failed > 0 || startup.failed > 0 { throw ExitCode(1) }
    }
}
