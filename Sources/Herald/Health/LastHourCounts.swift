import Foundation
import HeraldCore
import Synchronization

/// Counts per minute over the last hour, as a value: 60 buckets, each stamped with the minute it
/// counts, so an old bucket is recognised and restarted rather than summed. Memory is fixed.
///
/// ```swift
/// var window = HourWindow()
/// window.record(at: Date(), failed: false)
/// window.totals(at: Date())   // (sends: 1, failures: 0)
/// ```
public struct HourWindow: Sendable, Hashable {
    private var minutes = [Int64](repeating: .min, count: 60)
    private var sends = [Int](repeating: 0, count: 60)
    private var failures = [Int](repeating: 0, count: 60)

    public init() {}

    public mutating func record(at date: Date, failed: Bool) {
        let minute = Self.minute(of: date)
        let slot = Self.slot(of: minute)
        if minutes[slot] != minute {
            minutes[slot] = minute
            sends[slot] = 0
            failures[slot] = 0
        }
        sends[slot] &+= 1
        if failed { failures[slot] &+= 1 }
    }

    /// The sends and failures of the 60 minutes up to `date` (this minute included).
    public func totals(at date: Date) -> (sends: Int, failures: Int) {
        let now = Self.minute(of: date)
        var totals = (sends: 0, failures: 0)
        for slot in 0..<60 where minutes[slot] > now - 60 && minutes[slot] <= now {
            totals.sends &+= sends[slot]
            totals.failures &+= failures[slot]
        }
        return totals
    }

    static func minute(of date: Date) -> Int64 {
        let seconds = date.timeIntervalSince1970
        // Dates come from the clock, but a non-finite or absurd one must not trap.
        guard seconds.isFinite, abs(seconds) < 1e15 else { return 0 }
        return Int64((seconds / 60).rounded(.down))
    }

    static func slot(of minute: Int64) -> Int {
        Int(((minute % 60) + 60) % 60)
    }
}

/// Each loaded tenant's sends and failures of the last hour, over every runtime it had (a reload
/// or a rotation does not restart the count). One ``Window`` per tenant, held by its runtimes so
/// that a send counts without looking its tenant up: a runtime gets its tenant's window when it is
/// built (``window(for:)``) and the window is kept once the runtime is installed (``adopt(_:for:)``).
/// Windows of removed tenants are dropped with them, so the table is bounded by the tenants loaded.
public final class LastHourCounts: Sendable {
    /// One tenant's counts.
    public final class Window: Sendable {
        private let counts = Mutex(HourWindow())

        public init() {}

        /// Counts one send: `failed` when it had no 200 answer (a rejection, a local refusal, or no answer).
        public func record(at date: Date, failed: Bool) {
            counts.withLock { $0.record(at: date, failed: failed) }
        }

        func totals(at date: Date) -> (sends: Int, failures: Int) {
            counts.withLock { $0.totals(at: date) }
        }
    }

    private let windows = Mutex<[TenantID: Window]>([:])

    public init() {}

    /// The tenant's window, or a new one that counts only once adopted (a runtime built but never
    /// installed adds nothing to the table).
    public func window(for tenant: TenantID) -> Window {
        windows.withLock { $0[tenant] } ?? Window()
    }

    /// Keeps `window` as the tenant's unless it has one already.
    func adopt(_ window: Window, for tenant: TenantID) {
        windows.withLock { windows in
            if windows[tenant] == nil { windows[tenant] = window }
        }
    }

    public func totals(of tenant: TenantID, at date: Date) -> (sends: Int, failures: Int) {
        windows.withLock { $0[tenant] }?.totals(at: date) ?? (0, 0)
    }

    /// Drops the windows of tenants not in `tenants`.
    func retain(tenants: Set<TenantID>) {
        windows.withLock { windows in
            for tenant in windows.keys where !tenants.contains(tenant) { windows.removeValue(forKey: tenant) }
        }
    }
}
