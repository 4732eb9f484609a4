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

extension JobOutcomeCount {
    /// A job's counts as ``JobReports/outcomes(tenant:job:)`` answers them, from what the stores
    /// keep (migration v9): the outcome counts (`job_outcome`), the number of `retrying` items
    /// and the job's item count; the items with neither are pending. Zero counts are left out,
    /// as a count of the items would; sorted by state, status and reason.
    /// - Throws: ``StoreError/corrupt(_:)`` when the counts exceed the job's items.
    public static func assemble(outcomes: [JobOutcomeCount], retrying: Int, itemCount: Int, job: JobID) throws
        -> [JobOutcomeCount]
    {
        var counts = outcomes.filter { $0.count > 0 }
        let finished = counts.reduce(0) { $0 + $1.count }
        let pending = itemCount - finished - retrying
        guard pending >= 0, retrying >= 0, counts.allSatisfy({ $0.state.isFinal }) else {
            throw StoreError.corrupt("job \(job) counts more outcomes than items")
        }
        if pending > 0 { counts.append(JobOutcomeCount(state: .pending, status: nil, reason: nil, count: pending)) }
        if retrying > 0 { counts.append(JobOutcomeCount(state: .retrying, status: nil, reason: nil, count: retrying)) }
        return counts.sorted {
            ($0.state.rawValue, $0.status ?? -1, $0.reason ?? "") < ($1.state.rawValue, $1.status ?? -1, $1.reason ?? "")
        }
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
                counts[Key(state: item.state, status: item.result?.status, reason: item.result?.reason), default: 0] +=
                    1
            }
            guard let last = items.last, items.count == page else { break }
            from = last.index + 1
        }
        return counts.map {
            JobOutcomeCount(state: $0.key.state, status: $0.key.status, reason: $0.key.reason, count: $0.value)
        }
        .sorted {
            ($0.state.rawValue, $0.status ?? -1, $0.reason ?? "") < (
                $1.state.rawValue, $1.status ?? -1, $1.reason ?? ""
            )
        }
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
