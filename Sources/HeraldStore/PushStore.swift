import Foundation
import HeraldCore

/// Herald's durable state: batch jobs and their per-notification results, and the device tokens
/// APNs reported invalid. Every operation is scoped by tenant: no call reads or writes another
/// tenant's rows.
///
/// Operations the job runner repeats after a crash are idempotent: creating a job with an id
/// that exists returns the stored job, claiming returns the items already leased to the same
/// claimant, and recording a result for an item that already has one keeps the first.
public protocol PushStore: Sendable {
    // MARK: Invalid device tokens

    /// Records the token as invalid for the topic (an upsert: a newer APNs timestamp wins, a
    /// stored registration time is kept).
    func recordInvalidToken(_ record: InvalidTokenRecord, tenant: TenantID) async throws
    /// The records of `lookups`, one answer each in their order (nil: none recorded): the lookups
    /// of sends under way at once, read together (``TenantInvalidTokens``).
    func invalidTokens(tenant: TenantID, lookups: [InvalidTokenLookup]) async throws -> [InvalidTokenRecord?]
    /// The tenant's invalid tokens, most recently recorded first.
    func invalidTokens(tenant: TenantID, limit: Int) async throws -> [InvalidTokenRecord]
    /// The tenant says the device registered `token` again at `registeredAt` (for `topic`, or for
    /// every topic when nil). Sends resume if that is later than APNs' timestamp.
    /// - Returns: how many records it touched.
    @discardableResult
    func registerToken(tenant: TenantID, token: DeviceToken, topic: String?, registeredAt: Date) async throws -> Int
    @discardableResult
    func removeInvalidToken(tenant: TenantID, token: DeviceToken, topic: String?) async throws -> Int

    // MARK: Jobs

