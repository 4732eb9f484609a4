import NIOCore
import NIOPosix
import Synchronization

/// Gathers what is added on an event loop during one pass of its work and hands it to
/// `handle` together, once, in a task queued on the loop of the first addition (it runs after the
/// loop has dispatched the events of the current pass: one read that carries many answers ends
/// many sends, and they are handled as one; what another loop adds meanwhile joins them).
/// Added off any event loop, an element is handled at once, alone.
///
/// A job's driving task ends its sends through this (``JobCallbackSender``): on its own, each
/// ended send would take the runner's, the permit pool's, the feed's and the sends-under-way locks
/// and could wake the driving task; gathered, each of those happens once for all the answers of a
/// read, which saves `herald serve` CPU on every batch notification.
///
/// Bounded by what is added: the caller adds one element per send it holds a permit for, so at
/// most its permits wait here. The queued task always runs: NIO runs a loop's queued tasks
/// even while it shuts down, and a task queued from the loop itself cannot be refused.
final class LoopTickGathering<Element: Sendable>: Sendable {
    private struct State {
        var gathered: [Element] = []
        /// A task that hands `gathered` over is queued.
        var queued = false
    }

    private let state = Mutex(State())
    private let handle: @Sendable (inout [Element]) -> Void

    /// - Parameter handle: gets the elements gathered; it may move them out of the array (which
    ///   it gets to change so that it need not copy them).
    init(handle: @escaping @Sendable (inout [Element]) -> Void) {
        self.handle = handle
    }

    func add(_ element: consuming Element) {
        guard let loop = MultiThreadedEventLoopGroup.currentEventLoop else {
            var alone = [element]
            handle(&alone)
            return
        }
        // Moved in, not copied (the lock's closure would copy what it captures).
        var moving = Optional(element)
        let queue = state.withLock { state -> Bool in
            if let element = moving.take() { state.gathered.append(element) }
            defer { state.queued = true }
            return !state.queued
        }
        guard queue else { return }
        loop.execute { self.handOver() }
    }

    private func handOver() {
        var gathered = state.withLock { state -> [Element] in
            state.queued = false
            var taken: [Element] = []
            swap(&taken, &state.gathered)
            state.gathered.reserveCapacity(taken.count)
            return taken
        }
        if !gathered.isEmpty { handle(&gathered) }
    }
}
