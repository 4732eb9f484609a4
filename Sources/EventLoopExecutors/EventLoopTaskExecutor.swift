import NIOCore
import Synchronization

/// Runs Swift tasks on one NIO event loop.
///
/// Work that talks to a channel can run on the channel's loop: what it writes goes out without
/// waking the loop's thread, and the answer resumes it without waking another. Two uses:
///
/// - A caller that sends many notifications runs its tasks on the transport's event loops
///   (`TenantTransport.sendingExecutors`): a send then goes to a connection on the same loop
///   when one has room, so the request is written, answered and resumed without a thread
///   switch, and writes made in the same loop tick share one flush.
/// - Each PostgreSQL call runs on the loop whose connections it leases from
///   (`BoundedPostgresClient`): its statements are written, answered and their rows read there,
///   and the caller takes the result once.
///
/// Jobs wait in the executor's own queue (a ``LoopHandOff``), in the order they came, and one
/// loop task runs every job queued before it starts: a hundred sends answered in one read
/// resume their hundred tasks in one loop task, not in a hundred closures the loop allocates
/// and runs one by one. A job queued while they run waits for the next loop task, so the loop's
/// I/O is never held off by a chain of tasks resuming each other.
///
/// ```swift
/// await withTaskGroup(of: Void.self) { group in
///     for (index, executor) in transport.sendingExecutors.enumerated() {
///         group.addTask(executorPreference: executor) { await sendMany(part: index) }
///     }
/// }
/// ```
public final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    public let eventLoop: any EventLoop

    /// The jobs waiting for the loop.
    private let jobs = LoopHandOff<UnownedJob>()

    /// Runs tasks on `eventLoop`.
    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        if jobs.append(UnownedJob(job)) { eventLoop.execute { self.runQueued() } }
    }

    private func runQueued() {
        let executor = asUnownedTaskExecutor()
        jobs.runQueued { job in job.runSynchronously(on: executor) }
    }
}
