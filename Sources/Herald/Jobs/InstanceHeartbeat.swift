import Foundation
import HeraldCore
import HeraldStore
import Logging

/// This process's row in the store's instance registry (``HeraldStore/InstanceRegistry``): it
/// registers at start, beats every ``Configuration/interval``, and on every beat takes the
/// instances whose last heartbeat is older than ``Configuration/timeout`` for dead: it releases
/// the leases their claimant holds (any instance claims those items at once, rather than when
/// the leases end), removes their rows, and asks the job runner to scan.
///
/// ```swift
/// let heartbeat = InstanceHeartbeat(registry: store, instance: record, runner: runner)
/// try await heartbeat.register()
/// await heartbeat.run()          // until cancelled
/// await heartbeat.deregister()   // graceful stop: row removed, leftover leases released
/// ```
///
/// An instance that was only slow (its heartbeat late by more than the timeout) finds its row
/// gone at its next beat, registers again and goes on; items it held may then be sent by
/// another instance too (at-least-once), with the same apns-id.
public struct InstanceHeartbeat: Sendable {
    public struct Configuration: Sendable, Hashable {
        /// Time between two heartbeats.
        public var interval: Duration = .seconds(5)
        /// An instance whose last heartbeat is older than this is taken for dead.
        public var timeout: Duration = .seconds(30)
        /// The longest ``InstanceHeartbeat/deregister()`` waits for the store at a graceful stop;
        /// past it, the row ends by ``timeout`` and others then take the leases it still holds.
        public var deregisterLimit: Duration = .seconds(5)

        public init(interval: Duration = .seconds(5), timeout: Duration = .seconds(30)) {
            self.interval = interval
            self.timeout = timeout
        }
    }

    public let registry: any InstanceRegistry
    /// This process (its id, claimant, host, pid and start).
    public let instance: InstanceRecord
    public let configuration: Configuration
    private let runner: JobRunner?
    private let clock: any PushClock
    private let logger: Logger

    public init(
        registry: any InstanceRegistry, instance: InstanceRecord, runner: JobRunner?,
        configuration: Configuration = Configuration(), clock: any PushClock = SystemPushClock(),
        logger: Logger = Logger(label: "herald")
    ) {
        self.registry = registry
        self.instance = instance
        self.runner = runner
        self.configuration = configuration
        self.clock = clock
        var logger = logger
        logger[metadataKey: "herald.component"] = "instances"
        logger[metadataKey: "herald.instance"] = "\(instance.id)"
        self.logger = logger
    }

    /// This process's record for `runner`: its instance id and claimant, this host and pid.
    public static func record(for configuration: JobRunnerConfiguration, startedAt: Date) -> InstanceRecord {
        InstanceRecord(
            id: configuration.instance, claimant: configuration.claimantName, host: ProcessInfo.processInfo.hostName,
            pid: Int(ProcessInfo.processInfo.processIdentifier), startedAt: startedAt, lastHeartbeat: startedAt)
    }

    /// Stores this instance's row (at start).
    public func register() async throws {
        var record = instance
        record.lastHeartbeat = clock.date
        try await registry.registerInstance(record)
    }

    /// One beat: this instance's heartbeat (registering again if its row was removed), then the
    /// dead instances' leases released and their rows removed.
    /// - Returns: the ids of the instances taken for dead.
    @discardableResult
    public func beat() async -> [String] {
        let now = clock.date
        do {
            if try await !registry.heartbeat(instance: instance.id, at: now) {
                logger.warning("this instance's heartbeat row was gone (taken for dead); registering again")
                try await register()
            }
        } catch is CancellationError {
            return []  // shutting down
        } catch {
            logger.error("cannot write this instance's heartbeat", metadata: ["herald.error": "\(error)"])
        }
        let cutoff = now.addingTimeInterval(-JobRunner.seconds(configuration.timeout))
        let dead: [InstanceRecord]
        do {
            dead = try await registry.instances().filter { $0.id != instance.id && $0.lastHeartbeat < cutoff }
        } catch is CancellationError {
            return []  // shutting down
        } catch {
            logger.error("cannot read the instance registry", metadata: ["herald.error": "\(error)"])
            return []
        }
        var reaped: [String] = []
        for other in dead {
            do {
                let released = try await registry.releaseLeases(heldBy: other.claimant)
                try await registry.removeInstance(id: other.id)
                reaped.append(other.id)
                logger.warning(
                    "instance taken for dead; its leases are released",
                    metadata: [
                        "herald.dead_instance": "\(other.id)", "herald.host": "\(other.host)", "herald.pid": "\(other.pid)",
                        "herald.last_heartbeat": "\(other.lastHeartbeat)", "herald.released": "\(released)",
                    ])
            } catch {
                logger.storeFailure(
                    "cannot release a dead instance's leases", error: error, metadata: ["herald.dead_instance": "\(other.id)"])
            }
        }
        if !reaped.isEmpty { runner?.rescan() }
        return reaped
    }

    /// Beats now and then every ``Configuration/interval`` until the task is cancelled.
    public func run() async {
        await clock.repeating(every: configuration.interval, startingNow: true) { await beat() }
    }

    /// At a graceful stop (after the job runner stopped): releases the leases this instance
    /// still holds (claimed, not sent) and removes its row, so that others take its items at once.
    /// Bounded by ``Configuration/deregisterLimit``: a store that lost the call (a connection cut
    /// as the call went out) would otherwise hold the stop up for its whole call timeout.
    public func deregister() async {
        let (registry, instance, limit) = (self.registry, self.instance, configuration.deregisterLimit)
        do {
            // On the system's clock, not the heartbeat's: what loses a call is the network.
            let released = try await StoreDeadline().run(
                limit: limit,
                timeout: { StoreError.timedOut("the store did not answer within \(Int((limit.secondsValue * 1000).rounded())) ms") }
            ) {
                let released = try await registry.releaseLeases(heldBy: instance.claimant)
                try await registry.removeInstance(id: instance.id)
                return released
            }
            logger.info("instance deregistered", metadata: ["herald.released": "\(released)"])
        } catch {
            logger.warning("cannot deregister this instance (its row ends by timeout)", metadata: ["herald.error": "\(error)"])
        }
    }
}
