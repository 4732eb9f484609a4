import Foundation
import HeraldCore

// What `herald serve` needs of a store besides jobs and reports: the webhook outbox, the
// retention sweep, and the registry of the instances that share it. Both backends implement
// all of it (`StoreContractTests` holds them to it), so that `herald serve` on PostgreSQL opens
// no SQLite file.

/// The plugins' webhook outbox (``OutboxWebhook`` rows), claimed by a fixed number of senders.
public protocol WebhookOutboxStore: Sendable {
    /// Stores deliveries in the outbox, in one transaction.
    func enqueueWebhooks(_ webhooks: [OutboxWebhook]) async throws
    /// Claims up to `limit` deliveries due at `now` (oldest due first) until `claimUntil`: a
    /// delivery claimed by one instance is not handed to another until its claim ends.
    func claimDueWebhooks(now: Date, claimUntil: Date, limit: Int) async throws -> [OutboxWebhook]
    /// Removes a delivery (delivered, refused, or out of attempts).
    func removeWebhook(id: Int64) async throws
    /// Records a failed attempt: the delivery is due again at `nextAttemptAt`, with `backoff`,
    /// and unclaimed.
    func rescheduleWebhook(id: Int64, attempt: Int, backoff: Duration, nextAttemptAt: Date) async throws
    /// Releases every claim (only while no other process uses the store: a single instance at start).
    @discardableResult
    func releaseWebhookClaims() async throws -> Int
    /// Deliveries waiting in the outbox, per tenant (all instances' together).
    func outboxCounts() async throws -> [TenantID: Int]
}

/// A batch job's end, told to its tenant once and never lost: the `job.finished` /
/// `job.cancelled` webhook is stored in the outbox in the same transaction that records the end
/// as told, so an instance that stops between the job's final state and its event leaves the
/// end untold, and any instance's sweep (``untoldJobEnds(endedBefore:limit:)``) tells it later.
public protocol JobEndLedger: Sendable {
    /// In one transaction: records the end of a finished or cancelled job as told at `at` and,
    /// when `webhook` is given, stores it in the outbox. False, with nothing written, when the job
    /// is not final, is gone, or its end was told already (by this or another instance).
    func recordJobEnd(tenant: TenantID, job: JobID, webhook: OutboxWebhook?, at: Date) async throws -> Bool
    /// Finished and cancelled jobs whose end is not told yet and whose last change is before
    /// `endedBefore`, oldest change first, at most `limit`.
    func untoldJobEnds(endedBefore: Date, limit: Int) async throws -> [Job]
}

/// The store's upkeep: the retention sweep and the backend's own housekeeping.
public protocol StoreUpkeep: Sendable {
    /// Deletes finished and cancelled jobs whose last change is before `cutoff`, with their items
    /// (and payloads), about `itemsPerTransaction` items per transaction and `maxItems` in all.
    /// A backend that keeps items in chunk rows deletes whole chunks: a transaction holds at
    /// least one chunk, and the last may pass `maxItems` by less than a chunk (SQLite: 256
    /// items a chunk; PostgreSQL: its item rows in steps, then each chunk row alone).
    func deleteExpiredJobs(before cutoff: Date, itemsPerTransaction: Int, maxItems: Int) async throws -> RetentionSweep
    /// The backend's housekeeping after a sweep: SQLite checkpoints its WAL; PostgreSQL has
    /// nothing to do (autovacuum).
    func compact() async throws
}

extension StoreUpkeep {
    public func deleteExpiredJobs(before cutoff: Date) async throws -> RetentionSweep {
        try await deleteExpiredJobs(before: cutoff, itemsPerTransaction: 10_000, maxItems: 1_000_000)
    }
}

/// One `herald serve` process using the store, as its heartbeat row says.
public struct InstanceRecord: Sendable, Hashable {
    /// Unique per process (``JobRunnerConfiguration``'s instance).
    public var id: String
    /// The name it claims job items under (`<claimant>/<id>`).
    public var claimant: String
    public var host: String
    public var pid: Int
    public var startedAt: Date
    public var lastHeartbeat: Date

    public init(id: String, claimant: String, host: String, pid: Int, startedAt: Date, lastHeartbeat: Date) {
        self.id = id
        self.claimant = claimant
        self.host = host
        self.pid = pid
        self.startedAt = startedAt
        self.lastHeartbeat = lastHeartbeat
    }
}

