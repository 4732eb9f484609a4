import Synchronization

/// Group commit: callers submit one request each and wait for its answer; the requests that
/// arrive while a write is under way are written together in the next one. The first caller
/// that finds no write under way writes (in its own task: no task is started here), then hands
/// the writing over to the first caller that arrived meanwhile, which writes that batch. Callers
/// that do not wait (``submit(_:answer:)``, answered by callback) never write: a task is started
/// to write for them.
///
/// Each ``submit(_:)`` returns only after the write holding its request ended, so a caller that
/// needs its change durable before going on (an outcome recorded, an item marked on the wire)
/// still waits for it, while the store sees one statement for many changes instead of one each.
///
/// ```swift
/// let commits = GroupCommit<Int, Bool>(maxBatch: 1_000) { indexes in
///     // one store call for all of them; one answer per request, in order
/// }
/// let marked = try await commits.submit(17)
/// ```
public final class GroupCommit<Request: Sendable, Answer: Sendable>: Sendable {
    /// Writes a batch (never empty) and answers each request, in the order given (one result each).
    public typealias Write = @Sendable ([Request]) async -> [Result<Answer, any Error>]

    private enum Wake: Sendable {
        case done(Result<Answer, any Error>)
        /// Write the waiting requests (this one among them): no write is under way.
        case lead
    }

    /// How a waiting request hears back.
    private enum Reply: Sendable {
        /// A caller suspended in ``submit(_:)``: woken with its answer, or to write.
        case resume(CheckedContinuation<Wake, Never>)
        /// ``submit(_:answer:)``: called with its answer; it never writes itself.
        case call(@Sendable (Result<Answer, any Error>) -> Void)
    }

    private struct Waiter: Sendable {
        var id: UInt64
        var request: Request
        var reply: Reply
    }

    private struct State: Sendable {
        var waiting: [Waiter] = []
        /// True while one caller writes; the others wait for it to hand over.
        var writing = false
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())
    private let maxBatch: Int
    private let write: Write

    /// - Parameters:
    ///   - maxBatch: the most requests written at once (the rest wait for the next write).
    ///   - write: writes a batch; must answer every request (a missing answer is an error).
    public init(maxBatch: Int = 1_000, write: @escaping Write) {
        self.maxBatch = max(1, maxBatch)
        self.write = write
    }

    /// Callers waiting for a write (for tests).
    public var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// Submits one request and returns its answer once the write holding it ended.
    public func submit(_ request: Request) async throws -> Answer {
        let id = state.withLock { state -> UInt64 in
            defer { state.nextID &+= 1 }
            return state.nextID
        }
        let wake = await withCheckedContinuation { (continuation: CheckedContinuation<Wake, Never>) in
            let lead = state.withLock { state -> Bool in
                state.waiting.append(Waiter(id: id, request: request, reply: .resume(continuation)))
                guard !state.writing else { return false }
                state.writing = true
                return true
            }
            if lead { continuation.resume(returning: .lead) }
        }
        switch wake {
        case .done(let result): return try result.get()
        case .lead: return try await writeWaiting(leader: id).get()
        }
    }

    /// Submits one request without waiting: `answer` is called exactly once, with its answer, once
    /// the write holding it ended (on the writing task's thread: it must not block). When no write
    /// is under way, a task is started to write; the requests that arrive meanwhile go together
    /// into the next write, as with ``submit(_:)``.
    public func submit(_ request: Request, answer: @escaping @Sendable (Result<Answer, any Error>) -> Void) {
        let lead = state.withLock { state -> Bool in
            state.waiting.append(Waiter(id: state.nextID, request: request, reply: .call(answer)))
            state.nextID &+= 1
            guard !state.writing else { return false }
            state.writing = true
            return true
        }
        if lead { Task { _ = await writeWaiting(leader: nil) } }
    }

    /// Writes the waiting requests (the leader's among them, up to ``maxBatch``), answers the
    /// other callers, and hands the writing over to the first caller still waiting (or ends it).
    /// - Parameter leader: the caller of ``submit(_:)`` that writes, or nil for a task started to
    ///   write for callers of ``submit(_:answer:)``.
    private func writeWaiting(leader: UInt64?) async -> Result<Answer, any Error> {
        let batch = state.withLock { state -> [Waiter] in
            // The leader is always written: it is first unless a handed-over batch put it later.
            guard state.waiting.count > maxBatch else {
                defer { state.waiting.removeAll(keepingCapacity: true) }
                return state.waiting
            }
            var batch = Array(state.waiting.prefix(maxBatch))
            var rest = Array(state.waiting.dropFirst(maxBatch))
            if let leader, !batch.contains(where: { $0.id == leader }), let at = rest.firstIndex(where: { $0.id == leader }) {
                batch.append(rest.remove(at: at))
            }
            state.waiting = rest
            return batch
        }
        let answers = await write(batch.map(\.request))
        let next = state.withLock { state -> Waiter? in
            guard let first = state.waiting.first else {
                state.writing = false
                return nil
            }
            return first
        }
        var own: Result<Answer, any Error> = .failure(GroupCommitError.unanswered)
        for (offset, waiter) in batch.enumerated() {
            let result = offset < answers.count ? answers[offset] : .failure(GroupCommitError.unanswered)
            switch waiter.reply {
            case .resume where waiter.id == leader: own = result  // its continuation already woke it to lead
            case .resume(let continuation): continuation.resume(returning: .done(result))
            case .call(let answer): answer(result)
            }
        }
        switch next?.reply {
        case .resume(let continuation): continuation.resume(returning: .lead)
        case .call: Task { _ = await writeWaiting(leader: nil) }
        case nil: break
        }
        return own
    }
}

/// A write that gave no answer for a request (a bug in the write closure, reported, never trapped).
public struct GroupCommitError: Error, CustomStringConvertible, Sendable {
    public let description: String
    static let unanswered = GroupCommitError(description: "the group write gave no answer for this request")
}
