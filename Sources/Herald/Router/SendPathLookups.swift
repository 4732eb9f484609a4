import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// The store reads a send waits for — the `feedback` plugin's invalid-token lookup before a send,
/// a token-auth key's shared provider token when its token is renewed — bounded tighter than
/// other store calls, and skipped for a while once one fails for want of the store.
///
/// Why: none of them is needed to send. A send whose lookup fails goes on without it (sending to
/// a token that might be recorded invalid; signing a token of its own). But with the store
/// unreachable (a network partition, a PostgreSQL failover) each lookup would wait for
/// `storage.postgres.call_timeout` (30 s) before failing, so every send would take that long.
/// Here a lookup waits at most ``timeout``; one that times out or finds the store unavailable
/// (``StoreError/leftOutcomeUnknown``) makes the next ``cooldown`` skip lookups at once
/// (``StoreLookupSkipped``), and then a single lookup probes the store again while the others
/// still skip. Other failures (a statement's error) are the caller's alone and change nothing.
///
/// One per process (``RouterConfiguration/sendPathLookups``), on a PostgreSQL store only: the
/// store is one, and SQLite's reads are local (a timer would only skip them when the CPU is busy).
public final class SendPathLookups: Sendable {
    /// The bound `herald serve` uses (or `storage.postgres.call_timeout`, when that is shorter).
    public static let standardTimeout: Duration = .seconds(2)
    /// How long `herald serve` skips lookups after one failed for want of the store.
    public static let standardCooldown: Duration = .seconds(5)

    /// The longest a send waits for one lookup.
    public let timeout: Duration
    /// How long lookups are skipped after one failed for want of the store.
    public let cooldown: Duration
    private let logger: Logger
    /// The delivery circuits' state machine, with a threshold of one failure and a fixed
    /// cooldown: open skips, half-open lets one probe through.
    private let circuit = Mutex(CircuitBreaker())
    private let policy: CircuitPolicy
    private let skipped = Atomic<Int>(0)
    private let deadlines = StoreDeadline()

    public init(timeout: Duration = standardTimeout, cooldown: Duration = standardCooldown, logger: Logger) {
        self.timeout = timeout
        self.cooldown = cooldown
        self.logger = logger
        self.policy = CircuitPolicy(failureThreshold: 1, probeInterval: cooldown, maxProbeInterval: cooldown)
    }

    /// Whether lookups are being skipped now (a probe in flight counts).
    public var isSkipping: Bool {
        circuit.withLock { circuit in
            switch circuit.state {
            case .closed: return false
            case .halfOpen: return true
            case .open(let until, _): return PushInstant.now < until
            }
        }
    }

    /// Lookups skipped since the start (`/metrics`: `herald_store_lookups_skipped_total`).
    public var skippedLookups: Int { skipped.load(ordering: .relaxed) }

    /// Runs `lookup` within ``timeout``, or throws ``StoreLookupSkipped`` at once while lookups
    /// are skipped.
    /// - Parameter lookups: how many lookups the call reads together (each skipped one is counted).
    public func run<T: Sendable>(
        _ what: String, lookups: Int = 1, _ lookup: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let policy = self.policy
        let admission = circuit.withLock { $0.admit(now: PushInstant.now, policy: policy) }
        let probe: Bool
        switch admission {
        case .send: probe = false
        case .probe: probe = true
        case .wait:
            skipped.wrappingAdd(max(1, lookups), ordering: .relaxed)
            throw StoreLookupSkipped(what: what)
        }
        let limit = timeout
        do {
            let value = try await deadlines.run(
                limit: limit, timeout: { StoreError.timedOut("the store did not answer \(what) within \(limit)") }, lookup)
            record(healthy: true, probe: probe, what: what, error: nil)
            return value
        } catch let error as StoreError where error.leftOutcomeUnknown {
            record(healthy: false, probe: probe, what: what, error: error)
            throw error
        } catch is CancellationError {
            // The caller went away: the store's state is as unknown as before; the next one probes.
            if probe { circuit.withLock { $0.probeAbandoned(now: PushInstant.now) } }
            throw CancellationError()
        } catch {
            // A statement's own failure: the store answered.
            record(healthy: true, probe: probe, what: what, error: nil)
            throw error
        }
    }

    private func record(healthy: Bool, probe: Bool, what: String, error: StoreError?) {
        let policy = self.policy
        let transition = circuit.withLock { $0.record(healthy: healthy, probe: probe, now: PushInstant.now, policy: policy) }
        switch transition {
        case .opened:
            logger.warning(
                "the store did not answer a send-path lookup: sends skip such lookups for a while",
                metadata: [
                    "herald.lookup": "\(what)", "herald.error": "\(error?.message ?? "")",
                    "herald.skip_seconds": "\(cooldown.components.seconds)",
                ])
        case .closed:
            logger.notice("the store answers again: send-path lookups resume", metadata: ["herald.lookup": "\(what)"])
        case .reopened, nil:
            break
        }
    }
}

extension SendPathLookups {
    /// A tenant's grouped invalid-token read through ``run(_:_:)`` (recording is not: a record a
    /// send's outcome waits for is kept, not skipped). Every lookup of the group gets its answer,
    /// its error, or ``StoreLookupSkipped``.
    var invalidTokenBound: TenantInvalidTokens.Bound {
        { count, read in try await self.run("the invalid-token lookup", lookups: count, read) }
    }
}

/// The shared provider tokens with both calls through ``SendPathLookups``: a send waiting for its
/// key's renewed token signs one of its own when the store does not answer in time. A swap cut
/// off by the bound may still be committed; the token it stored is the one this instance sends.
public struct GatedProviderTokens: ProviderTokenStore {
    let base: any ProviderTokenStore
    let lookups: SendPathLookups

    public init(_ base: any ProviderTokenStore, lookups: SendPathLookups) {
        self.base = base
        self.lookups = lookups
    }

    public func providerToken(teamID: String, keyID: String, keyFingerprint: String) async throws -> SharedProviderToken? {
        let base = self.base
        return try await lookups.run("the shared provider token") {
            try await base.providerToken(teamID: teamID, keyID: keyID, keyFingerprint: keyFingerprint)
        }
    }

    public func replaceProviderToken(_ token: SharedProviderToken, replacing: Date?) async throws -> SharedProviderToken {
        let base = self.base
        return try await lookups.run("the shared provider token's swap") {
            try await base.replaceProviderToken(token, replacing: replacing)
        }
    }
}
