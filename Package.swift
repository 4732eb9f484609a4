// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Herald",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "herald", targets: ["HeraldCLI"]),
        .library(name: "HeraldCore", targets: ["HeraldCore"]),
        .library(name: "HeraldConfig", targets: ["HeraldConfig"]),
        .library(name: "HeraldAPNs", targets: ["HeraldAPNs"]),
        .library(name: "APNsSandbox", targets: ["APNsSandbox"]),
        .plugin(name: "ValidateTenants", targets: ["ValidateTenants"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/vapor/multipart-kit.git", from: "4.7.1"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
    ],
    targets: [
        // libnghttp2 from the system (Debian: libnghttp2-dev): the HTTP/2 engine under the APNs
        // client and APNsSandbox.
        .systemLibrary(
            name: "CNGHTTP2",
            pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]
        ),
        // HTTP/2 on libnghttp2: one NIO channel handler owning one nghttp2 session (client or server).
        .target(
            name: "HTTP2Engine",
            dependencies: [
                "CNGHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // Work handed to a NIO event loop from other threads: Swift tasks run on a loop (the APNs
        // transport's senders, each PostgreSQL call on its connection's loop) and requests
        // handed to a connection's loop.
        .target(
            name: "EventLoopExecutors",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // The vocabulary of the APNs provider API. Foundation only.
        .target(name: "HeraldCore"),
        // Tenant and server configuration files (YAML).
        .target(
            name: "HeraldConfig",
            dependencies: [
                "HeraldCore",
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        // The wire: credentials, HTTP/2 connections and pools.
        .target(
            name: "HeraldAPNs",
            dependencies: [
                "HeraldCore", "HTTP2Engine", "EventLoopExecutors",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // An outbound proxy's tunnel: HTTP CONNECT on NIOHTTP1, SOCKS5 on NIOSOCKS.
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A faithful local APNs over TLS and HTTP/2 (an nghttp2 server session).
        .target(
            name: "APNsSandbox",
            dependencies: [
                "HeraldCore", "HTTP2Engine", "CNGHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The engine: router, tenant runtimes, plugin registry.
        .target(
            name: "Herald",
            dependencies: [
                "HeraldCore", "HeraldConfig", "HeraldAPNs", "HeraldStore",
                "RateLimitPlugin", "FeedbackPlugin", "MetricsPlugin",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // Durable jobs, results and invalid device tokens (SQLite via GRDB by default).
        .target(
            name: "HeraldStore",
            dependencies: [
                "HeraldCore",
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // The shared store for several instances: the PushStore contract on PostgreSQL through
        // postgres-nio's pooled client. A target of its own so that HeraldStore (and everything
        // that needs only the embedded store) does not build or link the PostgreSQL driver.
        .target(
            name: "HeraldPostgres",
            dependencies: [
                "HeraldCore", "HeraldStore", "EventLoopExecutors",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Runtime plugins: one send-pipeline middleware each; they see only HeraldCore.
        .target(name: "RateLimitPlugin", dependencies: ["HeraldCore"]),
        .target(
            name: "FeedbackPlugin",
            dependencies: [
                "HeraldCore",
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "MetricsPlugin",
            dependencies: [
                "HeraldCore",
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // The HTTP API: tenant-scoped routes, admin routes, health, metrics.
        .target(
            name: "HeraldServer",
            dependencies: [
                "Herald", "HeraldCore", "HeraldConfig", "HeraldStore", "HeraldAPNs",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                // The operator console: server-rendered pages, and the credential uploads of its forms.
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "MultipartKit", package: "multipart-kit"),
                // Admin accounts' console passwords, stored as bcrypt hashes.
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
            ],
            resources: [.copy("Resources/openapi.yaml"), .copy("Resources/console")]
        ),
        // The process assembled in one place: the store, the router, the job runner, the HTTP API,
        // the sandbox, as the services of one ServiceGroup with one shutdown order.
        .target(
            name: "HeraldProcess",
            dependencies: [
                "Herald", "HeraldCore", "HeraldConfig", "HeraldStore", "HeraldPostgres", "HeraldAPNs", "APNsSandbox",
                "HeraldServer",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The `herald` command line.
        .executableTarget(
            name: "HeraldCLI",
            dependencies: [
                "HeraldCore",
                "HeraldConfig",
                "HeraldAPNs",
                "APNsSandbox",
                "Herald",
                "HeraldServer",
                "HeraldProcess",
                "HeraldPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
                // `herald tenants create|…`: the admin API's client.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // `swift package validate-tenants [DIR]`
        .plugin(
            name: "ValidateTenants",
            capability: .command(
                intent: .custom(verb: "validate-tenants", description: "Validate the tenant files in a directory (default: tenants/)"),
                permissions: []
            ),
            // No tool dependency: SwiftPM cannot give a plugin an executable target whose product is
            // named differently ("no product named 'HeraldCLI'", swiftlang/swift-package-manager#8831),
            // so the plugin asks SwiftPM to build the `herald` product and runs that.
            dependencies: []
        ),
        // What more than one test target uses: a TCP proxy that can go silent (SilentLinkProxy), child
        // processes, real outbound proxies, a clock the test steps (SteppedPushClock), the sandbox CA
        // every harness shares (TestCertificateAuthority).
        .target(
            name: "HeraldTestSupport",
            dependencies: [
                "HeraldCore", "APNsSandbox",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Tests/HeraldTestSupport"
        ),
        .testTarget(name: "HeraldCoreTests", dependencies: ["HeraldCore"]),
        .testTarget(
            name: "HTTP2EngineTests",
            dependencies: [
                "HTTP2Engine", "CNGHTTP2", "APNsSandbox",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "HeraldConfigTests",
            dependencies: [
                // Herald and APNsSandbox: ConfigurationReferenceTests reads the plugin registry and
                // the sandbox file's keys, to check docs/configuration.md against them.
                "HeraldConfig", "HeraldAPNs", "Herald", "APNsSandbox",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                // YAMLScalarTypeTests compares the reader's quick typing with Yams' resolver.
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        .testTarget(
            name: "HeraldAPNsTests",
            dependencies: [
                "HeraldAPNs", "HeraldConfig", "APNsSandbox", "HTTP2Engine", "EventLoopExecutors", "HeraldTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ]
        ),
        .testTarget(
            name: "APNsSandboxTests",
            dependencies: [
                "APNsSandbox", "HeraldCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ]
        ),
        .testTarget(
            name: "HeraldTests",
            dependencies: [
                "Herald", "HeraldStore", "HeraldPostgres", "RateLimitPlugin", "FeedbackPlugin", "MetricsPlugin",
                "APNsSandbox", "EventLoopExecutors", "HeraldTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "HeraldServerTests",
            dependencies: [
                "HeraldServer", "HeraldProcess", "Herald", "HeraldStore", "HeraldConfig", "HeraldCore", "APNsSandbox",
                "HeraldPostgres", "HeraldTestSupport", "FeedbackPlugin",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
    ]
)

// The product's own modules are compiled optimized in debug builds too, with their assertions kept
// (`-assert-config Debug`), so that `swift test` runs the code as it ships, on about a fifth less
// CPU; the tests and the dependencies stay unoptimized. `HERALD_UNOPTIMIZED=1 swift build`
// leaves the product's modules unoptimized as well, for stepping through them in a debugger.
if Context.environment["HERALD_UNOPTIMIZED"] == nil {
    let optimized: SwiftSetting = .unsafeFlags(["-O", "-assert-config", "Debug"], .when(configuration: .debug))
    for target in package.targets where target.type == .regular || target.type == .executable {
        guard target.path?.hasPrefix("Tests") != true else { continue }
        target.swiftSettings = (target.swiftSettings ?? []) + [optimized]
    }
}
