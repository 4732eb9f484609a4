import Foundation
import HeraldCore
import HeraldStore
import Logging

/// The store's upkeep, in the background: deletes finished jobs after `jobs.retention`, audit
/// log entries after `api.audit_retention` and usage hours after `api.usage_retention`, and compacts the store (SQLite: checkpoints the WAL),
/// at start and then every ``interval``. On a shared store every instance sweeps; each
/// transaction takes a job no other sweep holds.
///
/// ```swift
/// let maintenance = StoreMaintenance(store: store, retention: .seconds(7 * 86_400))
/// try await maintenance.run()          // until cancelled
/// ```
public struct StoreMaintenance: Sendable {
    public let store: any StoreUpkeep
    /// How long a finished or cancelled job is kept after its last change.
    public let retention: Duration
    /// The audit log and how long its entries are kept (nil: not swept here).
    public let audit: (log: any AdminDirectory, retention: Duration)?
    /// The usage counts and how long their hours are kept (nil: not swept here).
    public let usage: (ledger: any UsageLedger, retention: Duration)?
    /// Time between two passes.
    public let interval: Duration
    private let clock: any PushClock
    private let logger: Logger

    public init(
        store: any StoreUpkeep, retention: Duration, audit: (log: any AdminDirectory, retention: Duration)? = nil,
        usage: (ledger: any UsageLedger, retention: Duration)? = nil, interval: Duration = .seconds(600), clock: any PushClock = SystemPushClock(), logger: Logger = Logger(label: "herald")
    ) {
        self.store = store
        self.retention = retention
        self.audit = audit
        self.usage = usage
        self.interval = interval
        self.clock = clock
        var logger = logger
        logger[metadataKey: "herald.component"] = "store-maintenance"
        self.logger = logger
    }

    /// One pass: deletes the jobs expired at the clock's date, then compacts the store.
    @discardableResult
    public func runOnce() async -> RetentionSweep? {
        let cutoff = clock.date.addingTimeInterval(-JobRunner.seconds(retention))
        var sweep: RetentionSweep? = nil
        do {
            let done = try await store.deleteExpiredJobs(before: cutoff)
            sweep = done
            if done.jobs > 0 || done.items > 0 {
                logger.info(
                    "expired jobs deleted",
                    metadata: ["herald.jobs": "\(done.jobs)", "herald.items": "\(done.items)", "herald.complete": "\(done.complete)"])
            }
        } catch {
            logger.storeFailure("cannot delete expired jobs", error: error)
        }
        if let audit {
            do {
                let pruned = try await audit.log.pruneAudit(
                    before: clock.date.addingTimeInterval(-JobRunner.seconds(audit.retention)))
                if pruned > 0 { logger.info("expired audit entries deleted", metadata: ["herald.entries": "\(pruned)"]) }
            } catch {
                logger.storeFailure("cannot delete expired audit entries", error: error)
            }
        }
        if let usage {
            do {
                let pruned = try await usage.ledger.pruneUsage(
                    before: clock.date.addingTimeInterval(-JobRunner.seconds(usage.retention)))
                if pruned > 0 { logger.info("expired usage hours deleted", metadata: ["herald.rows": "\(pruned)"]) }
            } catch {
                logger.storeFailure("cannot delete expired usage hours", error: error)
            }
        }
        do {
            try await store.compact()
        } catch {
            logger.storeFailure("cannot compact the store (WAL checkpoint)", error: error, level: .warning)
        }
        return sweep
    }

    /// Runs a pass now and then every ``interval`` until the task is cancelled.
    public func run() async {
        await clock.repeating(every: interval, startingNow: true) {
            var sweep = await runOnce()
            // A sweep that stopped at its budget goes on at once.
            while sweep?.complete == false, !Task.isCancelled { sweep = await runOnce() }
        }
    }
}
