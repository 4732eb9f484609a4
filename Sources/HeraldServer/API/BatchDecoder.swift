import HeraldCore
import NIOPosix
import Synchronization

/// Runs the CPU-heavy part of a batch POST (parsing up to 100,000 items, checking each, building
/// the notifications) on NIO's blocking thread pool instead of Swift's cooperative pool, whose
/// few threads also run every other tenant's requests: a big batch does not stall them. One
/// decode per tenant at a time: a tenant posting many batches at once queues behind its own,
/// and the pool's threads stay free for the others.
final class BatchDecoder: Sendable {
    private struct State: Sendable {
        var busy: Set<TenantID> = []
        /// Per tenant, the requests waiting for its decode slot, first come first served. Bounded
        /// by the listener's connection cap (one request each).
        var waiting: [TenantID: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())

    /// Runs `body` on the blocking pool once `tenant` has no other decode under way.
    func run<Value: Sendable>(tenant: TenantID, _ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        await acquire(tenant)
        defer { release(tenant) }
        return try await NIOThreadPool.singleton.runIfActive(body)
    }

    private func acquire(_ tenant: TenantID) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let free = state.withLock { state -> Bool in
                guard state.busy.contains(tenant) else {
                    state.busy.insert(tenant)
                    return true
                }
                state.waiting[tenant, default: []].append(continuation)
                return false
            }
            if free { continuation.resume() }
        }
    }

    /// Hands the tenant's slot to its next waiting request, or frees it.
    private func release(_ tenant: TenantID) {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard var queue = state.waiting[tenant], !queue.isEmpty else {
                state.busy.remove(tenant)
                state.waiting[tenant] = nil
                return nil
            }
            let next = queue.removeFirst()
            state.waiting[tenant] = queue.isEmpty ? nil : queue
            return next
        }
        next?.resume()
    }
}
