import HeraldCore
import Synchronization

/// A counting semaphore for async code: at most `permits` holders at once, waiters served in
/// order of arrival.
///
/// A task that starts many short holds in a row (a job's driving task) takes several permits at
/// once (``acquire(upTo:)``): when none is free it is woken once that many are, instead of once
/// for each hold that ends, and starts that many sends in one turn.
final class PermitPool: Sendable {
    private struct Waiter {
        let continuation: CheckedContinuation<Int, Never>
        /// Woken with this many permits, once they are free.
        let wanted: Int
    }

    private struct State {
        var available: Int
        var waiters: [Waiter] = []
        var head = 0

        var hasWaiters: Bool { head < waiters.count }

        /// The waiters at the head whose wanted permits are free now, each given them: the first
        /// apart, so that the usual case (one served) makes no array.
        mutating func servable() -> Served {
            var served = Served()
            while head < waiters.count, available >= waiters[head].wanted {
                available -= waiters[head].wanted
                served.add(waiters[head].continuation, waiters[head].wanted)
                head += 1
            }
            if head == waiters.count {
                waiters.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 1024, head * 2 >= waiters.count {
                waiters.removeFirst(head)
                head = 0
            }
            return served
        }
    }

    /// Waiters served by one release, to resume once the lock is released.
    private struct Served {
        private var first: (CheckedContinuation<Int, Never>, Int)?
        private var more: [(CheckedContinuation<Int, Never>, Int)] = []

        mutating func add(_ waiter: CheckedContinuation<Int, Never>, _ permits: Int) {
            if first == nil { first = (waiter, permits) } else { more.append((waiter, permits)) }
        }

        func resume() {
            guard let first else { return }
            first.0.resume(returning: first.1)
            for (waiter, permits) in more { waiter.resume(returning: permits) }
        }
    }

    private let state: Mutex<State>
    /// The pool's size.
    let permits: Int

    init(permits: Int) {
        precondition(permits > 0, "a permit pool needs at least one permit")
        self.permits = permits
        state = Mutex(State(available: permits))
    }

    /// Waits for a permit. Every `acquire` must be followed by one ``release(_:)``.
    nonisolated(nonsending) func acquire() async {
        _ = await acquire(upTo: 1)
    }

    /// Takes up to `most` permits: those free now (at least one) when no one waits, or else waits
    /// in line until `most` are free (at most the pool's size) and takes them.
    /// - Returns: how many were taken, 1 to `most`; each is given back by ``release(_:)``.
    nonisolated(nonsending) func acquire(upTo most: Int) async -> Int {
        let wanted = min(max(1, most), permits)
        let taken = state.withLock { state -> Int in
            guard !state.hasWaiters, state.available > 0 else { return 0 }
            let taken = min(state.available, wanted)
            state.available -= taken
            return taken
        }
        if taken > 0 { return taken }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
            let now = state.withLock { state -> Int in
                if !state.hasWaiters, state.available > 0 {
                    let taken = min(state.available, wanted)
                    state.available -= taken
                    return taken
                }
                state.waiters.append(Waiter(continuation: continuation, wanted: wanted))
                return 0
            }
            if now > 0 { continuation.resume(returning: now) }
        }
    }

    /// Permits free now, and tasks waiting for some.
    var counts: (available: Int, waiting: Int) {
        state.withLock { ($0.available, $0.waiters.count - $0.head) }
    }

    /// Gives `count` permits back: to the longest waiters whose wanted permits are then free, or
    /// to the pool.
    func release(_ count: Int = 1) {
        guard count > 0 else { return }
        state.withLock { state -> Served in
            state.available += count
            return state.hasWaiters ? state.servable() : Served()
        }.resume()
    }
}

/// One ``PermitPool`` per tenant, made at the tenant's first use.
final class TenantPermits: Sendable {
    private let pools = Mutex<[TenantID: PermitPool]>([:])
    private let permitsPerTenant: Int

    init(permitsPerTenant: Int) {
        self.permitsPerTenant = permitsPerTenant
    }

    /// The tenant's pool, if it has one (nothing is made).
    func existingPool(for tenant: TenantID) -> PermitPool? {
        pools.withLock { $0[tenant] }
    }

    func pool(for tenant: TenantID) -> PermitPool {
        pools.withLock { pools in
            if let pool = pools[tenant] { return pool }
            let pool = PermitPool(permits: permitsPerTenant)
            pools[tenant] = pool
            return pool
        }
    }
}
