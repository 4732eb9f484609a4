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
/// Jobs wait in the executor's own queue, in the order they came, and one loop task runs every
/// job queued before it starts: a hundred sends answered in one read resume their hundred tasks
/// in one loop task, not in a hundred closures the loop allocates and runs one by one. A job
/// queued while they run waits for the next loop task, so the loop's I/O is never held off by
/// a chain of tasks resuming each other.
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

    /// The jobs waiting for the loop, whether a loop task to run them is scheduled, and an
    /// empty array whose storage the next run takes over (two arrays trade places, so a
    /// steady stream of jobs allocates nothing).
    private let queue = Mutex(Queue())

    private struct Queue: ~Copyable {
        var jobs: [UnownedJob] = []
        var spare: [UnownedJob] = []
        var scheduled = false
    }

    /// Runs tasks on `eventLoop`.
    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let schedule = queue.withLock { queue in
            queue.jobs.append(job)
            guard !queue.scheduled else { return false }
            queue.scheduled = true
            return true
        }
        if schedule { eventLoop.execute { self.runQueued() } }
    }

    /// Runs the jobs queued so far, on the loop: they are taken in one lock, and the array is
    /// handed back empty (with its storage) for the run after the next.
    private func runQueued() {
        var running = queue.withLock { queue in
            queue.scheduled = false
            var taken = queue.spare
            swap(&taken, &queue.jobs)
            queue.spare = []
            return taken
        }
        let executor = asUnownedTaskExecutor()
        for job in running { job.runSynchronously(on: executor) }
        running.removeAll(keepingCapacity: true)
        queue.withLock { queue in
            if queue.spare.capacity < running.capacity { queue.spare = running }
        }
    }
}
