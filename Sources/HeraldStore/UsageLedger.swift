import Foundation

/// What a tenant's usage counts, per hour.
public enum UsageKind: String, Sendable, CaseIterable, Hashable {
    /// Notifications accepted: single sends taken by the API, the CLI or the console, and batch
    /// items stored by `POST /v1/notifications/batch`.
    case accepted
    /// Notifications APNs accepted (200), as their final outcome.
    case delivered
    /// Final outcomes without a 200, by class: APNs refused it (4xx other than 410)…
    case failedRejected = "failed.rejected"
    /// …the device token is no longer valid (410)…
    case failedUnregistered = "failed.unregistered"
    /// …APNs failed or was unavailable (5xx, 429) and the resends ran out…
    case failedUnavailable = "failed.unavailable"
    /// …Herald refused it before the wire (tenant policy, rate limit, circuit, no endpoint)…
    case failedRefused = "failed.refused"
    /// …or it may have reached APNs and got no answer.
    case failedUnknown = "failed.unknown"
    /// Batch items that reached their final outcome (also counted in delivered or failed).
    case batchItems = "batch_items"

    public var isFailure: Bool { rawValue.hasPrefix("failed.") }
}

/// A count of one kind in one tenant's hour.
public struct UsageCount: Sendable, Hashable {
    public var tenant: String
    /// The hour's start.
    public var hour: Date
    public var kind: UsageKind
    public var count: Int64

    public init(tenant: String, hour: Date, kind: UsageKind, count: Int64) {
        self.tenant = tenant
        self.hour = hour
        self.kind = kind
        self.count = count
    }

    /// The start of the hour `date` falls in.
    public static func hour(of date: Date) -> Date {
        let seconds = date.timeIntervalSince1970
        guard seconds.isFinite else { return Date(timeIntervalSince1970: 0) }
        return Date(timeIntervalSince1970: (seconds / 3600).rounded(.down) * 3600)
    }
}

/// Usage per tenant and hour, kept in the store and shared by every instance: each instance adds
/// what it counted (``addUsage(_:)``), and reports read the sums.
public protocol UsageLedger: Sendable {
    /// Adds each count to its tenant's hour and kind, in one transaction.
    func addUsage(_ counts: [UsageCount]) async throws
    /// The tenant's counts of the hours from `from` (inclusive) to `to` (exclusive), by hour;
    /// `tenant` nil: every tenant.
    func usage(tenant: String?, from: Date, to: Date) async throws -> [UsageCount]
    /// Drops the hours before `cutoff`; returns how many rows.
    func pruneUsage(before cutoff: Date) async throws -> Int
}
