import Foundation
import HeraldCore
import HeraldStore
import Synchronization
import Testing

@Suite("Invalid-token lookups: a tenant's lookups under way are read together")
struct TenantInvalidTokensTests {
    let tenant = Fixtures.tenantID("acme")

    /// A bound that records each read's size, holds the first read until ``open()``, and fails
    /// every read with `failure` once set.
    final class HeldBound: Sendable {
        private struct State {
            var sizes: [Int] = []
            var entered: CheckedContinuation<Void, Never>?
            var gate: CheckedContinuation<Void, Never>?
            var held = true
            var failure: StoreError?
        }
        private let state = Mutex(State())

        var sizes: [Int] { state.withLock { $0.sizes } }

        func fail(with error: StoreError) { state.withLock { $0.failure = error } }

        var bound: TenantInvalidTokens.Bound {
            { count, read in
                let (hold, failure) = self.state.withLock { state -> (Bool, StoreError?) in
                    state.sizes.append(count)
                    defer { state.held = false }
                    return (state.held, state.failure)
                }
                if hold {
                    await withCheckedContinuation { gate in
                        let entered = self.state.withLock { state in
                            state.gate = gate
                            defer { state.entered = nil }
                            return state.entered
                        }
                        entered?.resume()
                    }
                }
                if let failure { throw failure }
                return try await read()
            }
        }

        /// Returns once the first read is held.
        func waitForTheHeldRead() async {
            await withCheckedContinuation { entered in
                let already = state.withLock { state -> Bool in
                    if state.gate != nil { return true }
                    state.entered = entered
                    return false
                }
                if already { entered.resume() }
            }
        }

        func open() {
            state.withLock { state in
                defer { state.gate = nil }
                return state.gate
            }?.resume()
        }
    }

    private func token(_ index: Int) throws -> DeviceToken {
        try DeviceToken(hex: String(repeating: "7c", count: 31) + String(format: "%02x", index))
    }

    /// Looks up tokens 0..<count for the tenant: the first lookup's read is held until the others
    /// wait for the next, then let go. Returns the first lookup and the others.
    private func lookUp(_ count: Int, store: any PushStore, held: HeldBound) async throws
        -> (first: Task<InvalidTokenRecord?, any Error>, rest: [Task<InvalidTokenRecord?, any Error>])
    {
        let tokens = TenantInvalidTokens(tenant: tenant, store: store, bound: held.bound)
        let first = Task { try await tokens.invalidToken(try token(0), topic: "com.acme.app", environment: .production) }
        await held.waitForTheHeldRead()
        let rest = try (1..<count).map { index in
            let device = try token(index)
            return Task { try await tokens.invalidToken(device, topic: "com.acme.app", environment: .production) }
        }
        let end = PushInstant.now.advanced(by: .seconds(30))
        while tokens.waitingLookups < count - 1 {
            guard PushInstant.now < end else {
                Issue.record("the lookups did not queue")
                break
            }
            await Task.yield()
        }
        held.open()
        return (first, rest)
    }

    @Test("the lookups that arrive while a read runs go into the next one, each answered with its own record")
    func lookupsWaitingForAReadAreReadTogether() async throws {
        let store = try Fixtures.store()
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        for index in [3, 7] {
            try await store.recordInvalidToken(
                InvalidTokenRecord(
                    token: try token(index), topic: "com.acme.app", environment: .production, reason: .unregistered,
                    apnsTimestamp: t0.addingTimeInterval(Double(index)), recordedAt: t0),
                tenant: tenant)
        }
        let held = HeldBound()
        let (first, rest) = try await lookUp(1 + 20, store: store, held: held)
        #expect(try await first.value == nil)
        for (offset, task) in rest.enumerated() {
            let index = offset + 1
            let record = try await task.value
            #expect(record?.apnsTimestamp == ([3, 7].contains(index) ? t0.addingTimeInterval(Double(index)) : nil), "token \(index)")
        }
        #expect(held.sizes == [1, 20])
    }

    @Test("a read that fails, or is skipped, answers every lookup it held with that error")
    func aFailedReadAnswersEveryLookup() async throws {
        let store = try Fixtures.store()
        let held = HeldBound()
        held.fail(with: StoreError.unavailable("the store is down (test)"))
        let (first, rest) = try await lookUp(1 + 5, store: store, held: held)
        for task in [first] + rest {
            await #expect(throws: StoreError.self) { try await task.value }
        }
        #expect(held.sizes == [1, 5])
    }
}
