import Synchronization

/// A gate that opens once and stays open: ``wait()`` returns when (or as soon as) it is open.
public final class OneShotGate: Sendable {
    private struct State {
        var open = false
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Waits of ``waitUnlessCancelled()`` cancelled before their waiter was registered.
        var cancelled: Set<Int> = []
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    public init() {}

    public func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    public var isOpen: Bool { state.withLock { $0.open } }

    /// Returns once the gate is open.
    public func wait() async {
        let waiter = newWaiter()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            register(continuation, as: waiter)
        }
    }

    /// Returns once the gate is open, or as soon as the waiting task is cancelled.
    public func waitUnlessCancelled() async {
        let waiter = newWaiter()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                register(continuation, as: waiter)
            }
        } onCancel: {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let continuation = state.waiters.removeValue(forKey: waiter) { return continuation }
                // Not registered yet (its registration then returns at once), unless the gate
                // opened and resumed it already.
                if !state.open { state.cancelled.insert(waiter) }
                return nil
            }
            continuation?.resume()
        }
    }

    /// `operation`'s result, or nil when the gate opens first; the operation is then cancelled.
    /// For what a stop should not wait for: a store read that a store gone silent leaves waiting
    /// for its whole call timeout ends at once when cancelled.
    public func unlessOpened<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                await self.waitUnlessCancelled()
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }

    private func newWaiter() -> Int {
        state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
    }

    /// Resumes `continuation` at once if the gate is open (or its wait was cancelled already),
    /// else keeps it until ``open()`` (or the cancellation).
    private func register(_ continuation: CheckedContinuation<Void, Never>, as waiter: Int) {
        let now = state.withLock { state -> Bool in
            if state.open || state.cancelled.remove(waiter) != nil { return true }
            state.waiters[waiter] = continuation
            return false
        }
        if now { continuation.resume() }
    }
}