    /// Stores a job and all its items, durably, in one transaction. Items without an apns-id get
    /// one now, so that every resend of an item uses the same id. With `limits`, the tenant's
    /// unfinished jobs are counted in the same transaction (two batches at once cannot both slip
    /// under a limit).
    /// - Returns: the job; if a job with this id already exists for the tenant, that job (nothing
    ///   is changed, and no limit is checked: a retried request gets its job back).
    /// - Throws: ``StoreError/quotaExceeded(_:)`` naming the limit the job would pass.
    func createJob(
        tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
        createdAt: Date, limits: JobLimits?
    ) async throws -> JobCreation
    func job(tenant: TenantID, id: JobID) async throws -> Job?
    /// The tenant's jobs, newest first (by creation time, then id), in `states` (all when nil), at
    /// most `limit`; with `after`, only those listed after that position (the next page).
    func jobs(tenant: TenantID, states: Set<JobState>?, limit: Int, after: JobListPosition?) async throws -> [Job]
    /// Every tenant's oldest unfinished jobs (`accepted` or `running`), at most `perTenant` of
    /// each, oldest first (by creation time, then id): what the job runner's scan may start, read
    /// in one call however many tenants the store holds.
    func unfinishedJobs(perTenant: Int) async throws -> [Job]
    /// Moves a job that is `accepted` or `running` to `state`; a finished or cancelled job keeps
    /// its state (a cancel and the runner's finish race: the first one wins). The items of a
    /// finished or cancelled job are not claimed, and on a shared store not leased at the check
    /// before their send (``leasedItems(tenant:job:indexes:claimant:)``, ``markOnWire(tenant:job:indexes:claimant:at:)``).
    /// - Returns: false when the tenant has no such job, or it is finished or cancelled.
    @discardableResult
    func updateJob(tenant: TenantID, id: JobID, state: JobState, at: Date) async throws -> Bool
    /// Leases up to `limit` items without an outcome of the job to `claimant` until `leaseUntil`:
    /// first the `retrying` items whose next attempt is due (earliest first), then the
    /// lowest-index pending items; either unleased, already leased to the same claimant, or whose
    /// lease ended (claims are made in index order, so a claimant's own earlier claims come first).
    func claimPendingItems(tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date)
        async throws -> [JobItem]
    /// ``claimPendingItems(tenant:job:limit:claimant:now:leaseUntil:)`` with a hint: the caller
    /// needs no pending item below `fromIndex` (it claimed and finished them in this run), so the
    /// store may start its search of pending items there. Due retries are claimed whatever their
    /// index. A store may ignore the hint (the items below would be claimed as usual).
    func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date, fromIndex: Int
    ) async throws -> [JobItem]
    /// True when ``claimPendingItems(tenant:job:limit:claimant:now:leaseUntil:fromIndex:)`` never
    /// returns a pending item below `fromIndex`, not even one leased to the same claimant (due
    /// retries aside). The job runner then claims a job's next items while the last claim's are
    /// still on the wire: they lie below the hint and have no outcome yet. With a store that may
    /// ignore the hint (the default), it claims only once every earlier item's change is written.
    var claimsFromIndexStrictly: Bool { get }
    /// Takes back the leases on the job's pending items held by earlier instances of a runner:
    /// claimants named `claimantBase` or `claimantBase/<instance>`, other than `keeping`. Call it
    /// only while no other process uses the store (its claims would be taken).
    /// - Returns: how many leases it released.
    @discardableResult
    func releaseLeases(tenant: TenantID, job: JobID, claimantBase: String, keeping: String) async throws -> Int
    /// Extends the leases `claimant` holds on the job's items without an outcome to `leaseUntil`
    /// (never shortens one): the runner renews its leases while it works, so that a chunk that
    /// takes longer than one lease is not taken over by another instance.
    /// - Returns: how many leases it renewed.
    @discardableResult
    func renewLeases(tenant: TenantID, job: JobID, claimant: String, leaseUntil: Date) async throws -> Int
    /// Records an item's outcome if it has none yet; otherwise keeps the stored one (an outcome,
    /// once written, never changes). Returns once the outcome is durable.
    /// - Returns: true when this outcome was recorded; false when the item already had one (kept),
    ///   or the item or its job is not stored.
    func recordOutcome(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws -> Bool
    /// Puts an item without an outcome back to wait for its next attempt (state `retrying`,
    /// unleased): a claim returns it only once `retry.nextAttemptAt` has come.
    /// - Returns: false when the item already has an outcome (nothing is changed).
    func deferItem(tenant: TenantID, job: JobID, index: Int, retry: JobItemRetry) async throws -> Bool
    /// Writes several items' outcomes and next attempts of one job at once, each as
    /// ``recordOutcome(tenant:job:index:result:)`` or ``deferItem(tenant:job:index:retry:)``
    /// would (an item that already has an outcome keeps it). The job runner's commit group: the
    /// changes are durable when it returns; when it throws, a store with one transaction for them
    /// (SQLite) wrote none of them, another may have written some (each change is idempotent).
    /// - Returns: how many items changed.
    func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int
    /// Marks items as on the wire: their requests are about to be written to APNs (one write for
    /// all of them, committed before it returns). Only items without an outcome and leased to
    /// `claimant` are marked; ``deferItem(tenant:job:index:retry:)`` clears the mark. A claim
    /// that returns an item still marked (``JobItem/onWireAt``) tells the runner its earlier
    /// request may have reached APNs with no outcome recorded (the instance that sent it stopped).
    /// - Returns: the indexes marked; the caller sends only those (an item that got an outcome or
    ///   whose lease another claimant took meanwhile is not marked).
    func markOnWire(tenant: TenantID, job: JobID, indexes: [Int], claimant: String, at: Date) async throws -> Set<Int>
    /// Of `indexes`, the items without an outcome leased to `claimant` (the ones
    /// ``markOnWire(tenant:job:indexes:claimant:at:)`` would mark), with nothing written: the job
    /// runner's check, right before an at-least-once item's send on a shared store, that no other
    /// claimant took its lease. An at-least-once item needs no mark (without an outcome it is sent
    /// again either way), only that check; reading it costs a shared store much less than writing
    /// a row version for it.
    func leasedItems(tenant: TenantID, job: JobID, indexes: [Int], claimant: String) async throws -> Set<Int>
    /// The earliest next attempt of the job's `retrying` items, or nil when none waits.
    func nextAttempt(tenant: TenantID, job: JobID) async throws -> Date?
    /// Items in index order, from `fromIndex`.
    func items(tenant: TenantID, job: JobID, fromIndex: Int, limit: Int) async throws -> [JobItem]
    func progress(tenant: TenantID, job: JobID) async throws -> JobProgress?
}

