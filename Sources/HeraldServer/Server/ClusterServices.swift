import Foundation
import Herald
import HeraldCore
import HeraldStore
import Logging
import ServiceLifecycle

/// Beats this instance's heartbeat until graceful shutdown; then (it stops after the job runner)
/// releases the leases the instance still holds and removes its row.
struct InstanceHeartbeatService: Service {
    let heartbeat: InstanceHeartbeat

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await heartbeat.run()
        }
        await heartbeat.deregister()
    }
}

/// What instances tell each other through the shared store.
enum PeerNotifications {
    /// The payload of a ``HeraldStore/StoreChannel/tenants`` notification: the sender's instance
    /// id, and ` revoke` when the change revoked a credential (the others cut its connections too).
    static func tenantsPayload(instance: String, revoked: Bool) -> String {
        revoked ? instance + " revoke" : instance
    }

    /// Reads a ``tenantsPayload(instance:revoked:)``.
    static func parseTenants(_ payload: String) -> (instance: String, revoke: Bool) {
        let parts = payload.split(separator: " ", maxSplits: 1)
        return (parts.first.map(String.init) ?? "", parts.count == 2 && parts[1] == "revoke")
    }

    /// Reads a ``HeraldStore/StoreChannel/jobs`` payload, `<tenant>/<job id>`; nil when it is not one.
    static func parseJob(_ payload: String) -> (TenantID, JobID)? {
        guard let slash = payload.firstIndex(of: "/"),
            let tenant = try? TenantID(String(payload[..<slash])),
            let job = try? JobID(String(payload[payload.index(after: slash)...]))
        else { return nil }
        return (tenant, job)
    }

    /// Tells the other instances that a job was cancelled (they stop working on it now). A
    /// failure is logged: their next claim or lease check finds the job cancelled.
    static func tellJobCancelled(_ notifier: any StoreNotifier, tenant: TenantID, job: JobID, logger: Logger) async {
        do {
            try await notifier.notify(.cancelledJobs, payload: tenant.rawValue + "/" + job.rawValue)
        } catch {
            logger.warning(
                "cannot tell the other instances that a job was cancelled; they stop at their next claim",
                metadata: ["herald.tenant": "\(tenant)", "herald.job": "\(job)", "herald.error": "\(error)"])
        }
    }

    /// Tells the other instances that this one changed the tenants (after an admin reload,
    /// upload or revoke). A failure is logged: the others' directory watchers still see the
    /// shared files change.
    static func tellTenantsChanged(_ notifier: any StoreNotifier, instance: String, revoked: Bool, logger: Logger) {
        Task {
            do {
                try await notifier.notify(.tenants, payload: tenantsPayload(instance: instance, revoked: revoked))
            } catch {
                logger.warning(
                    "cannot tell the other instances that the tenants changed",
                    metadata: ["herald.error": "\(error)"])
            }
        }
    }
}

/// Listens to the shared store's notifications (PostgreSQL LISTEN/NOTIFY) until graceful
/// shutdown: a job stored by any instance starts here at once if this runner has room (the
/// periodic scan stays the fallback), and a change of the tenants made through another
/// instance's admin API makes this one read the tenants directory again. When the listening
/// connection fails it listens again after a pause, and then scans for jobs (nothing sent in
/// between is replayed).
struct PeerNotificationService: Service {
    let notifier: any StoreNotifier
    let instance: String
    let runner: JobRunner
    let reloader: ReloadCoordinator
    let logger: Logger
    /// Opened once the instance listens (the first time).
    let listening: OneShotGate
    /// The pause before listening again after a failure.
    var retryDelay: Duration = .seconds(2)

    init(
        notifier: any StoreNotifier, instance: String, runner: JobRunner, reloader: ReloadCoordinator,
        listening: OneShotGate, logger: Logger
    ) {
        self.notifier = notifier
        self.listening = listening
        self.instance = instance
        self.runner = runner
        self.reloader = reloader
        var logger = logger
        logger[metadataKey: "herald.component"] = "peer-notifications"
        self.logger = logger
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await listen()
        }
    }

    private func listen() async {
        let runner = self.runner
        let listening = self.listening
        var first = true
        while !Task.isCancelled {
            let rescan = !first
            do {
                try await notifier.listen(
                    [.jobs, .tenants, .cancelledJobs],
                    onListening: {
                        listening.open()
                        // After a gap, what was notified in it is found by a scan.
                        if rescan { runner.rescan() }
                    },
                    handler: { channel, payload in await handle(channel, payload) })
            } catch {
                if Task.isCancelled { return }
                logger.warning(
                    "listening for other instances' notifications failed; polling only until it listens again",
                    metadata: ["herald.error": "\(error)"])
            }
            first = false
            try? await Task.sleep(for: retryDelay)
        }
    }

    private func handle(_ channel: StoreChannel, _ payload: String) async {
        switch channel {
        case .jobs:
            guard let stored = PeerNotifications.parseJob(payload) else { return }
            runner.jobStored(tenant: stored.0, id: stored.1)
        case .cancelledJobs:
            guard let cancelled = PeerNotifications.parseJob(payload) else { return }
            runner.jobCancelled(tenant: cancelled.0, id: cancelled.1)
        case .tenants:
            let (sender, revoke) = PeerNotifications.parseTenants(payload)
            guard sender != instance, !sender.isEmpty else { return }
            logger.info(
                "another instance changed the tenants; reading the tenants directory again",
                metadata: ["herald.peer": "\(sender)", "herald.revoke": "\(revoke)"])
            do {
                let report = try await reloader.reloadAll(revoke: revoke, trigger: .peer)
                if !report.failures.isEmpty {
                    logger.warning(
                        "the reload another instance asked for left files that fail",
                        metadata: ["herald.failures": "\(report.failures.count)"])
                }
            } catch {
                logger.error("the reload another instance asked for failed", metadata: ["herald.error": "\(error)"])
            }
        }
    }
}
