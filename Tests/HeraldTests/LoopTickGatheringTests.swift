import Dispatch
@testable import Herald
import NIOCore
import NIOPosix
import Synchronization
import Testing

@Suite("Gathering per event-loop pass")
struct LoopTickGatheringTests {
    /// What the handler was given, call by call.
    final class Calls: Sendable {
        let calls = Mutex<[[Int]]>([])
        func record(_ batch: [Int]) { calls.withLock { $0.append(batch) } }
        var all: [[Int]] { calls.withLock { $0 } }
    }

    @Test("off any event loop each element is handled at once, alone")
    func offLoop() {
        let calls = Calls()
        let gathering = LoopTickGathering<Int> { calls.record($0) }
        gathering.add(1)
        #expect(calls.all == [[1]])
        gathering.add(2)
        #expect(calls.all == [[1], [2]])
    }

    @Test("what one pass of a loop adds is handled once, after that pass, in order; the next pass is a new call")
    func onePassOneCall() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let calls = Calls()
        let gathering = LoopTickGathering<Int> { calls.record($0) }
        let seenDuringPass = try await loop.submit { () -> [[Int]] in
            for element in 0..<50 { gathering.add(element) }
            return calls.all  // nothing handled while the pass is still adding
        }.get()
        #expect(seenDuringPass.isEmpty)
        // The handing over was queued behind the pass: a task queued after it sees it done.
        try await loop.submit {}.get()
        #expect(calls.all == [Array(0..<50)])
        try await loop.submit { gathering.add(50) }.get()
        try await loop.submit {}.get()
        #expect(calls.all == [Array(0..<50), [50]])
        try await group.shutdownGracefully()
    }

    @Test("additions on two loops while one hand-over is queued are all handled, none twice")
    func twoLoops() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let calls = Calls()
        let gathering = LoopTickGathering<Int> { calls.record($0) }
        let loops = [group.next(), group.next()]
        var futures: [EventLoopFuture<Void>] = []
        for round in 0..<200 {
            let loop = loops[round % 2]
            futures.append(loop.submit { for element in 0..<5 { gathering.add(round * 5 + element) } })
        }
        for future in futures { try await future.get() }
        for loop in loops { try await loop.submit {}.get() }
        for loop in loops { try await loop.submit {}.get() }
        let handled = calls.all.flatMap { $0 }
        #expect(handled.count == 1_000)
        #expect(Set(handled) == Set(0..<1_000))
        #expect(!calls.all.contains { $0.isEmpty }, "no call without elements")
        try await group.shutdownGracefully()
    }

    @Test("a hand-over queued when its loop shuts down still runs")
    func shutdownRunsTheHandOver() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let calls = Calls()
        let gathering = LoopTickGathering<Int> { calls.record($0) }
        // In one pass: the addition queues its hand-over, then the group is told to shut down.
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            loop.execute {
                gathering.add(7)
                group.shutdownGracefully(queue: .global()) { error in
                    if let error { continuation.resume(throwing: error) } else { continuation.resume() }
                }
            }
        }
        #expect(calls.all == [[7]])
    }
}
