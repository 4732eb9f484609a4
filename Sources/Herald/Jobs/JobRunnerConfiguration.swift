import Foundation

/// How a ``JobRunner`` works through accepted batch jobs.
public struct JobRunnerConfiguration: Sendable, Hashable {
    /// Notifications of one tenant's jobs on the wire at once (all its jobs together). It also
    /// bounds the runner's send tasks: each job worked on has at most this many.
    public var concurrencyPerTenant: Int = 100
    /// Items claimed from the store at a time, per job. A job worked on holds at most one claim's
    /// items not yet handed to a send task plus its send tasks' count of the last claim's (the
    /// next claim is made when no more than that are left), and the items its send tasks took,
    /// one each.
    public var claimSize: Int = 500
    /// Outcomes of a job written to the store in one transaction, at most (a commit group). The
    /// send tasks do not wait for their outcomes to be written: a job's items sent without a
    /// durable outcome are at most its sends on the wire (``concurrencyPerTenant``) plus this
    /// many, which bounds the items sent again after a crash under at-least-once.
    public var commitGroup: Int = 64
    /// Jobs of one tenant worked on at once (its other unfinished jobs wait in the store, oldest
    /// first). With ``claimSize`` and ``concurrencyPerTenant`` it bounds the runner's memory and
    /// tasks per tenant, however many unfinished jobs the store holds.
    public var jobsPerTenant: Int = 2
    /// How long a claim holds its items; after that another claimant may take them.
    public var lease: Duration = .seconds(300)
    /// The base of the name items are claimed under (`jobs.claimant`). Each runner claims as
    /// ``claimantName`` (`<claimant>/<instance>`). With ``exclusiveStore``, when it resumes a job
    /// it first takes back the leases of earlier instances of the same base name (their process
    /// is gone: one process at a time holds the store, see `StoreLock`).
    public var claimant: String = "herald"
    /// True when this runner's process is the store's only user (SQLite, under `StoreLock`):
    /// leases of other instances of the same base name are taken back when a job resumes. False
    /// for a store shared by several instances (PostgreSQL): their leases are live; those of a
    /// dead instance are released by the instance registry (`InstanceHeartbeat`) or end.
    public var exclusiveStore: Bool = true
    /// This runner's instance, unique per process (a random id unless a test sets one).
    public var instance: String = String(UUID().uuidString.lowercased().prefix(8))
    /// True: a job whose items can be sent by callback (``JobCallbackSender``: at-least-once,
    /// a transport with a callback form; on a shared store the
    /// driving task checks its items' leases a group at a time) is sent that way, by one task,
    /// instead of by send tasks. On by default and in `herald serve`; false keeps send tasks for
    /// every job (tests compare the two paths).
    public var sendsByCallback: Bool = true
    /// True: such a job's feeder, driving task and writer task run on the executor its tenant's
    /// transport offers (``PushTransport/sendingExecutor``: the event loop its connection answers
    /// on), so the sends' ends and the driving task's next sends share one thread: less CPU an
    /// item, but the job's steps then run on a loop without preemption, and whatever else that
    /// loop serves (other tenants' API requests) waits behind them. `herald serve` sets it from
    /// `jobs.on_connection_loop` (true by default). False (this type's default, which the
    /// runner's own tests keep) keeps them on the global executor.
    public var drivesOnConnectionLoop: Bool = false

    /// How often the runner looks for unfinished jobs on its own (jobs of tenants loaded later,
    /// jobs paused by a transient failure). New jobs start at once through ``JobRunner/jobAccepted(_:)``.
    public var rescanInterval: Duration = .seconds(5)

    /// How often the runner tells the job ends left untold (``JobEndNotifier/tellUntoldEnds(endedBefore:)``:
    /// an instance stopped between a job's final state and its event, or the store's write
    /// failed), and how long after its end a job is left to the call that ended it first.
    public var untoldEndsInterval: Duration = .seconds(30)
    public var untoldEndsGrace: Duration = .seconds(30)

    /// The name this runner claims items under: `<claimant>/<instance>`.
    public var claimantName: String { "\(claimant)/\(instance)" }

    /// How often the runner renews the leases of the jobs it works on: a third of ``lease``
    /// (at least 10 ms), so that a lease never ends while its items are being worked on.
    public var renewInterval: Duration { max(lease / 3, .milliseconds(10)) }

    public init() {}
}

/// Counters of the runner's work, for tests and benchmarks (the bounds hold at every moment).
public struct JobRunnerStatistics: Sendable, Hashable {
    /// Item sends under way now (a permit held; on the wire or being recorded).
    public var itemsInFlight = 0
    /// The most item sends under way at once, since the runner was made.
    public var peakItemsInFlight = 0
    /// Send tasks alive now (each takes items one at a time, under a tenant permit).
    public var sendTasks = 0
    public var peakSendTasks = 0
    /// Claimed items held in memory now (all jobs together).
    public var claimedItemsHeld = 0
    public var peakClaimedItemsHeld = 0
    /// Jobs being worked on now.
    public var activeJobs = 0
    public var peakActiveJobs = 0
    /// Runs of jobs started, since the runner was made (a job resumed counts again).
    public var runsStarted = 0
    /// Senders (a job's send tasks, or its driving task) waiting now for a commit slot: a job's
    /// sends ahead of their outcomes' writes reached their bound (``OutcomeGroups``).
    public var sendersWaitingForCommitSlot = 0
    /// Sweeps for job ends left untold (``JobRunnerConfiguration/untoldEndsInterval``) done.
    public var untoldEndSweeps = 0
}
