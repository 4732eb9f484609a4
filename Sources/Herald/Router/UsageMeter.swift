import Foundation
import HeraldCore
import HeraldStore
import Logging
import ServiceLifecycle
import Synchronization

/// Counts each tenant's usage per hour in memory, on the send path, and hands the counts to the
/// store's ``HeraldStore/UsageLedger`` in batches (``UsageFlusher``): accepted sends, final
/// outcomes by class, batch items.
///
/// Each tenant's counts are a ``Tally`` of their own, which the tenant's runtimes hold
/// (``TenantRuntime/usage``): counting a send takes that tally's lock and adds to the current
/// hour's counter of its kind, with no table lookup and no hashing of the tenant's name. The
/// table of tallies is read when the counts are taken; a tally that no runtime holds and that has
/// nothing left to hand over leaves it then, so the table holds the tenants loaded and those with
/// counts not yet written.
///
/// Whoever decides that an outcome is final counts it: the router for single sends, the job
/// runner for batch items (the router counts nothing for them, whose resends the runner decides).
public final class UsageMeter: Sendable {
    /// One tenant's counts until they are taken.
    public final class Tally: Sendable {
        public let tenant: TenantID
        private let enabled: Bool
        private let counts = Mutex(Counts())

        fileprivate init(tenant: TenantID, enabled: Bool) {
            self.tenant = tenant
            self.enabled = enabled
        }

        /// Adds `count` of `kind` to the hour of `date`.
        public func add(_ kind: UsageKind, at date: Date, count: Int64 = 1) {
            guard enabled, count > 0 else { return }
            let hour = UsageMeter.hour(of: date)
            counts.withLock { $0.add(count, kind, hour: hour) }
        }

        /// A single send that ended at `date`: one accepted and its final outcome (delivered, or
        /// failed by class; no outcome for a cancelled send), under one lock, in the hour it ended.
        public func addSingleSend(_ outcome: Result<PushResult, any Error>, at date: Date) {
            guard enabled else { return }
            let kind = UsageMeter.kind(of: outcome)
            let hour = UsageMeter.hour(of: date)
            counts.withLock { counts in
                counts.add(1, .accepted, hour: hour)
                if let kind { counts.add(1, kind, hour: hour) }
            }
        }

        /// A batch item's final outcome: its class and one batch item, under one lock.
        public func addBatchItem(_ result: JobItemResult) {
            guard enabled else { return }
            let kind = UsageMeter.kind(of: result)
            let hour = UsageMeter.hour(of: result.finishedAt)
            counts.withLock { counts in
                counts.add(1, kind, hour: hour)
                counts.add(1, .batchItems, hour: hour)
            }
        }

        /// Everything counted so far, which the tally forgets.
        fileprivate func take() -> [UsageCount] {
            counts.withLock { $0.take(tenant: tenant.rawValue) }
        }
    }

    /// A tally's counts: the hour most sends fall in, as one counter a kind, and any other hours
    /// (an outcome finished in the hour before, counts put back after a failed write).
    private struct Counts {
        struct Key: Hashable {
            var hour: Int64
            var kind: UsageKind
        }

        /// The hour of ``current`` (hours since 1970).
        var hour: Int64 = 0
        /// ``hour``'s counts, by ``UsageMeter/position(of:)``; empty until the first count.
        var current: [Int64] = []
        var other: [Key: Int64] = [:]

        mutating func add(_ count: Int64, _ kind: UsageKind, hour: Int64) {
            if current.isEmpty {
                current = Array(repeating: 0, count: UsageKind.allCases.count)
                self.hour = hour
            }
            if hour == self.hour {
                current[UsageMeter.position(of: kind)] &+= count
            } else if hour > self.hour {
                // A new hour: the last one's counts wait with the others until they are taken.
                for kind in UsageKind.allCases {
                    let position = UsageMeter.position(of: kind)
                    guard current[position] > 0 else { continue }
                    other[Key(hour: self.hour, kind: kind), default: 0] &+= current[position]
                    current[position] = 0
                }
                self.hour = hour
                current[UsageMeter.position(of: kind)] &+= count
            } else {
                other[Key(hour: hour, kind: kind), default: 0] &+= count
            }
        }

        mutating func take(tenant: String) -> [UsageCount] {
            var taken: [UsageCount] = []
            for kind in UsageKind.allCases where !current.isEmpty {
                let position = UsageMeter.position(of: kind)
                guard current[position] > 0 else { continue }
                taken.append(UsageCount(tenant: tenant, hour: UsageMeter.date(ofHour: hour), kind: kind, count: current[position]))
                current[position] = 0
            }
            for (key, count) in other {
                taken.append(UsageCount(tenant: tenant, hour: UsageMeter.date(ofHour: key.hour), kind: key.kind, count: count))
            }
            other.removeAll()
            return taken
        }
    }

    private let tallies = Mutex<[TenantID: Tally]>([:])
    /// False: nothing is counted (`api.count_usage: false`); the reports read what was counted before.
    public let enabled: Bool

    public init(enabled: Bool = true) {
        self.enabled = enabled
    }

    /// The tenant's tally, made on first use: a runtime takes it once and counts its sends on it.
    public func tally(for tenant: TenantID) -> Tally {
        tallies.withLock { tallies in
            if let tally = tallies[tenant] { return tally }
            let tally = Tally(tenant: tenant, enabled: enabled)
            tallies[tenant] = tally
            return tally
        }
    }

