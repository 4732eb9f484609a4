import Foundation
import HeraldCore
import HeraldStore

/// Marks one job's items "on the wire" in the store right before their requests are written
/// (``HeraldStore/PushStore/markOnWire(tenant:job:indexes:claimant:at:)``), with group commit:
/// the send tasks that ask while a mark is being written are marked together in the next write,
/// so a job with 100 sends in flight writes one mark for many items, not one per item.
///
/// Each ``mark(_:)`` returns only after its item's mark is committed: a request is never
/// written before the store knows it may be on the wire. That is what lets a later instance
/// tell an item that may have reached APNs (reported `unknown` under at-most-once) from one
/// that was never sent.
///
/// An at-least-once item on a shared store needs only the mark's ownership check, not the mark
/// (without an outcome it is sent again either way): ``check(_:)`` reads it
/// (``HeraldStore/PushStore/leasedItems(tenant:job:indexes:claimant:)``), grouped the same way.
final class WireMarks: Sendable {
    private let commits: GroupCommit<Int, Bool>
    private let checks: GroupCommit<Int, Bool>

    init(store: any PushStore, tenant: TenantID, job: JobID, claimant: String, clock: any PushClock) {
        commits = GroupCommit { indexes in
            await Self.answers(indexes) {
                try await store.markOnWire(tenant: tenant, job: job, indexes: indexes, claimant: claimant, at: clock.date)
            }
        }
        checks = GroupCommit { indexes in
            await Self.answers(indexes) {
                try await store.leasedItems(tenant: tenant, job: job, indexes: indexes, claimant: claimant)
            }
        }
    }

    /// Each index's answer: in the set the store returned, or the store's error.
    private static func answers(_ indexes: [Int], _ body: () async throws -> Set<Int>) async -> [Result<Bool, any Error>] {
        do {
            let chosen = try await body()
            return indexes.map { .success(chosen.contains($0)) }
        } catch {
            return indexes.map { _ in .failure(error) }
        }
    }

    /// Callers waiting for the next write or read (for tests).
    var waitingCount: Int { commits.waitingCount + checks.waitingCount }

    /// Marks the item on the wire, durably.
    /// - Returns: false when the item is not to be sent (it has an outcome, or its lease is not
    ///   this claimant's any more).
    /// - Throws: the store's error: the item must not be sent.
    func mark(_ index: Int) async throws -> Bool {
        try await commits.submit(index)
    }

    /// Checks, without writing, that the item is still leased to this claimant and has no outcome.
    /// - Returns: false when the item is not to be sent.
    /// - Throws: the store's error: the item must not be sent.
    func check(_ index: Int) async throws -> Bool {
        try await checks.submit(index)
    }
}
