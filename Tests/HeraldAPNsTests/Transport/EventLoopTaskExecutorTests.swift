import EventLoopExecutors
import NIOCore
import NIOPosix
import Synchronization
import Testing

@Suite("Tasks on an event loop")
struct EventLoopTaskExecutorTests {
    /// Tasks resumed from other threads, many at once, each go on on the executor's loop, and
    /// every one of them ends.
    @Test func tasksResumedFromOtherThreadsRunOnTheLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let (loop, other) = (loops[0], loops[1])
        let executor = EventLoopTaskExecutor(loop)
        let offLoop = Locked(0)
        let ended = await withTaskGroup(of: Bool.self) { tasks in
            for _ in 0..<500 {
                tasks.addTask(executorPreference: executor) {
                    for _ in 0..<4 {
                        // Resumed on the other loop's thread.
                        await withCheckedContinuation { continuation in
                            other.execute { continuation.resume() }
                        }
                        if !loop.inEventLoop { offLoop.value.withLock { $0 += 1 } }
                    }
                    return true
                }
            }
            return await tasks.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(ended == 500)
        #expect(offLoop.value.withLock { $0 } == 0)
        try await group.shutdownGracefully()
    }

    /// A task that keeps yielding does not hold off the loop's other work: a job queued while
    /// the queued jobs run waits for the loop's next task.
    @Test func aYieldingTaskLetsTheLoopsOtherWorkIn() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let executor = EventLoopTaskExecutor(loop)
        let seen = Locked(false)
        let yields = await Task(executorPreference: executor) { () -> Int in
            loop.execute { seen.value.withLock { $0 = true } }
            var yields = 0
            while !seen.value.withLock({ $0 }), yields < 10_000 {
                await Task.yield()
                yields += 1
            }
            return yields
        }.value
        #expect(seen.value.withLock { $0 })
        #expect(yields < 10_000)
        try await group.shutdownGracefully()
    }

    /// Jobs queued together run in the order they came.
    @Test func queuedJobsRunInOrder() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let executor = EventLoopTaskExecutor(loop)
        let order = Locked<[Int]>([])
        // Each task is started from the loop itself, one after another, so its first job is
        // queued in that order while the loop is busy starting the next.
        let started = loop.submit {
            (0..<200).map { index in
                Task(executorPreference: executor) { order.value.withLock { $0.append(index) } }
            }
        }
        for task in try await started.get() { await task.value }
        #expect(order.value.withLock { $0 } == Array(0..<200))
        try await group.shutdownGracefully()
    }
}

/// A value the test's tasks and the loop share.
private final class Locked<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
}
