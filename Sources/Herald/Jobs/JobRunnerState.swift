import HeraldCore
import HeraldStore
import Synchronization

/// What a ``JobRunner`` and the runs of its jobs (``JobRun``) share, under one lock: whether
/// the runner stops, the jobs it works on, and its counters.
final class JobRunnerState: Sendable {
    struct JobKey: Hashable, Sendable {
        var tenant: TenantID
        var job: JobID
    }

    /// What the runner reaches of a job being worked on.
    struct RunningJob: Sendable {
        let feed: JobFeed
        let retryWait: DueRetryWait
    }

    struct Values {
        var started = false
        var stopping = false
        var running: Set<JobKey> = []
        var runningPerTenant: [TenantID: Int] = [:]
        /// Jobs whose last run ended to resume at the next tick (``JobRun/Resume/atNextTick``: a
        /// transient failure, or pending items leased elsewhere): only the periodic scan starts
        /// them again.
        var paused: Set<JobKey> = []
        /// The jobs being worked on (a cancel stops one's feed; the stop ends their retry waits).
        var runs: [JobKey: RunningJob] = [:]
        var statistics = JobRunnerStatistics()
    }

    let values = Mutex(Values())
    /// Opened by ``stop()``: what waits on the store outside a job's run (a scan's listing) gives
    /// up at once rather than hold up a graceful stop.
    let stopped = OneShotGate()

    /// Registers a job's run while it works (``JobRunner/jobCancelled(tenant:id:)`` and
    /// ``JobRunner/stop()`` reach it); a run registered once the runner stops has its retry
    /// wait ended at once.
    func register(_ key: JobKey, _ run: RunningJob) {
        let stopping = values.withLock { values -> Bool in
            values.runs[key] = run
            return values.stopping
        }
        if stopping { run.retryWait.end() }
    }

    func unregister(_ key: JobKey) {
        _ = values.withLock { $0.runs.removeValue(forKey: key) }
    }

    /// Marks the runner stopping and ends the retry waits of its jobs.
    /// - Returns: true the first time.
    func stop() -> Bool {
        let (first, waits) = values.withLock { values -> (Bool, [DueRetryWait]) in
            defer { values.stopping = true }
            return (!values.stopping, values.runs.values.map(\.retryWait))
        }
        for wait in waits { wait.end() }
        stopped.open()
        return first
    }

    /// True once the runner's ``JobRunner/stop()`` was called.
    var isStopping: Bool { values.withLock { $0.stopping } }

    var statistics: JobRunnerStatistics { values.withLock { $0.statistics } }

    /// Changes the counters, then their peaks.
    func adjust(_ change: (inout JobRunnerStatistics) -> Void, peak: (inout JobRunnerStatistics) -> Void) {
        values.withLock { values in
            change(&values.statistics)
            peak(&values.statistics)
        }
    }

    /// Items taken from `feed` are done with (their changes handed to the writer, or not sent).
    func handBack(_ feed: JobFeed, count: Int = 1) {
        feed.handBack(count)
        adjust { $0.claimedItemsHeld -= count } peak: { _ in }
    }

    /// A sender's slot in the job's commit groups: one free now, or else ``waitForCommitSlot(_:)``.
    nonisolated(nonsending) func reserveCommitSlot(_ outcomes: OutcomeGroups) async -> Bool {
        if let now = outcomes.reserveIfFree() { return now }
        return await waitForCommitSlot(outcomes)
    }

    /// ``OutcomeGroups/waitForSlot()`` for a sender that found no slot free, counted in
    /// ``JobRunnerStatistics/sendersWaitingForCommitSlot`` while it waits.
    nonisolated(nonsending) func waitForCommitSlot(_ outcomes: OutcomeGroups) async -> Bool {
        adjust { $0.sendersWaitingForCommitSlot += 1 } peak: { _ in }
        defer { adjust { $0.sendersWaitingForCommitSlot -= 1 } peak: { _ in } }
        return await outcomes.waitForSlot()
    }
}
