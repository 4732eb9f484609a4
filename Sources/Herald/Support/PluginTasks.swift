import HeraldCore
import Synchronization

/// Runs and tracks the work plugins start after a send (webhook deliveries), so that shutdown
/// can wait for it. The only unstructured tasks Herald makes; each ends by itself.
public final class PluginTasks: PluginTaskRunner {
    private struct State {
        var next = 0
        var running: [Int: Task<Void, Never>] = [:]
        var closed = false
    }

    private let state = Mutex(State())

    public init() {}

    public func run(_ operation: @escaping @Sendable () async -> Void) {
        state.withLock { state in
            guard !state.closed else { return }
            let id = state.next
            state.next += 1
            // Created under the lock: the task's own removal waits until it is registered.
            state.running[id] = Task {
                await operation()
                self.finished(id)
            }
        }
    }

    /// How many tasks are running.
    public var count: Int { state.withLock { $0.running.count } }

    /// Waits until every task started so far (and any they start) has ended.
    public func waitForAll() async {
        while true {
            let tasks = state.withLock { Array($0.running.values) }
            if tasks.isEmpty { return }
            for task in tasks { await task.value }
        }
    }

    /// Refuses new work, cancels running work and waits for it to end.
    public func close() async {
        let tasks = state.withLock { state in
            state.closed = true
            return Array(state.running.values)
        }
        for task in tasks { task.cancel() }
        await waitForAll()
    }

    private func finished(_ id: Int) {
        _ = state.withLock { $0.running.removeValue(forKey: id) }
    }
}
