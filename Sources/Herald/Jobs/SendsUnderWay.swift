import Synchronization

/// Sends started by callback and not ended yet, for the task that started them to wait for.
final class SendsUnderWay: Sendable {
    private struct State {
        var count = 0
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    func begin() { state.withLock { $0.count += 1 } }

    /// `count` sends ended.
    func end(_ count: Int = 1) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.count -= count
            guard state.count == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns when every send begun has ended. One waiter at a time.
    func waitUntilNone() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let none = state.withLock { state -> Bool in
                guard state.count > 0 else { return true }
                state.waiter = continuation
                return false
            }
            if none { continuation.resume() }
        }
    }
}