/// One invalid-token lookup of a tenant: the token, the topic and the environment of a send.
public struct InvalidTokenLookup: Sendable, Hashable {
    public var token: DeviceToken
    public var topic: String
    public var environment: APNsEnvironment

    public init(token: DeviceToken, topic: String, environment: APNsEnvironment) {
        self.token = token
        self.topic = topic
        self.environment = environment
    }
}

extension PushStore {
    /// The record for the token and topic in that environment, if any: one lookup read alone.
    public func invalidToken(tenant: TenantID, token: DeviceToken, topic: String, environment: APNsEnvironment)
        async throws -> InvalidTokenRecord?
    {
        try await invalidTokens(
            tenant: tenant, lookups: [InvalidTokenLookup(token: token, topic: topic, environment: environment)]
        ).first ?? nil
    }
}

extension PushStore {
    /// A store that takes no hint claims as usual.
    public var claimsFromIndexStrictly: Bool { false }

    /// A store without a read-only check marks the items instead (the same check, and a mark).
    public func leasedItems(tenant: TenantID, job: JobID, indexes: [Int], claimant: String) async throws -> Set<Int> {
        try await markOnWire(tenant: tenant, job: job, indexes: indexes, claimant: claimant, at: Date())
    }

    /// A store that takes no hint claims as usual.
    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date, fromIndex: Int
    ) async throws -> [JobItem] {
        try await claimPendingItems(
            tenant: tenant, job: job, limit: limit, claimant: claimant, now: now, leaseUntil: leaseUntil)
    }

    /// A store with no group write of its own writes each change with its own call
    /// (``recordEachChange(tenant:job:_:)``).
    public func recordChanges(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
        try await recordEachChange(tenant: tenant, job: job, changes)
    }

    /// Writes each change with its own call, all at once: ``recordOutcome(tenant:job:index:result:)``
    /// or ``deferItem(tenant:job:index:retry:)`` (a store that groups concurrent calls, as
    /// PostgreSQL's outcome writes do, still writes them together). When one fails, the others
    /// may or may not be written.
    /// - Returns: how many items changed.
    public func recordEachChange(tenant: TenantID, job: JobID, _ changes: [JobItemChange]) async throws -> Int {
        // A non-final outcome is refused before anything is written, as by a store's own group write.
        for change in changes {
            if case .outcome(let result) = change.change, !result.state.isFinal {
                throw StoreError.invalidArgument(
                    "item \(change.index): a result must be sent, failed or unknown, not \(result.state)")
            }
        }
        return try await withThrowingTaskGroup(of: Bool.self) { group in
            for change in changes {
                group.addTask {
                    switch change.change {
                    case .outcome(let result):
                        try await recordOutcome(tenant: tenant, job: job, index: change.index, result: result)
                    case .retry(let retry):
                        try await deferItem(tenant: tenant, job: job, index: change.index, retry: retry)
                    }
                }
            }
            var changed = 0
            for try await written in group where written { changed += 1 }
            return changed
        }
    }

    /// Stores a job with no limit checked.
    public func createJob(
        tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
        createdAt: Date
    ) async throws -> JobCreation {
        try await createJob(
            tenant: tenant, id: id, environment: environment, notifications: notifications, createdAt: createdAt,
            limits: nil)
    }
}

/// A tenant's job limits (`jobs.max_active_jobs_per_tenant`, `jobs.max_pending_items_per_tenant`):
/// a new job is refused while the tenant's unfinished jobs (accepted or running) would number
/// more than `maxActiveJobs` or hold more than `maxPendingItems` items together. Items count
/// until their job finishes.
public struct JobLimits: Sendable, Hashable {
    public var maxActiveJobs: Int
    public var maxPendingItems: Int

