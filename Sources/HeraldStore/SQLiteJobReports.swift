import Foundation
import GRDB
import HeraldCore

/// Reports over a tenant's job that the HTTP API shows and ``PushStore`` does not offer: how
/// many items ended with each outcome, and the failed items, paged.
public protocol JobReports: Sendable {
    /// Item counts by state, APNs status and reason, for one job of the tenant.
    func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount]
    /// The job's failed items with an index greater than `afterIndex`, in index order.
    func failedItems(tenant: TenantID, job: JobID, afterIndex: Int, limit: Int) async throws -> [JobItem]
}

/// How many items of a job ended one way: a state, APNs' status (nil when APNs never
/// answered) and the reason.
public struct JobOutcomeCount: Sendable, Hashable {
    public var state: JobItemState
    public var status: Int?
    public var reason: String?
    public var count: Int

    public init(state: JobItemState, status: Int?, reason: String?, count: Int) {
        self.state = state
        self.status = status
        self.reason = reason
        self.count = count
    }
}

/// ``JobReports`` for the embedded SQLite store, read through read-only connections of its own
/// to the same file (the store runs in WAL mode, so these reads never block its writes).
///
/// ```swift
/// let store = try SQLitePushStore(directory: "data")
/// let reports = try SQLiteJobReports(store: store)
/// let counts = try await reports.outcomes(tenant: tenant, job: job)
/// ```
public final class SQLiteJobReports: JobReports {
    private let reader: DatabasePool

    public init(store: SQLitePushStore) throws {
        var configuration = Configuration()
        configuration.readonly = true
        configuration.label = "herald.store.reports"
        configuration.maximumReaderCount = 2
        do {
            reader = try DatabasePool(path: store.path, configuration: configuration)
        } catch let error as DatabaseError {
            throw StoreError.cannotOpen("cannot open the store at \(store.path) for reading: \(error.message ?? error.description)")
        }
    }

    public func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount] {
        try await reader.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT state, status, reason, count(*) AS n FROM job_item
                    WHERE tenant = ? AND job_id = ?
                    GROUP BY state, status, reason
                    ORDER BY state, status, reason
                    """,
                arguments: [tenant.rawValue, job.rawValue]
            ).map { row in
                let raw: String = row["state"]
                guard let state = JobItemState(rawValue: raw) else { throw StoreError.corrupt("job item with an unknown state") }
                return JobOutcomeCount(state: state, status: row["status"], reason: row["reason"], count: row["n"])
            }
        }
    }

    public func failedItems(tenant: TenantID, job: JobID, afterIndex: Int, limit: Int) async throws -> [JobItem] {
        try await reader.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM job_item
                    WHERE tenant = ? AND job_id = ? AND state = 'failed' AND idx > ?
                    ORDER BY idx LIMIT ?
                    """,
                arguments: [tenant.rawValue, job.rawValue, afterIndex, max(0, limit)]
            ).map(Self.failedItem)
        }
    }

    /// A failed item's row (its notification without the payload, which the report does not show).
    private static func failedItem(_ row: Row) throws -> JobItem {
        let tokenHex: String = row["device_token"]
        let pushTypeRaw: String = row["push_type"]
        let apnsIDRaw: String = row["apns_id"]
        let resultID: String? = row["result_apns_id"]
        let timestamp: Int64? = row["apns_timestamp_ms"]
        let finished: Int64? = row["finished_at_ms"]
        guard let token = try? DeviceToken(hex: tokenHex), let id = try? NotificationID(apnsIDRaw) else {
            throw StoreError.corrupt("job item row with an invalid device token or apns-id")
        }
        let notification = HeraldCore.Notification(
            deviceToken: token, topic: row["topic"], pushType: PushType(rawValue: pushTypeRaw) ?? .alert,
            collapseID: row["collapse_id"], id: id, payload: [UInt8]())
        let result = JobItemResult(
            state: .failed, status: row["status"], reason: row["reason"], message: row["message"],
            apnsID: resultID.flatMap { try? NotificationID($0) }, apnsTimestamp: timestamp.map(Self.date),
            finishedAt: Self.date(finished ?? 0))
        return JobItem(job: JobID(unchecked: row["job_id"]), index: row["idx"], notification: notification, state: .failed, result: result)
    }

    private static func date(_ millis: Int64) -> Date {
        Date(timeIntervalSince1970: Double(millis) / 1000)
    }
}

/// ``JobReports`` for any ``PushStore``, by reading every item of the job (slow for big jobs;
/// for stores without a report query of their own).
public struct ScanningJobReports: JobReports {
    private let store: any PushStore
    private let page = 5_000

    public init(store: any PushStore) {
        self.store = store
    }

    public func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount] {
        struct Key: Hashable {
            var state: JobItemState
            var status: Int?
            var reason: String?
        }
        var counts: [Key: Int] = [:]
        var from = 0
        while true {
            let items = try await store.items(tenant: tenant, job: job, fromIndex: from, limit: page)
            for item in items {
                counts[Key(state: item.state, status: item.result?.status, reason: item.result?.reason), default: 0] += 1
            }
            guard let last = items.last, items.count == page else { break }
            from = last.index + 1
        }
        return counts.map { JobOutcomeCount(state: $0.key.state, status: $0.key.status, reason: $0.key.reason, count: $0.value) }
            .sorted { ($0.state.rawValue, $0.status ?? -1, $0.reason ?? "") < ($1.state.rawValue, $1.status ?? -1, $1.reason ?? "") }
    }

    public func failedItems(tenant: TenantID, job: JobID, afterIndex: Int, limit: Int) async throws -> [JobItem] {
        var found: [JobItem] = []
        var from = afterIndex + 1
        while found.count < limit {
            let items = try await store.items(tenant: tenant, job: job, fromIndex: from, limit: page)
            found.append(contentsOf: items.lazy.filter { $0.state == .failed }.prefix(limit - found.count))
            guard let last = items.last, items.count == page else { break }
            from = last.index + 1
        }
        return found
    }
}
