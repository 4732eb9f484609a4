#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A point on the monotonic clock, in nanoseconds: the instants of the send path (deadlines,
/// when a send began, a rate limit's slots, a circuit's opening).
///
/// A plain integer, so that the send path stores, copies and compares it inline. The standard
/// library's `ContinuousClock.Instant` is opaque outside the standard library: every copy,
/// comparison and sum is a call into it, and every value that holds one (a send's context, a
/// middleware's decision) is laid out and copied through the runtime.
///
/// On Linux the clock is `CLOCK_MONOTONIC`, the clock of SwiftNIO's `NIODeadline`, so a deadline
/// is handed to a connection as it is (``uptimeNanoseconds``).
///
/// ```swift
/// let deadline = PushInstant.now.advanced(by: .seconds(30))
/// if PushInstant.now < deadline { … }
/// ```
public struct PushInstant: Sendable, Hashable, Comparable {
    /// Nanoseconds since the clock's origin (the system's boot on Linux).
    public var nanoseconds: Int64

    public init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    /// The monotonic clock's reading now.
    public static var now: PushInstant {
        var reading = timespec()
        clock_gettime(CLOCK_MONOTONIC, &reading)
        return PushInstant(nanoseconds: Int64(reading.tv_sec) &* 1_000_000_000 &+ Int64(reading.tv_nsec))
    }

    /// The same point as an unsigned count from the clock's origin (never below zero), as
    /// `NIODeadline.uptimeNanoseconds(_:)` takes it.
    public var uptimeNanoseconds: UInt64 { UInt64(clamping: nanoseconds) }

    /// This instant moved by `duration` (saturating at the ends of the range).
    public func advanced(by duration: Duration) -> PushInstant {
        advanced(byNanoseconds: duration.nanoseconds)
    }

    /// This instant moved by `nanoseconds` (saturating at the ends of the range).
    public func advanced(byNanoseconds nanoseconds: Int64) -> PushInstant {
        let (sum, overflow) = self.nanoseconds.addingReportingOverflow(nanoseconds)
        guard !overflow else { return PushInstant(nanoseconds: nanoseconds < 0 ? .min : .max) }
        return PushInstant(nanoseconds: sum)
    }

    /// The time from this instant to `other` (negative when `other` is earlier).
    public func duration(to other: PushInstant) -> Duration {
        .nanoseconds(nanoseconds(to: other))
    }

    /// The nanoseconds from this instant to `other` (negative when `other` is earlier;
    /// saturating).
    public func nanoseconds(to other: PushInstant) -> Int64 {
        let (difference, overflow) = other.nanoseconds.subtractingReportingOverflow(nanoseconds)
        guard !overflow else { return other.nanoseconds < nanoseconds ? .min : .max }
        return difference
    }

    /// Suspends until the monotonic clock reaches `deadline` (at once when it has).
    /// - Throws: `CancellationError` when the task is cancelled.
    public static func sleep(until deadline: PushInstant) async throws {
        let wait = PushInstant.now.nanoseconds(to: deadline)
        guard wait > 0 else { return try Task.checkCancellation() }
        try await Task.sleep(nanoseconds: UInt64(wait))
    }

    public static func < (lhs: PushInstant, rhs: PushInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    public static func + (lhs: PushInstant, rhs: Duration) -> PushInstant {
        lhs.advanced(by: rhs)
    }

    public static func - (lhs: PushInstant, rhs: Duration) -> PushInstant {
        lhs.advanced(byNanoseconds: 0 &- rhs.nanoseconds)
    }

    public static func - (lhs: PushInstant, rhs: PushInstant) -> Duration {
        rhs.duration(to: lhs)
    }
}

extension Duration {
    /// The duration in whole nanoseconds (toward zero), saturating at `Int64`'s range
    /// (about 292 years).
    public var nanoseconds: Int64 {
        // `components` divides a 128-bit count: once.
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        let (sum, sumOverflow) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        guard !sumOverflow else { return seconds < 0 ? .min : .max }
        return sum
    }
}
