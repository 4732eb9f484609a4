import Foundation
import HeraldConfig
import HeraldProcess
import HeraldServer

extension ClusterTests {
    /// Two `herald serve` instances (in this process) on one fresh PostgreSQL schema and the
    /// world's tenants directory: `options` and a copy with its own instance ID. `body` runs once
    /// B listens for A's notifications; then both stop, the schema is dropped and the world closed.
    static func withTwoInstances(
        _ world: TestWorld, settings: ServerConfiguration.PostgresSettings, options: HeraldProcessOptions,
        _ body: @Sendable (_ a: LiveServer, _ b: LiveServer) async throws -> Void
    ) async throws {
        // Two processes each make their own options, so each its own instance ID.
        let second = {
            var second = options
            second.jobs.instance = "second-\(options.jobs.instance)"
            return second
        }()
        try await closing(world) {
            try await withSchemaStore(settings) { _ in
                try await LiveServer.with(options) { a in
                    try await LiveServer.with(second) { b in
                        await b.server.waitUntilListeningForPeers()
                        try await body(a, b)
                    }
                }
            }
        }
    }
}