    public init(maxActiveJobs: Int = 20, maxPendingItems: Int = 1_000_000) {
        self.maxActiveJobs = maxActiveJobs
        self.maxPendingItems = maxPendingItems
    }
}

/// A batch job's id: 1 to 64 of `A-Z a-z 0-9 - _`.
public struct JobID: Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String

    public init(_ rawValue: String) throws(StoreError) {
        guard !rawValue.isEmpty, rawValue.utf8.count <= 64,
            rawValue.utf8.allSatisfy({ byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                    || byte == UInt8(ascii: "_")
            })
        else { throw StoreError.invalidJobID(rawValue) }
        self.rawValue = rawValue
    }

    /// A new random id (a version 4 UUID in ``HeraldCore/UUIDText``'s form).
    public static func random() -> JobID {
        var system = SystemRandomNumberGenerator()
        return JobID(unchecked: UUIDText.format(.random(using: &system)))
    }

    init(unchecked: String) { rawValue = unchecked }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        do { try self.init(raw) } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

public enum JobState: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// Stored, not started.
    case accepted
    /// Items are being sent.
    case running
    /// Every item has an outcome.
    case finished
    /// Stopped on request; pending items stay unsent.
    case cancelled

    public var description: String { rawValue }
    public var isFinal: Bool { self == .finished || self == .cancelled }
}

public struct Job: Sendable, Hashable {
    public var id: JobID
    public var tenant: TenantID
    public var state: JobState
    public var environment: APNsEnvironment?
    public var itemCount: Int
    public var createdAt: Date
    public var updatedAt: Date

    public init(
        id: JobID, tenant: TenantID, state: JobState, environment: APNsEnvironment?, itemCount: Int, createdAt: Date,
        updatedAt: Date
    ) {
        self.id = id
        self.tenant = tenant
        self.state = state
        self.environment = environment
        self.itemCount = itemCount
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

extension PushStore {
    /// The tenant's newest jobs (the first page of ``jobs(tenant:states:limit:after:)``).
    public func jobs(tenant: TenantID, states: Set<JobState>?, limit: Int) async throws -> [Job] {
        try await jobs(tenant: tenant, states: states, limit: limit, after: nil)
    }
}

/// Where a page of a tenant's jobs ended (``PushStore/jobs(tenant:states:limit:after:)``): the
/// last job's creation time, in the whole milliseconds the stores keep, and its id. Jobs are
/// listed newest first and, created in the same millisecond, by id; the next page starts after
/// this one, whatever was created or deleted meanwhile.
public struct JobListPosition: Sendable, Hashable {
    public var createdAtMillis: Int64
    public var id: JobID

    public init(createdAtMillis: Int64, id: JobID) {
        self.createdAtMillis = createdAtMillis
        self.id = id
    }

    /// The position of a listed job.
    public init(after job: Job) {
        self.init(createdAtMillis: Int64((job.createdAt.timeIntervalSince1970 * 1000).rounded()), id: job.id)
    }
}

public enum JobCreation: Sendable, Hashable {
    case created(Job)
    /// A job with this id already existed for the tenant; it is returned unchanged.
    case existing(Job)

    public var job: Job {
        switch self {
        case .created(let job), .existing(let job): return job
        }
    }
}

public enum JobItemState: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// Not tried yet (or tried and lost in a crash before its outcome was recorded: see
    /// ``JobItem/onWireAt``).
    case pending
    /// Tried, and waiting for its next attempt (``JobItem/nextAttemptAt``) after a transient failure.
    case retrying
    case sent
    case failed
    /// It may have reached APNs and got no answer; under at-most-once it is not sent again.
    case unknown
    public var description: String { rawValue }
    /// True for outcomes (`sent`, `failed`, `unknown`): the item is never sent again.
    public var isFinal: Bool { self == .sent || self == .failed || self == .unknown }
}

/// One notification of a job and its outcome.
public struct JobItem: Sendable, Hashable {
    /// The notification, with its apns-id assigned when the job was stored.
    public var notification: HeraldCore.Notification
    public var job: JobID
    public var index: Int
    public var state: JobItemState
    public var result: JobItemResult?
    /// Who holds the item's lease, while pending.
    public var claimant: String?
    public var leaseUntil: Date?
    /// How many times the job runner handed it to the send pipeline (each may include the
    /// built-in retry's quick resends).
    public var attempts: Int
    /// When the runner first took it up; its retry time counts from here.
    public var firstAttemptAt: Date?
    /// While `retrying`: when it is due.
    public var nextAttemptAt: Date?
    /// The last transient error (a reason such as `ServiceUnavailable` or `TransportFailed`).
    public var lastError: String?
    /// When its request was last about to be written (``PushStore/markOnWire(tenant:job:indexes:claimant:at:)``),
    /// unless a transient answer put it back since: set on an item without an outcome, that
    /// request may have reached APNs.
    public var onWireAt: Date?
}

// Built through the memberwise initializer, as `Notification` is (see there).
extension JobItem {
    public init(
        job: JobID, index: Int, notification: HeraldCore.Notification, state: JobItemState, result: JobItemResult?,
        claimant: String? = nil, leaseUntil: Date? = nil, attempts: Int = 0, firstAttemptAt: Date? = nil,
        nextAttemptAt: Date? = nil, lastError: String? = nil, onWireAt: Date? = nil
    ) {
        self.init(
            notification: notification, job: job, index: index, state: state, result: result, claimant: claimant,
            leaseUntil: leaseUntil, attempts: attempts, firstAttemptAt: firstAttemptAt, nextAttemptAt: nextAttemptAt,
            lastError: lastError, onWireAt: onWireAt)
    }
}

/// One change of a job item that the job runner writes: its outcome, or its next attempt
/// (``PushStore/recordChanges(tenant:job:_:)``).
public struct JobItemChange: Sendable, Hashable {
    public enum Change: Sendable, Hashable {
        /// The item's final outcome (`sent`, `failed`, `unknown`).
        case outcome(JobItemResult)
        /// The item waits for its next attempt.
        case retry(JobItemRetry)
    }

