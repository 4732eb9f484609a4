import Foundation
import HeraldCore
import Logging
import ServiceLifecycle

/// Says so when a graceful shutdown outlasted `shutdown_timeout` and what still ran was
/// cancelled. It is the first service, so the last told of the shutdown: cancelled before that,
/// and long after the shutdown began (the readiness service marks that, a moment after the
/// group's own clock starts: half the timeout is the margin), it was the timeout that cancelled
/// the group, not a service that failed at once.
struct ShutdownTimeoutNotice: Service {
    let phase: ServerPhaseState
    let timeout: Double
    let logger: Logger

    func run() async throws {
        await withTaskCancellationHandler {
            try? await gracefulShutdown()
        } onCancel: {
            guard let since = phase.stoppingSince, PushInstant.now - since >= .milliseconds(Int64(timeout * 500)) else {
                return
            }
            logger.warning(
                "the graceful shutdown outlasted shutdown_timeout; what still runs is cancelled (job items whose outcome was not recorded stay leased and are sent again)",
                metadata: ["herald.shutdown_timeout_seconds": "\(timeout)"])
        }
    }
}

/// Turns `/readyz` false as soon as graceful shutdown begins (it is the last service, so the
/// first to be told).
struct ReadinessService: Service {
    let phase: ServerPhaseState

    func run() async throws {
        try? await gracefulShutdown()
        phase.phase = .stopping
    }
}
