import APNsSandbox
import Herald
import HeraldStore
import Logging
import ServiceLifecycle
import Synchronization

/// Keeps the in-process sandbox up until graceful shutdown, then stops it (last: the tenants'
/// connections to it have drained by then).
struct SandboxService: Service {
    let sandbox: APNsSandbox

    func run() async throws {
        try? await gracefulShutdown()
        try await sandbox.shutdown()
    }
}

/// Closes the store's connections at the end of a graceful shutdown and gives up its lock.
struct StoreService: Service {
    let close: @Sendable () async -> Void
    /// This process's lock on its SQLite store, given up once the store's users have stopped.
    let lock: StoreLock?

    func run() async throws {
        try? await gracefulShutdown()
        await close()
        lock?.release()
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

/// Runs the job runner once the API listens (a server that cannot bind its port sends
/// nothing); at graceful shutdown it stops taking items, lets the sends on the wire finish and
/// records them, and leaves the rest pending in the store.
struct JobRunnerService: Service {
    let runner: JobRunner
    let listening: OneShotGate

    func run() async throws {
        await withGracefulShutdownHandler {
            // Cancelled (the listener failed to bind and the group is cancelled): stop waiting.
            await withTaskCancellationHandler {
                await listening.wait()
            } onCancel: {
                listening.open()
            }
            guard !runner.isStopping, !Task.isCancelled else { return }
            await runner.run()
        } onGracefulShutdown: {
            runner.stop()
            listening.open()
        }
    }
}

/// Deletes expired jobs and checkpoints the WAL in the background; ends at graceful shutdown
/// (a sweep in progress ends at its current transaction).
struct StoreMaintenanceService: Service {
    let maintenance: StoreMaintenance

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await maintenance.run()
        }
    }
}

/// Posts queued webhooks; at graceful shutdown (after the router drained, as plugins queue
/// webhooks until then) it lets posts in flight finish for a bounded time.
struct WebhookOutboxService: Service {
    let outbox: WebhookOutbox

    func run() async throws {
        await withGracefulShutdownHandler {
            await outbox.run()
        } onGracefulShutdown: {
            outbox.stop()
        }
    }
}
