import HeraldStore
import Synchronization
import Testing

@Suite("Group commit: callers that wait and callers answered by callback share the writes")
struct GroupCommitTests {
    struct Refused: Error, Equatable {
        let request: Int
    }

    /// A write that records each batch, holds the first until ``open()``, and answers a request
    /// with ten times its value (refusing 13).
    final class HeldWrite: Sendable {
        private struct State {
            var batches: [[Int]] = []
            var gate: CheckedContinuation<Void, Never>?
            var held = true
        }
        private let state = Mutex(State())

        var batches: [[Int]] { state.withLock { $0.batches } }
        var isHolding: Bool { state.withLock { $0.gate != nil } }

        func open() {
            state.withLock { state in
                defer { state.gate = nil }
                return state.gate
            }?.resume()
        }

        func write(_ batch: [Int]) async -> [Result<Int, any Error>] {
            let hold = state.withLock { state -> Bool in
                state.batches.append(batch)
                defer { state.held = false }
                return state.held
            }
            if hold { await withCheckedContinuation { gate in state.withLock { $0.gate = gate } } }
            return batch.map { $0 == 13 ? .failure(Refused(request: 13)) : .success($0 * 10) }
        }
    }

    /// Answers by callback, collected for the test.
    final class Answers: Sendable {
        private let answers = Mutex<[Int: Result<Int, Refused>]>([:])
        var all: [Int: Result<Int, Refused>] { answers.withLock { $0 } }

        func callback(for request: Int) -> @Sendable (Result<Int, any Error>) -> Void {
            { result in
                let kept = result.mapError { ($0 as? Refused) ?? Refused(request: -1) }
                self.answers.withLock { $0[request] = kept }
            }
        }
    }

    private static func waitUntil(_ what: String, _ condition: () -> Bool) async {
        let end = ContinuousClock.now.advanced(by: .seconds(30))
        while !condition() {
            guard ContinuousClock.now < end else {
                Issue.record("timed out waiting: \(what)")
                return
            }
            await Task.yield()
        }
    }

    @Test("a callback starts a write; callers of both kinds arriving meanwhile go into the next one, a waiting caller writes it")
    func callbackLeads() async throws {
        let held = HeldWrite()
        let group = GroupCommit<Int, Int>(maxBatch: 100) { await held.write($0) }
        let answers = Answers()
        group.submit(0, answer: answers.callback(for: 0))
        await Self.waitUntil("the first write is held") { held.isHolding }
        // The first caller still waiting waits itself: it writes the next batch.
        let waiting = Task { try await group.submit(1) }
        await Self.waitUntil("the waiting caller queued") { group.waitingCount == 1 }
        for request in [2, 13, 4] { group.submit(request, answer: answers.callback(for: request)) }
        let alsoWaiting = Task { try await group.submit(5) }
        await Self.waitUntil("every caller queued") { group.waitingCount == 5 }
        held.open()

        #expect(try await waiting.value == 10)
        #expect(try await alsoWaiting.value == 50)
        await Self.waitUntil("every callback answered") { answers.all.count == 4 }
        #expect(answers.all == [0: .success(0), 2: .success(20), 13: .failure(Refused(request: 13)), 4: .success(40)])
        #expect(held.batches == [[0], [1, 2, 13, 4, 5]])
        #expect(group.waitingCount == 0)
    }

    @Test("a waiting caller's write hands over to callbacks: a task writes for them, up to the batch's bound each time")
    func waitingCallerHandsOverToCallbacks() async throws {
        let held = HeldWrite()
        let group = GroupCommit<Int, Int>(maxBatch: 3) { await held.write($0) }
        let answers = Answers()
        let leader = Task { try await group.submit(100) }
        await Self.waitUntil("the first write is held") { held.isHolding }
        for request in 1...7 { group.submit(request, answer: answers.callback(for: request)) }
        await Self.waitUntil("every callback queued") { group.waitingCount == 7 }
        held.open()

        #expect(try await leader.value == 1_000)
        await Self.waitUntil("every callback answered") { answers.all.count == 7 }
        #expect(answers.all == Dictionary(uniqueKeysWithValues: (1...7).map { ($0, .success($0 * 10)) }))
        #expect(held.batches == [[100], [1, 2, 3], [4, 5, 6], [7]])
        // Nothing is left writing: the next callback starts a write of its own.
        group.submit(8, answer: answers.callback(for: 8))
        await Self.waitUntil("the next callback answered") { answers.all[8] != nil }
        #expect(answers.all[8] == .success(80) && held.batches.last == [8])
    }
}