    public var change: Change
    public var index: Int
}

// Built through the memberwise initializer, as `Notification` is (see there).
extension JobItemChange {
    public init(index: Int, change: Change) {
        self.init(change: change, index: index)
    }
}

/// An item put back to wait for its next attempt (``PushStore/deferItem(tenant:job:index:retry:)``).
public struct JobItemRetry: Sendable, Hashable {
    /// Attempts made so far, in all.
    public var attempts: Int
    /// Kept if the item already has one.
    public var firstAttemptAt: Date
    public var nextAttemptAt: Date
    public var lastError: String?

    public init(attempts: Int, firstAttemptAt: Date, nextAttemptAt: Date, lastError: String?) {
        self.attempts = attempts
        self.firstAttemptAt = firstAttemptAt
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
    }
}

/// The outcome of one job item.
public struct JobItemResult: Sendable, Hashable {
    public var finishedAt: Date
    /// `.sent` (APNs answered 200), `.failed` or `.unknown`.
    public var state: JobItemState
    /// APNs' HTTP status; nil when it never answered.
    public var status: Int?
    /// APNs' reason, or Herald's error code for a local refusal or failure (`TopicDisallowed`, `TransportFailed`, …).
    public var reason: String?
    /// A human-readable detail for failures.
    public var message: String?
    public var apnsID: NotificationID?
    /// APNs' timestamp (with 410).
    public var apnsTimestamp: Date?
    /// Attempts in all (0: not counted; a stored count is never lowered).
    public var attempts: Int
    /// APNs' `apns-unique-id`: the development environment's key to the notification in Apple's
    /// delivery log; nil in production or without an answer.
    public var uniqueID: APNsUniqueID?
}

// Built through the memberwise initializer, as `Notification` is (see there).
extension JobItemResult {
    public init(
        state: JobItemState, status: Int?, reason: String?, message: String? = nil, apnsID: NotificationID?,
        apnsTimestamp: Date? = nil, finishedAt: Date, attempts: Int = 0, uniqueID: APNsUniqueID? = nil
    ) {
        self.init(
            finishedAt: finishedAt, state: state, status: status, reason: reason, message: message, apnsID: apnsID,
            apnsTimestamp: apnsTimestamp, attempts: attempts, uniqueID: uniqueID)
    }
}

public struct JobProgress: Sendable, Hashable {
    /// Items without an outcome: not tried yet, or `retrying`.
    public var pending: Int
    /// Of ``pending``, those waiting for their next attempt.
    public var retrying: Int
    public var sent: Int
    public var failed: Int
    public var unknown: Int
    public var total: Int { pending + sent + failed + unknown }

