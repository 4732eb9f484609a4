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
final class WireMarks: Sendable {
    private let commits: GroupCommit<Int, Bool>

    init(store: any PushStore, tenant: TenantID, job: JobID, claimant: String, clock: any PushClock) {
        commits = GroupCommit { indexes in
            do {
                let marked = try await store.markOnWire(
                    tenant: tenant, job: job, indexes: indexes, claimant: claimant, at: clock.date)
                return indexes.map { .success(marked.contains($0)) }
            } catch {
                return indexes.map { _ in .failure(error) }
            }
        }
    }

    /// Callers waiting for the next write (for tests).
    var waitingCount: Int { commits.waitingCount }

    /// Marks the item on the wire, durably.
    /// - Returns: false when the item is not to be sent (it has an outcome, or its lease is no
    ///   longer this claimant's).
    /// - Throws: the store's error: the item must not be sent.
    func mark(_ index: Int) async throws -> Bool {
        try await commits.submit(index)
    }
}
