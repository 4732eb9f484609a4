import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization
import Testing

@testable import Herald

/// ``SendPathLookups``: the store reads a send waits for are bounded, and skipped for a while
/// once one failed for want of the store; one lookup then probes while the others still skip.
@Suite("Send-path lookups")
struct SendPathLookupsTests {
    static func lookups(timeout: Duration = .milliseconds(100), cooldown: Duration = .milliseconds(300)) -> SendPathLookups {
        var logger = Logger(label: "test.lookups")
        logger.logLevel = .critical
        return SendPathLookups(timeout: timeout, cooldown: cooldown, logger: logger)
    }

    /// Counts the lookups that ran.
    final class Calls: Sendable {
        private let count = Mutex(0)
        var value: Int { count.withLock { $0 } }
        func add() { count.withLock { $0 += 1 } }
    }

    /// A lookup that never answers by itself (a silent store): the continuation is kept so the
    /// test can let it end.
    final class Parked: Sendable {
        private let slot = Mutex<CheckedContinuation<Void, Never>?>(nil)
        func park() async { await withCheckedContinuation { continuation in slot.withLock { $0 = continuation } } }
        var isParked: Bool { slot.withLock { $0 != nil } }
        func release() { slot.withLock { $0?.resume(); $0 = nil } }
    }

    @Test("an answer passes through and lookups keep running")
    func answerPassesThrough() async throws {
        let lookups = Self.lookups()
        let calls = Calls()
        for expected in 1...3 {
            let value = try await lookups.run("a lookup") { () async throws -> Int in
                calls.add()
                return 7
            }
            #expect(value == 7)
            #expect(calls.value == expected)
        }
        #expect(!lookups.isSkipping)
    }

    @Test("a lookup the store does not answer times out; the next ones are skipped without running until the cooldown ends")
    func timeoutStartsSkipping() async throws {
        let lookups = Self.lookups(cooldown: .seconds(60))
        let parked = Parked()
        do {
            _ = try await lookups.run("a lookup") { () async throws -> Int in
                await parked.park()
                return 1
            }
            Issue.record("a lookup that never answered returned")
        } catch let error as StoreError {
            #expect(error.isTimedOut, "\(error)")
        }
        #expect(lookups.isSkipping)
        let calls = Calls()
        for _ in 0..<3 {
            await #expect(throws: StoreLookupSkipped.self) {
                try await lookups.run("a lookup") { () async throws -> Int in
                    calls.add()
                    return 1
                }
            }
        }
        #expect(calls.value == 0, "a skipped lookup ran")
        while !parked.isParked { try await Task.sleep(for: .milliseconds(5)) }
        parked.release()
    }

    @Test("an unavailable store starts skipping too; a statement's own error does not")
    func whichFailuresSkip() async throws {
        let lookups = Self.lookups(cooldown: .seconds(60))
        await #expect(throws: StoreError.self) {
            try await lookups.run("a lookup") { () async throws -> Int in throw StoreError.corrupt("a bad row") }
        }
        #expect(!lookups.isSkipping)
        await #expect(throws: StoreError.self) {
            try await lookups.run("a lookup") { () async throws -> Int in throw StoreError.unavailable("connection lost") }
        }
        #expect(lookups.isSkipping)
    }

    @Test("after the cooldown one lookup probes while the others skip; its answer lets lookups run again")
    func probeAfterCooldown() async throws {
        let lookups = try await Self.failedOnce(cooldown: .milliseconds(200))
        let probe = try await Self.heldProbe(lookups, answering: 2)
        try await Self.expectSkippedBeside(lookups)
        probe.parked.release()
        #expect(try await probe.task.value == 2)
        #expect(!lookups.isSkipping)
        #expect(try await lookups.run("a lookup") { () async throws -> Int in 3 } == 3)
    }

    @Test("a probe whose caller is cancelled leaves the store's state unknown: the next lookup probes alone")
    func cancelledProbe() async throws {
        let lookups = try await Self.failedOnce(cooldown: .milliseconds(100))
        let first = try await Self.heldProbe(lookups, answering: 1)
        first.task.cancel()
        await #expect(throws: CancellationError.self) { try await first.task.value }
        first.parked.release()

        // The next lookup probes; one beside it is skipped, as beside any probe.
        let second = try await Self.heldProbe(lookups, answering: 2)
        try await Self.expectSkippedBeside(lookups)
        second.parked.release()
        #expect(try await second.task.value == 2)
    }

    /// Lookups with a long timeout (a probe is held until the test lets it answer) after one
    /// failed for want of the store, once the cooldown is over (state, not time, is checked).
    static func failedOnce(cooldown: Duration) async throws -> SendPathLookups {
        let lookups = Self.lookups(timeout: .seconds(30), cooldown: cooldown)
        await #expect(throws: StoreError.self) {
            try await lookups.run("a lookup") { () async throws -> Int in throw StoreError.unavailable("connection lost") }
        }
        while lookups.isSkipping { try await Task.sleep(for: .milliseconds(20)) }
        return lookups
    }

    /// A lookup started and held inside its call until `parked` is released; then it answers `value`.
    static func heldProbe(_ lookups: SendPathLookups, answering value: Int) async throws
        -> (task: Task<Int, any Error>, parked: Parked)
    {
        let parked = Parked()
        let task = Task {
            try await lookups.run("a probe") { () async throws -> Int in
                await parked.park()
                return value
            }
        }
        while !parked.isParked { try await Task.sleep(for: .milliseconds(5)) }
        return (task, parked)
    }

    /// A lookup beside a probe is skipped without running.
    static func expectSkippedBeside(_ lookups: SendPathLookups) async throws {
        let calls = Calls()
        await #expect(throws: StoreLookupSkipped.self) {
            try await lookups.run("a lookup beside the probe") { () async throws -> Int in
                calls.add()
                return 1
            }
        }
        #expect(calls.value == 0, "a lookup beside the probe ran")
    }
}
