import NIOCore

/// Runs Swift tasks on one NIO event loop.
///
/// A caller that sends many notifications can run its tasks on the transport's event loops:
/// a send then goes to a connection on the same loop when one has room (see
/// ``TenantTransport/sendingExecutors``), so the request is written, answered and resumed
/// without a thread switch, and writes made in the same loop tick share one flush.
///
/// ```swift
/// await withTaskGroup(of: Void.self) { group in
///     for (index, executor) in transport.sendingExecutors.enumerated() {
///         group.addTask(executorPreference: executor) { await sendMany(part: index) }
///     }
/// }
/// ```
public final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    let eventLoop: any EventLoop

    /// Runs tasks on `eventLoop` (for senders through the router, on the loops its transports use).
    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
