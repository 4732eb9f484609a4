import HeraldCore
import NIOCore
import Testing

@testable import HeraldAPNs

@Suite("ConnectionPoolStateMachine")
struct ConnectionPoolStateMachineTests {
    typealias Machine = ConnectionPoolStateMachine<Int>
    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)
    var later: NIODeadline { t0 + .seconds(30) }

    func machine(connections: Int = 2, maxQueued: Int = 100, backoff: Backoff = Backoff(), openNextAt: Int? = nil) -> Machine {
        Machine(
            configuration: .init(maxConnections: connections, maxQueued: maxQueued, backoff: backoff, openNextAt: openNextAt),
            random: SplitMix64(seed: 42))
    }

    /// Submits `request` and returns the connection it runs on now (nil: it waits or failed);
    /// `opened` gets the connection the submit opened, if any.
    func place(_ request: Int, in pool: inout Machine, local: Int? = nil, opened: inout Int?) -> Int? {
        switch pool.submit(request, deadline: later, now: t0, local: local) {
        case .execute(_, let id):
            return id
        case .executeAndConnect(_, let id, .connect(let next)):
            opened = next
            return id
        case .executeAndConnect, .enqueued, .fail:
            return nil
        }
    }

    /// The requests and connection of the one `execute` action in `actions`.
    func executed(_ actions: [Machine.Action]) -> (requests: [Int], connection: Int)? {
        for action in actions {
            if case .execute(let requests, let id) = action { return (requests, id) }
        }
        return nil
    }

    func failed(_ actions: [Machine.Action]) -> (requests: [Int], failure: Machine.Failure)? {
        for action in actions {
            if case .fail(let requests, let failure) = action { return (requests, failure) }
        }
        return nil
    }

    @Test("connections open lazily, up to the limit, and take the queue when ready")
    func lazyConnections() {
        var pool = machine()
        guard case .enqueued(.connect(let first)) = pool.submit(1, deadline: later, now: t0) else {
            Issue.record("expected a first connection")
            return
        }
        guard case .enqueued(.connect(let second)) = pool.submit(2, deadline: later, now: t0) else {
            Issue.record("expected a second connection")
            return
        }
        guard case .enqueued(nil) = pool.submit(3, deadline: later, now: t0) else {
            Issue.record("expected no third connection")
            return
        }
        #expect(first != second)
        // A token connection allows one stream until the first token is accepted.
        #expect(executed(pool.connectionReady(first, maxStreams: 1, now: t0))?.requests == [1])
        #expect(executed(pool.connectionReady(second, maxStreams: 10, now: t0))?.requests == [2, 3])
        #expect(pool.waiters.isEmpty)
    }

    @Test("a cancelled waiter leaves the queue: its place is free for another, and it is never executed")
    func removeWaiter() {
        var pool = machine(connections: 1, maxQueued: 2)
        guard case .enqueued(.connect(let id)) = pool.submit(1, deadline: later, now: t0) else {
            Issue.record("expected a connection")
            return
        }
        _ = pool.submit(2, deadline: later, now: t0)
        guard case .fail(3, .queueFull) = pool.submit(3, deadline: later, now: t0) else {
            Issue.record("expected a full queue")
            return
        }
        #expect(pool.removeWaiter(where: { $0 == 1 }) == 1)
        #expect(pool.removeWaiter(where: { $0 == 1 }) == nil)
        guard case .enqueued = pool.submit(4, deadline: later, now: t0) else {
            Issue.record("expected the freed place to take 4")
            return
        }
        #expect(executed(pool.connectionReady(id, maxStreams: 10, now: t0))?.requests == [2, 4])
    }

    @Test("a request goes to the connection with room that carries the fewest requests")
    func fewestRequests() {
        var pool = machine()
        _ = pool.submit(0, deadline: later, now: t0)
        _ = pool.submit(1, deadline: later, now: t0)
        let a = pool.connections[0].id
        let b = pool.connections[1].id
        _ = pool.connectionReady(a, maxStreams: 3, now: t0)  // takes 0 and 1
        _ = pool.connectionReady(b, maxStreams: 4, now: t0)
        var placed: [Int: Int] = [:]
        for request in 2..<7 {
            guard case .execute(_, let id) = pool.submit(request, deadline: later, now: t0) else {
                Issue.record("expected request \(request) to run")
                return
            }
            placed[id, default: 0] += 1
        }
        // a: 3 max, 2 used; b: 4 max. b takes two (0 and 1 against a's 2), a its last stream on
        // the tie (the first of equals), then b the rest: b gets 4, a gets 1.
        #expect(placed[b] == 4)
        #expect(placed[a] == 1)
        guard case .enqueued(nil) = pool.submit(7, deadline: later, now: t0) else {
            Issue.record("expected the full pool to queue")
            return
        }
    }

    @Test("the caller's own event loop's connection is preferred while it carries at most twice the least loaded's requests, plus one")
    func localConnectionPreferred() {
        var pool = machine()
        _ = pool.submit(0, deadline: later, now: t0)
        _ = pool.submit(1, deadline: later, now: t0)
        let a = pool.connections[0].id
        let b = pool.connections[1].id
        _ = pool.connectionReady(a, maxStreams: 10, now: t0)  // takes 0 and 1
        _ = pool.connectionReady(b, maxStreams: 10, now: t0)
        var opened: Int? = nil
        // a carries 2 against b's 0 (at most 1 allowed): b. Then 2 against 1 (3): a, twice.
        // Then 4 against 1: b again.
        let placed = (2...5).map { place($0, in: &pool, local: a, opened: &opened) }
        #expect(placed == [b, a, a, b])
        #expect(opened == nil)
        // A full local connection is passed over whatever it carries.
        for request in 6..<20 { _ = place(request, in: &pool, local: a, opened: &opened) }
        #expect(pool.connections.allSatisfy { $0.spare == 0 })
    }

    @Test("sustained sends open the next connection once every open one carries openNextAt requests; light ones keep one")
    func openNextWhenBusy() {
        var pool = machine(openNextAt: 4)
        guard case .enqueued(.connect(let a)) = pool.submit(0, deadline: later, now: t0) else {
            Issue.record("expected a first connection")
            return
        }
        #expect(executed(pool.connectionReady(a, maxStreams: 100, now: t0))?.requests == [0])
        var opened: Int? = nil
        // Below the threshold nothing opens; the request that makes a carry 4 opens b.
        #expect([1, 2].map { place($0, in: &pool, opened: &opened) } == [a, a])
        #expect(opened == nil)
        #expect(place(3, in: &pool, opened: &opened) == a)
        guard let b = opened else {
            Issue.record("expected a second connection once a carries 4")
            return
        }
        #expect(b != a)
        // While b connects, a takes the requests and nothing more opens.
        opened = nil
        #expect(place(4, in: &pool, opened: &opened) == a)
        #expect(opened == nil)
        // b is ready on a token credential: one stream until a token is accepted. It takes the
        // next request although a has 95 streams spare (by spare streams it never would, and
        // its limit would never rise).
        #expect(pool.connectionReady(b, maxStreams: 1, now: t0).isEmpty)
        #expect(place(5, in: &pool, opened: &opened) == b)
        #expect(place(6, in: &pool, opened: &opened) == a)
        _ = pool.maxStreamsChanged(b, maxStreams: 100)
        // Now b carries the fewest: it takes requests until the two are even; the limit of two
        // connections holds however busy both are.
        let placed = (7...16).map { place($0, in: &pool, opened: &opened) }
        #expect(placed.filter { $0 == b }.count == 7)
        #expect(placed.filter { $0 == a }.count == 3)
        #expect(opened == nil)
        #expect(pool.connections.count == 2)
    }

    @Test("without openNextAt a second connection opens only when the first is full")
    func openNextOnlyWhenFull() {
        var pool = machine(connections: 2)
        guard case .enqueued(.connect(let a)) = pool.submit(0, deadline: later, now: t0) else {
            Issue.record("expected a first connection")
            return
        }
        _ = pool.connectionReady(a, maxStreams: 50, now: t0)
        var opened: Int? = nil
        let placed = (1..<50).map { place($0, in: &pool, opened: &opened) }
        #expect(placed.allSatisfy { $0 == a })
        #expect(opened == nil && pool.connections.count == 1)
        guard case .enqueued(.connect) = pool.submit(50, deadline: later, now: t0) else {
            Issue.record("expected a second connection once the first is full")
            return
        }
    }


    @Test("a full queue fails at once (backpressure)")
    func queueFull() {
        var pool = machine(connections: 1, maxQueued: 2)
        _ = pool.submit(1, deadline: later, now: t0)
        _ = pool.submit(2, deadline: later, now: t0)
        guard case .fail(3, .queueFull) = pool.submit(3, deadline: later, now: t0) else {
            Issue.record("expected queueFull")
            return
        }
        #expect(pool.waiters.count == 2)
    }

    @Test("waiters past their deadline fail on the tick; the others stay")
    func deadlines() {
        var pool = machine(connections: 1)
        _ = pool.submit(1, deadline: t0 + .seconds(1), now: t0)
        _ = pool.submit(2, deadline: t0 + .seconds(10), now: t0)
        _ = pool.submit(3, deadline: t0 + .seconds(2), now: t0)
        let result = failed(pool.tick(now: t0 + .seconds(5)))
        #expect(result?.requests == [1, 3])
        #expect(result?.failure == .timedOut)
        #expect(pool.waiters.map(\.request) == [2])
    }

    @Test("a handed-back request runs first, beyond the queue bound, within its deadline")
    func requeue() {
        var pool = machine(connections: 1, maxQueued: 1)
        _ = pool.submit(1, deadline: later, now: t0)
        guard case .enqueued = pool.requeue(9, deadline: later, now: t0) else {
            Issue.record("expected the requeue to wait")
            return
        }
        #expect(pool.waiters.map(\.request) == [9, 1])
        guard case .fail(8, .timedOut) = pool.requeue(8, deadline: t0, now: t0) else {
            Issue.record("expected an expired requeue to fail")
            return
        }
        let id = pool.connections[0].id
        #expect(executed(pool.connectionReady(id, maxStreams: 1, now: t0))?.requests == [9])
        guard case .execute(1, id) = pool.requestFinished(on: id, answered: true, now: t0) else {
            Issue.record("expected the next waiter on the freed stream")
            return
        }
    }

    @Test("a lower stream limit holds new requests until streams free up")
    func limitDrop() {
        var pool = machine(connections: 1)
        _ = pool.submit(0, deadline: later, now: t0)
        let id = pool.connections[0].id
        _ = pool.connectionReady(id, maxStreams: 5, now: t0)
        for request in 1..<5 { _ = pool.submit(request, deadline: later, now: t0) }
        #expect(pool.maxStreamsChanged(id, maxStreams: 2).isEmpty)
        _ = pool.submit(5, deadline: later, now: t0)
        guard case .none = pool.requestFinished(on: id, answered: true, now: t0) else {
            Issue.record("4 in flight with a limit of 2: nothing may start")
            return
        }
        _ = pool.requestFinished(on: id, answered: true, now: t0)
        _ = pool.requestFinished(on: id, answered: true, now: t0)
        guard case .execute(5, id) = pool.requestFinished(on: id, answered: true, now: t0) else {
            Issue.record("1 in flight with a limit of 2: the waiter starts")
            return
        }
        #expect(executed(pool.maxStreamsChanged(id, maxStreams: 2)) == nil)
    }

    @Test("failed connects back off exponentially with jitter, and the queue learns of the failure")
    func backoff() {
        let policy = Backoff(base: .milliseconds(100), maximum: .seconds(1), jitter: 0.5)
        var pool = machine(connections: 1, backoff: policy)
        _ = pool.submit(1, deadline: later, now: t0)
        let first = pool.connections[0].id
        // The first failed connect is tried again after its backoff; the waiter keeps its place.
        let retry = pool.connectionClosed(first, failed: true, now: t0)
        #expect(failed(retry) == nil)
        guard case .connectAfter(let second, let wait)? = retry.first, retry.count == 1 else {
            Issue.record("expected one delayed connect after the first failure, got \(retry)")
            return
        }
        #expect(wait.nanoseconds <= 100_000_000 && wait.nanoseconds >= 50_000_000)
        #expect(pool.consecutiveFailures == 1)
        #expect(pool.waiters.count == 1)
        // The second in a row: the endpoint refuses us, the waiter learns it now.
        #expect(pool.backoffElapsed(second, now: t0 + wait).count == 1)
        let result = failed(pool.connectionClosed(second, failed: true, now: t0 + wait))
        #expect(result?.requests == [1])
        #expect(result?.failure == .connectionFailed)
        #expect(pool.consecutiveFailures == 2)
        #expect(pool.waiters.isEmpty)

        var delays: [TimeAmount] = []
        var now = t0 + wait
        for attempt in 1...6 {
            guard case .enqueued(.connectAfter(let id, let delay)) = pool.submit(attempt, deadline: now + .seconds(60), now: now) else {
                Issue.record("expected a delayed connect after failure \(attempt)")
                return
            }
            delays.append(delay)
            now = now + delay
            #expect(pool.backoffElapsed(id, now: now).count == 1)
            _ = pool.connectionClosed(id, failed: true, now: now)
        }
        // Each wait lies in [(1 - jitter) × d, d] for d = 100 ms × 2^(n-1) after n failures, capped at 1 s.
        let expected: [Int64] = [200, 400, 800, 1000, 1000, 1000].map { $0 * 1_000_000 }
        for (delay, full) in zip(delays, expected) {
            #expect(delay.nanoseconds <= full)
            #expect(delay.nanoseconds >= full / 2)
        }
        #expect(Set(delays.map(\.nanoseconds)).count > 1)
    }

    @Test("an answered request resets the backoff")
    func answeredResetsBackoff() {
        var pool = machine(connections: 1)
        _ = pool.submit(1, deadline: later, now: t0)
        // The first failed connect: the waiter keeps its place and a connect follows its backoff.
        let actions = pool.connectionClosed(pool.connections[0].id, failed: true, now: t0)
        #expect(pool.reconnectNotBefore != nil)
        guard case .connectAfter(let id, let delay)? = actions.first, actions.count == 1 else {
            Issue.record("expected a delayed connect, got \(actions)")
            return
        }
        // A new request waits for that connect: no second one is started.
        guard case .enqueued(nil) = pool.submit(2, deadline: later, now: t0) else {
            Issue.record("expected the request to wait for the delayed connect")
            return
        }
        _ = pool.backoffElapsed(id, now: t0 + delay)
        _ = pool.connectionReady(id, maxStreams: 1, now: t0 + delay)
        _ = pool.requestFinished(on: id, answered: true, now: t0 + delay)
        #expect(pool.consecutiveFailures == 0)
        #expect(pool.reconnectNotBefore == nil)
    }

    @Test("GOAWAY: the draining connection takes nothing new and a replacement opens for the queue")
    func drainingConnectionIsReplaced() {
        var pool = machine(connections: 1)
        _ = pool.submit(1, deadline: later, now: t0)
        let id = pool.connections[0].id
        _ = pool.connectionReady(id, maxStreams: 1, now: t0)
        _ = pool.requestFinished(on: id, answered: true, now: t0)
        _ = pool.submit(2, deadline: later, now: t0)
        _ = pool.submit(3, deadline: later, now: t0)  // waits: one stream
        let actions = pool.connectionDraining(id, now: t0)
        guard case .connect(let replacement)? = actions.first else {
            Issue.record("expected an immediate replacement (the old one worked)")
            return
        }
        #expect(replacement != id)
        guard case .none = pool.requestFinished(on: id, answered: true, now: t0) else {
            Issue.record("a draining connection must not get the waiter")
            return
        }
        #expect(executed(pool.connectionReady(replacement, maxStreams: 10, now: t0))?.requests == [3])
        #expect(pool.connectionClosed(id, failed: false, now: t0).isEmpty)
        #expect(pool.consecutiveFailures == 0)
    }

    @Test("drain: the queue finishes first, then connections drain, then the pool is closed")
    func drain() {
        var pool = machine(connections: 1)
        _ = pool.submit(1, deadline: later, now: t0)
        _ = pool.submit(2, deadline: later, now: t0)
        let id = pool.connections[0].id
        _ = pool.connectionReady(id, maxStreams: 1, now: t0)
        #expect(pool.drain().isEmpty)
        guard case .fail(9, .poolClosed) = pool.submit(9, deadline: later, now: t0) else {
            Issue.record("a draining pool takes no new request")
            return
        }
        guard case .execute(2, id) = pool.requestFinished(on: id, answered: true, now: t0) else {
            Issue.record("the queued request still runs")
            return
        }
        guard case .actions(let actions) = pool.requestFinished(on: id, answered: true, now: t0),
            case .drainConnection(id)? = actions.first
        else {
            Issue.record("expected the connection to drain")
            return
        }
        let closed = pool.connectionClosed(id, failed: false, now: t0)
        guard case .poolClosed? = closed.last else {
            Issue.record("expected poolClosed")
            return
        }
    }

    @Test("close fails the queue and closes every connection at once")
    func close() {
        var pool = machine(connections: 2)
        _ = pool.submit(1, deadline: later, now: t0)
        _ = pool.submit(2, deadline: later, now: t0)
        let actions = pool.close()
        #expect(failed(actions)?.requests == [1, 2])
        #expect(failed(actions)?.failure == .poolClosed)
        let closing = actions.compactMap { action -> Int? in
            if case .closeConnection(let id) = action { return id }
            return nil
        }
        #expect(closing.count == 2)
        #expect(pool.connectionClosed(closing[0], failed: false, now: t0).isEmpty)
        guard case .poolClosed? = pool.connectionClosed(closing[1], failed: false, now: t0).last else {
            Issue.record("expected poolClosed after the last connection")
            return
        }
    }
}
