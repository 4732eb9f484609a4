import NIOCore

/// Runs Swift tasks on one NIO event loop.
///
/// Work that talks to a channel can run on the channel's loop: what it writes goes out without
/// waking the loop's thread, and the answer resumes it without waking another. Two uses:
///
/// - A caller that sends many notifications runs its tasks on the transport's event loops
///   (`TenantTransport.sendingExecutors`): a send then goes to a connection on the same loop
///   when one has room, so the request is written, answered and resumed without a thread
///   switch, and writes made in the same loop tick share one flush.
/// - Each PostgreSQL call runs on its leased connection's loop (`BoundedPostgresClient`): its
///   statements are written, answered and their rows read there, and the caller takes the
///   result once.
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

    /// Runs tasks on `eventLoop`.
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
