import HeraldCore
import Synchronization

/// A counting semaphore for async code: at most `permits` holders at once, waiters served in
/// order of arrival.
final class PermitPool: Sendable {
    private struct State {
        var available: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        var head = 0

        mutating func nextWaiter() -> CheckedContinuation<Void, Never>? {
            guard head < waiters.count else { return nil }
            let waiter = waiters[head]
            head += 1
            if head >= 1024, head * 2 >= waiters.count {
                waiters.removeFirst(head)
                head = 0
            }
            return waiter
        }
    }

    private let state: Mutex<State>

    init(permits: Int) {
        precondition(permits > 0, "a permit pool needs at least one permit")
        state = Mutex(State(available: permits))
    }

    /// Waits for a permit. Every `acquire` must be followed by one ``release()``.
    nonisolated(nonsending) func acquire() async {
        let taken = state.withLock { state -> Bool in
            guard state.available > 0 else { return false }
            state.available -= 1
            return true
        }
        if taken { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.available > 0 {
                    state.available -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Gives a permit back: to the longest waiter, or to the pool.
    func release() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.nextWaiter() { return waiter }
            state.available += 1
            return nil
        }
        waiter?.resume()
    }
}

/// One ``PermitPool`` per tenant, made at the tenant's first use.
final class TenantPermits: Sendable {
    private let pools = Mutex<[TenantID: PermitPool]>([:])
    private let permitsPerTenant: Int

    init(permitsPerTenant: Int) {
        self.permitsPerTenant = permitsPerTenant
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
