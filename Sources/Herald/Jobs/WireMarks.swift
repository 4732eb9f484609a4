import Foundation
import HeraldCore
import HeraldStore
import Synchronization

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
    private let store: any PushStore
    private let tenant: TenantID
    private let job: JobID
    private let claimant: String
    private let clock: any PushClock

    private enum Wake: Sendable {
        /// The mark was written (true) or the item was not the claimant's to send (false).
        case done(Result<Bool, any Error>)
        /// Write the waiting marks (this one among them): no write is under way.
        case lead
    }

    private struct Waiter: Sendable {
        var id: UInt64
        var index: Int
        var continuation: CheckedContinuation<Wake, Never>
    }

    private struct State {
        var waiting: [Waiter] = []
        /// True while one caller writes marks; the others wait for it to hand over.
        var writing = false
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    init(store: any PushStore, tenant: TenantID, job: JobID, claimant: String, clock: any PushClock) {
        self.store = store
        self.tenant = tenant
        self.job = job
        self.claimant = claimant
        self.clock = clock
    }

    /// Callers waiting for the next write (for tests).
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Marks the item on the wire, durably.
    /// - Returns: false when the item is not to be sent (it has an outcome, or its lease is no
    ///   longer this claimant's).
    /// - Throws: the store's error: the item must not be sent.
    func mark(_ index: Int) async throws -> Bool {
        let id = state.withLock { state -> UInt64 in
            defer { state.nextID &+= 1 }
            return state.nextID
        }
        let wake = await withCheckedContinuation { (continuation: CheckedContinuation<Wake, Never>) in
            let lead = state.withLock { state -> Bool in
                state.waiting.append(Waiter(id: id, index: index, continuation: continuation))
                guard !state.writing else { return false }
                state.writing = true
                return true
            }
            if lead { continuation.resume(returning: .lead) }
        }
        switch wake {
        case .done(let result): return try result.get()
        case .lead: return try await writeWaiting(leader: id)
        }
    }

    /// Writes every waiting mark (the leader's among them) in one store call, answers the other
    /// callers, and hands the writing over to the first caller that arrived meanwhile, which
    /// stays waiting until it writes its own batch (or ends the writing when none arrived).
    private func writeWaiting(leader: UInt64) async throws -> Bool {
        let batch = state.withLock { state -> [Waiter] in
            defer { state.waiting.removeAll(keepingCapacity: true) }
            return state.waiting
        }
        let written: Result<Set<Int>, any Error>
        do {
            written = .success(
                try await store.markOnWire(
                    tenant: tenant, job: job, indexes: batch.map(\.index), claimant: claimant, at: clock.date))
        } catch {
            written = .failure(error)
        }
        let next = state.withLock { state -> Waiter? in
            guard let first = state.waiting.first else {
                state.writing = false
                return nil
            }
            return first
        }
        var own: Result<Bool, any Error> = .success(false)
        for waiter in batch {
            let result = written.map { $0.contains(waiter.index) }
            if waiter.id == leader {
                own = result  // its continuation already woke it to lead
            } else {
                waiter.continuation.resume(returning: .done(result))
            }
        }
        next?.continuation.resume(returning: .lead)
        return try own.get()
    }
}
