import Foundation
import HeraldCore
import HeraldStore
import Logging
import ServiceLifecycle
import Synchronization

/// Counts each tenant's usage per hour in memory, on the send path (a lock and a dictionary
/// entry, no store call), and hands the counts to the store's ``HeraldStore/UsageLedger`` in
/// batches (``UsageFlusher``): accepted sends, final outcomes by class, batch items.
///
/// Whoever decides that an outcome is final counts it: the router for single sends, the job
/// runner for batch items (the router counts nothing for them, whose resends the runner decides).
public final class UsageMeter: Sendable {
    private struct Key: Hashable {
        var tenant: String
        /// Hours since 1970.
        var hour: Int64
        var kind: UsageKind
    }

    private let counts = Mutex<[Key: Int64]>([:])
    /// False: nothing is counted (`api.count_usage: false`); the reports read what was counted before.
    public let enabled: Bool

    public init(enabled: Bool = true) {
        self.enabled = enabled
    }

    /// Adds `count` of `kind` to `tenant`'s hour of `date`.
    public func add(_ kind: UsageKind, tenant: TenantID, at date: Date, count: Int64 = 1) {
        guard enabled, count > 0 else { return }
        let seconds = date.timeIntervalSince1970
        let hour = seconds.isFinite ? Int64(clamping: Int((seconds / 3600).rounded(.down).clamped(to: -1e15...1e15))) : 0
        let key = Key(tenant: tenant.rawValue, hour: hour, kind: kind)
        counts.withLock { $0[key, default: 0] &+= count }
    }

    /// A single send's or a batch item's final outcome: delivered, or failed by class.
    public func addOutcome(_ outcome: Result<PushResult, any Error>, tenant: TenantID, at date: Date) {
        guard let kind = Self.kind(of: outcome) else { return }
        add(kind, tenant: tenant, at: date)
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

    /// Takes every count so far (the meter starts again from zero).
    public func take() -> [UsageCount] {
        let taken = counts.withLock { counts -> [Key: Int64] in
            defer { counts.removeAll(keepingCapacity: true) }
            return counts
        }
        return taken.map { key, count in
            UsageCount(tenant: key.tenant, hour: Date(timeIntervalSince1970: Double(key.hour) * 3600), kind: key.kind, count: count)
        }
    }

    /// Puts counts back (a write that failed): they go with the next one.
    public func restore(_ taken: [UsageCount]) {
        counts.withLock { counts in
            for count in taken {
                let key = Key(
                    tenant: count.tenant, hour: Int64(clamping: Int((count.hour.timeIntervalSince1970 / 3600).rounded(.down))),
                    kind: count.kind)
                counts[key, default: 0] &+= count.count
            }
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

/// Writes the meter's counts to the store every ``interval``, and once more when the process
/// stops (after the router and the job runner, before the store closes: the service order in
/// `HeraldProcess`).
public struct UsageFlusher: Service {
    let meter: UsageMeter
    let ledger: any UsageLedger
    let interval: Duration
    let logger: Logger

    public init(meter: UsageMeter, ledger: any UsageLedger, interval: Duration = .seconds(10), logger: Logger) {
        self.meter = meter
        self.ledger = ledger
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await Task.sleep(for: interval)
                } catch {
                    break
                }
                await meter.flush(to: ledger, logger: logger)
            }
        }
        // The last counts: stopped after every sender.
        await meter.flush(to: ledger, logger: logger)
    }
}

extension Double {
    fileprivate func clamped(to range: ClosedRange<Double>) -> Double { Swift.min(Swift.max(self, range.lowerBound), range.upperBound) }
}
