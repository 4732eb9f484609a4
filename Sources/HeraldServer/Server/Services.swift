import APNsSandbox
import Herald
import ServiceLifecycle

/// Keeps the in-process sandbox up until graceful shutdown, then stops it (last: the tenants'
/// connections to it have drained by then).
struct SandboxService: Service {
    let sandbox: APNsSandbox

    func run() async throws {
        try? await gracefulShutdown()
        try await sandbox.shutdown()
    }
}

/// Closes the store's connections at the end of a graceful shutdown.
struct StoreService: Service {
    let close: @Sendable () async -> Void

    func run() async throws {
        try? await gracefulShutdown()
        await close()
    }
}

/// Owns the router's lifetime: at graceful shutdown every tenant runtime drains its in-flight
/// sends and closes its connections (GOAWAY-friendly), and plugin work (webhooks) completes.
struct RouterService: Service {
    let router: Herald.Router

    func run() async throws {
        try? await gracefulShutdown()
        await router.shutdown()
    }
}

/// Runs the job runner; at graceful shutdown it stops taking items, lets the sends on the wire
/// finish and records them, and leaves the rest pending in the store.
struct JobRunnerService: Service {
    let runner: JobRunner

    func run() async throws {
        await withGracefulShutdownHandler {
            await runner.run()
        } onGracefulShutdown: {
            runner.stop()
        }
    }
}

/// Turns `/readyz` false as soon as graceful shutdown begins (it is the last service, so the
/// first to be told).
struct ReadinessService: Service {
    let api: APIContext

    func run() async throws {
        try? await gracefulShutdown()
        api.phase = .stopping
    }
}