/// The instances sharing a store (store migration v7, `herald_instance`): each one beats its
/// row; any one finds the rows that stopped beating, releases the leases their claimant holds
/// and removes them.
public protocol InstanceRegistry: Sendable {
    /// Stores the instance's row (replacing one with the same id).
    func registerInstance(_ instance: InstanceRecord) async throws
    /// Sets the instance's last heartbeat.
    /// - Returns: false when its row is gone (another instance took it for dead): register again.
    func heartbeat(instance id: String, at: Date) async throws -> Bool
    /// Every registered instance, oldest start first.
    func instances() async throws -> [InstanceRecord]
    /// - Returns: false when there was no such row.
    @discardableResult
    func removeInstance(id: String) async throws -> Bool
    /// Releases the leases `claimant` holds on items without an outcome, in every unfinished
    /// job (its process is gone): any instance may claim them at once.
    /// - Returns: how many it released.
    @discardableResult
    func releaseLeases(heldBy claimant: String) async throws -> Int
    /// Items without an outcome under a lease that has not ended at `now`, per claimant.
    func leasedItemCounts(now: Date) async throws -> [String: Int]
}

/// A webhook delivery waiting in the outbox.
public struct OutboxWebhook: Sendable, Hashable {
    /// The row's id (0 before it is stored).
    public var id: Int64
    public var tenant: TenantID
    public var request: WebhookRequest
    /// Attempts made so far.
    public var attempt: Int
    public var maxAttempts: Int
    /// The wait before the next retry (it doubles after each, up to 60 seconds).
    public var backoff: Duration
    public var nextAttemptAt: Date

    public init(
        id: Int64 = 0, tenant: TenantID, request: WebhookRequest, attempt: Int = 0, maxAttempts: Int, backoff: Duration,
        nextAttemptAt: Date
    ) {
        self.id = id
        self.tenant = tenant
        self.request = request
        self.attempt = attempt
        self.maxAttempts = maxAttempts
        self.backoff = backoff
        self.nextAttemptAt = nextAttemptAt
    }
}

/// What one retention sweep deleted.
public struct RetentionSweep: Sendable, Hashable {
    public var jobs = 0
    public var items = 0
    /// False when the sweep stopped at its budget with expired jobs left (the next sweep goes on).
    public var complete = true

    public init(jobs: Int = 0, items: Int = 0, complete: Bool = true) {
        self.jobs = jobs
        self.items = items
        self.complete = complete
    }
}


extension OutboxWebhook {
    /// A duration in whole milliseconds, as the outbox stores it (saturating: never traps).
    public static func millis(_ duration: Duration) -> Int64 {
        let parts = duration.components
        let (millis, overflow) = parts.seconds.multipliedReportingOverflow(by: 1000)
        let saturated = parts.seconds < 0 ? Int64.min : Int64.max
        guard !overflow else { return saturated }
        let (sum, overflowed) = millis.addingReportingOverflow(parts.attoseconds / 1_000_000_000_000_000)
        return overflowed ? saturated : sum
    }
}

/// The channels instances tell each other on (PostgreSQL's LISTEN/NOTIFY).
public enum StoreChannel: String, Sendable, CaseIterable {
    /// A job was stored: payload `<tenant>/<job id>`. Sent by the store in the job's transaction
    /// (delivered at its commit).
    case jobs = "herald_jobs"
    /// An instance changed the tenants (a credential upload, a revoke, a reload through the
    /// admin API): payload the instance's id. The others reload their tenants directory.
    case tenants = "herald_tenants"
    /// A job was cancelled through an instance's API: payload `<tenant>/<job id>`. The others
    /// stop working on it at once (without it, at their next claim or lease check).
    case cancelledJobs = "herald_jobs_cancelled"
}

/// A store that tells other instances of changes at once (PostgreSQL: LISTEN/NOTIFY). The
/// embedded SQLite store has no other instance to tell and does not conform.
public protocol StoreNotifier: Sendable {
    /// Sends `payload` (at most 7,999 bytes) to the instances listening on `channel`.
    func notify(_ channel: StoreChannel, payload: String) async throws
    /// Listens on `channels` on a connection of its own and calls `handler` for each
    /// notification (its own ones included), until the task is cancelled or the connection
    /// fails (then it throws: the caller listens again; nothing sent meanwhile is replayed, so
    /// callers keep polling as the fallback). `onListening` is called once the channels are
    /// listened to.
    func listen(
        _ channels: [StoreChannel], onListening: @escaping @Sendable () -> Void,
        handler: @escaping @Sendable (StoreChannel, String) async -> Void
    ) async throws
}

/// Everything `herald serve` keeps in its store; both backends are one.
public typealias ServerStore = PushStore & JobReports & WebhookOutboxStore & JobEndLedger & StoreUpkeep & InstanceRegistry
    & AdminDirectory & UsageLedger & ChannelDirectory