    /// Adds `count` of `kind` to `tenant`'s hour of `date` (a batch's accepted items, counted
    /// once a batch; the send path counts on the runtime's ``Tally``).
    public func add(_ kind: UsageKind, tenant: TenantID, at date: Date, count: Int64 = 1) {
        guard enabled, count > 0 else { return }
        tally(for: tenant).add(kind, at: date, count: count)
    }

    /// The kind of a final outcome; nil for a cancelled send (no outcome).
    public static func kind(of outcome: Result<PushResult, any Error>) -> UsageKind? {
        switch outcome {
        case .success(let result): return kind(status: result.response.status)
        case .failure(let error as PushError): return error.mayHaveReachedAPNs ? .failedUnknown : .failedRefused
        case .failure(is CancellationError): return nil
        case .failure: return .failedUnknown
        }
    }

    /// The kind of APNs' answer with `status`.
    public static func kind(status: Int) -> UsageKind {
        switch status {
        case 200: return .delivered
        case 410: return .failedUnregistered
        case 429, 500...599: return .failedUnavailable
        default: return .failedRejected
        }
    }

    /// The kind of a batch item's recorded outcome.
    public static func kind(of result: JobItemResult) -> UsageKind {
        switch result.state {
        case .sent: return .delivered
        case .unknown: return .failedUnknown
        default: return result.status.map(kind(status:)) ?? .failedRefused
        }
    }

    /// Takes every count so far (the meter starts again from zero). A tally that nobody else
    /// holds (its tenant's runtimes are gone) leaves the table once its counts are taken: no
    /// one can count on it any more, and only this lock hands it out.
    public func take() -> [UsageCount] {
        tallies.withLock { tallies in
            var taken: [UsageCount] = []
            // The keys apart from the table, which changes below.
            for tenant in Array(tallies.keys) {
                // Moved out of the table: `tally` holds the table's reference, not another.
                guard var tally = tallies.removeValue(forKey: tenant) else { continue }
                taken.append(contentsOf: tally.take())
                if !isKnownUniquelyReferenced(&tally) { tallies[tenant] = tally }
            }
            return taken
        }
    }

    /// Puts counts back (a write that failed): they go with the next one. Counts of a tenant name
    /// that is not a valid tenant ID (none are made so) are dropped.
    public func restore(_ taken: [UsageCount]) {
        for count in taken {
            guard let tenant = try? TenantID(count.tenant) else { continue }
            tally(for: tenant).restore(count)
        }
    }

    /// Hours since 1970 of `date` (clamped: a date far off counts in a far hour, not a trap).
    fileprivate static func hour(of date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970
        guard seconds.isFinite else { return 0 }
        return Int64((seconds / 3600).rounded(.down).clamped(to: -1e15...1e15))
    }

    fileprivate static func date(ofHour hour: Int64) -> Date {
        Date(timeIntervalSince1970: Double(hour) * 3600)
    }

    /// A kind's counter in ``Counts/current``.
    fileprivate static func position(of kind: UsageKind) -> Int {
        switch kind {
        case .accepted: 0
        case .delivered: 1
        case .failedRejected: 2
        case .failedUnregistered: 3
        case .failedUnavailable: 4
        case .failedRefused: 5
        case .failedUnknown: 6
        case .batchItems: 7
        }
    }

    /// Writes what was counted to `ledger`; on failure the counts stay for the next flush.
    /// - Returns: whether everything counted so far is in the store.
    @discardableResult
    public func flush(to ledger: any UsageLedger, logger: Logger) async -> Bool {
        let taken = take()
        guard !taken.isEmpty else { return true }
        do {
            try await ledger.addUsage(taken)
            return true
        } catch {
            restore(taken)
            logger.storeFailure(
                "usage counts not written yet; kept for the next try", error: error, level: .warning,
                metadata: ["herald.component": "usage"])
            return false
        }
    }
}

extension UsageMeter.Tally {
    /// A count put back, in its own hour.
    fileprivate func restore(_ count: UsageCount) {
        guard count.count > 0 else { return }
        let hour = UsageMeter.hour(of: count.hour)
        counts.withLock { $0.add(count.count, count.kind, hour: hour) }
    }
}

/// Writes the meter's counts to the store every ``interval``, and once more when the process
/// stops (after the router and the job runner, before the store closes: the service order in
/// `HeraldProcess`).
public struct UsageFlusher: Service {
    let meter: UsageMeter
    let ledger: any UsageLedger
    let interval: Duration
    let clock: any PushClock
    let logger: Logger

    public init(
        meter: UsageMeter, ledger: any UsageLedger, interval: Duration = .seconds(10), clock: any PushClock = SystemPushClock(),
        logger: Logger
    ) {
        self.meter = meter
        self.ledger = ledger
        self.interval = interval
        self.clock = clock
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await clock.repeating(every: interval) { await meter.flush(to: ledger, logger: logger) }
        }
        // The last counts: stopped after every sender.
        await meter.flush(to: ledger, logger: logger)
    }
}

extension Double {
    fileprivate func clamped(to range: ClosedRange<Double>) -> Double { Swift.min(Swift.max(self, range.lowerBound), range.upperBound) }
}