    public init(pending: Int, sent: Int, failed: Int, retrying: Int = 0, unknown: Int = 0) {
        self.pending = pending
        self.retrying = retrying
        self.sent = sent
        self.failed = failed
        self.unknown = unknown
    }
}

public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case invalidJobID, notFound, invalidArgument, corrupt, cannotOpen, locked, quotaExceeded, timedOut, unavailable
    }
    private let code: Code
    public let message: String

    public var description: String { message }

    public static func invalidJobID(_ value: String) -> StoreError {
        StoreError(
            code: .invalidJobID, message: "job id must be 1 to 64 of A-Z a-z 0-9 - _ (got \(value.count) characters)")
    }
    public static func notFound(_ what: String) -> StoreError {
        StoreError(code: .notFound, message: "\(what) not found")
    }
    public static func invalidArgument(_ message: String) -> StoreError {
        StoreError(code: .invalidArgument, message: message)
    }
    public static func corrupt(_ message: String) -> StoreError { StoreError(code: .corrupt, message: message) }
    public static func cannotOpen(_ message: String) -> StoreError { StoreError(code: .cannotOpen, message: message) }
    /// Another process holds the store (``StoreLock``).
    public static func locked(_ message: String) -> StoreError { StoreError(code: .locked, message: message) }
    /// A tenant's job limit refused a new job (``JobLimits``); the message names the limit.
    public static func quotaExceeded(_ message: String) -> StoreError { StoreError(code: .quotaExceeded, message: message) }
    /// A call to the store got no answer in time (``StoreDeadline``); the message says how long it waited.
    public static func timedOut(_ message: String) -> StoreError { StoreError(code: .timedOut, message: message) }
    /// The store's server could not be reached, or its connection was lost during the call
    /// (PostgreSQL restarting or shut down, the network gone); the message says how, without the
    /// query or its values.
    public static func unavailable(_ message: String) -> StoreError { StoreError(code: .unavailable, message: message) }

    public var isNotFound: Bool { code == .notFound }
    public var isInvalidJobID: Bool { code == .invalidJobID }
    public var isLocked: Bool { code == .locked }
    public var isQuotaExceeded: Bool { code == .quotaExceeded }
    public var isInvalidArgument: Bool { code == .invalidArgument }
    public var isTimedOut: Bool { code == .timedOut }
    public var isUnavailable: Bool { code == .unavailable }
    /// The call ended without the store's answer (``timedOut(_:)``, ``unavailable(_:)``): a write
    /// may or may not have been committed, and the same call later may well succeed.
    public var leftOutcomeUnknown: Bool { code == .timedOut || code == .unavailable }
}

extension JobProgress {
    /// Adds `count` items stored in `state` (a `job_item.state` value) to the progress: both
    /// stores fold their outcome counts through here, several rows per state (one per status
    /// and reason), so every state adds up. `retrying` items are pending too.
    /// - Throws: ``StoreError/corrupt(_:)`` for a state the store does not know.
    public mutating func add(state: String, count: Int) throws {
        switch JobItemState(rawValue: state) {
        case .pending: pending += count
        case .retrying:
            pending += count
            retrying += count
        case .sent: sent += count
        case .failed: failed += count
        case .unknown: unknown += count
        case nil: throw StoreError.corrupt("job item with an unknown state")
        }
    }
}
