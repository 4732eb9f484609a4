import Synchronization

/// Work handed to one event loop from other threads, run there in batches.
///
/// Any thread may ``append(_:)``; the one that finds no run scheduled is told to schedule one
/// (one `eventLoop.execute` for everything that arrives before it starts, not a closure and a
/// wake-up per element). That run, on the loop, calls ``runQueued(_:)``, which takes every
/// element queued so far in one lock and hands each to its body in the order they came. An
/// element appended while they run waits for the next run, so the loop's I/O comes between.
///
/// Two arrays trade places, so a steady stream allocates nothing: the emptied array of one run
/// is kept, with its room, for the run after the next.
///
/// ```swift
/// func submit(_ request: Request) {
///     if handOff.append(request) { eventLoop.execute { self.runHandedOff() } }
/// }
///
/// private func runHandedOff() {
///     handOff.runQueued { request in start(request) }
/// }
/// ```
///
/// The queue has no bound of its own: its owner bounds what it appends (a connection appends a
/// request only for a stream it has free; an executor holds one job per suspended task).
public struct LoopHandOff<Element: Sendable>: ~Copyable, Sendable {
    @usableFromInline
    let state = Mutex(State())

    @usableFromInline
    struct State: ~Copyable {
        @usableFromInline var queued: [Element] = []
        @usableFromInline var spare: [Element] = []
        @usableFromInline var scheduled = false

        @usableFromInline
        init() {}
    }

    public init() {}

    /// Queues `element`. Returns `true` when no run is scheduled: the caller must then schedule
    /// one on the loop, which calls ``runQueued(_:)``.
    @inlinable
    public func append(_ element: Element) -> Bool {
        state.withLock { state in
            state.queued.append(element)
            guard !state.scheduled else { return false }
            state.scheduled = true
            return true
        }
    }

    /// Runs `body` on every element queued before this call, in order. Called by the run the
    /// caller of ``append(_:)`` scheduled, on the loop.
    @inlinable
    public func runQueued(_ body: (Element) -> Void) {
        var taken = state.withLock { state in
            state.scheduled = false
            var taken = state.spare
            state.spare = []
            swap(&taken, &state.queued)
            return taken
        }
        for element in taken { body(element) }
        taken.removeAll(keepingCapacity: true)
        state.withLock { state in
            if state.spare.capacity < taken.capacity { state.spare = taken }
        }
    }
}
