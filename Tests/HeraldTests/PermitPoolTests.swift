@testable import Herald
import Synchronization
import Testing

/// The tenant's permits for job sends (`PermitPool`): a job's driving task takes several at once
/// when it must wait, and waiters are served in order.
@Suite("Permit pool")
struct PermitPoolTests {
    /// A task that asks `pool` for up to `most` permits, returned once it waits in line (polled,
    /// at most ~5 s).
    private func waiter(_ pool: PermitPool, upTo most: Int) async throws -> Task<Int, Never> {
        let before = pool.counts.waiting
        let task = Task { await pool.acquire(upTo: most) }
        for _ in 0..<5_000 where pool.counts.waiting == before { try await Task.sleep(for: .milliseconds(1)) }
        #expect(pool.counts.waiting == before + 1)
        return task
    }

    @Test("free permits are taken at once, up to the number asked, and at least one")
    func takesFreePermits() async {
        let pool = PermitPool(permits: 10)
        #expect(await pool.acquire(upTo: 4) == 4)
        #expect(await pool.acquire(upTo: 8) == 6)
        #expect(pool.counts.available == 0)
        pool.release(3)
        #expect(await pool.acquire(upTo: 0) == 1)
        #expect(pool.counts.available == 2)
    }

    @Test("a waiter asking for several is woken once that many are free, and a later one waits behind it")
    func gathersInOrder() async throws {
        let pool = PermitPool(permits: 4)
        #expect(await pool.acquire(upTo: 4) == 4)
        let first = try await waiter(pool, upTo: 3)
        pool.release()
        pool.release()
        // Two free: not enough for the first waiter, and a newcomer does not pass it.
        #expect(pool.counts.available == 2)
        let second = try await waiter(pool, upTo: 1)
        #expect(pool.counts.available == 2)
        pool.release()
        #expect(await first.value == 3)
        #expect(pool.counts == (available: 0, waiting: 1))
        pool.release()
        #expect(await second.value == 1)
        #expect(pool.counts == (available: 0, waiting: 0))
    }

    @Test("asking for more than the pool holds waits for the whole pool, not for ever")
    func asksBeyondTheSize() async throws {
        let pool = PermitPool(permits: 2)
        #expect(await pool.acquire(upTo: 2) == 2)
        let asking = try await waiter(pool, upTo: 50)
        pool.release(2)
        #expect(await asking.value == 2)
    }

    @Test("the driving task takes an eighth of the tenant's permits ahead, at least one")
    func takenAhead() {
        #expect(JobCallbackSender.permitsTakenAhead(ofPool: 100) == 12)
        #expect(JobCallbackSender.permitsTakenAhead(ofPool: 8) == 1)
        #expect(JobCallbackSender.permitsTakenAhead(ofPool: 3) == 1)
    }
}
