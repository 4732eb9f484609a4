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
