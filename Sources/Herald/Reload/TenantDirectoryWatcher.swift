import HeraldCore
import ServiceLifecycle

/// Reloads the tenants when their files change: polls the tenants directory (its files and
/// subdirectories, plus the key, certificate and CA files the running tenants read from
/// elsewhere) every `interval`, comparing modification time, size and SHA-256 per file.
///
/// A change is applied once the files have stopped changing for `settle` (an editor's save or
/// a `cp` of several files is seen as one change), and only when they did not change while the
/// reload read them. A directory left with no tenant file while tenants run (emptied, or a
/// volume that is not mounted) is refused and logged, not taken as "remove everyone". Ends at
/// graceful shutdown.
///
/// ```swift
/// let watcher = TenantDirectoryWatcher(coordinator: reloader, interval: .seconds(2))
/// let group = ServiceGroup(services: [server, watcher], ...)
/// ```
public struct TenantDirectoryWatcher: Service {
    public let coordinator: ReloadCoordinator
    public var interval: Duration
    public var settle: Duration
    /// What `interval` and `settle` are timed on.
    public var clock: any PushClock

    public init(
        coordinator: ReloadCoordinator, interval: Duration = .seconds(2), settle: Duration = .milliseconds(250),
        clock: any PushClock = SystemPushClock()
    ) {
        self.coordinator = coordinator
        self.interval = interval
        self.settle = settle
        self.clock = clock
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await clock.repeating(every: interval) { await checkOnce() }
        }
    }

    /// Looks once; reloads every tenant when something changed since the last full reload.
    /// - Returns: the reload's report, nil when nothing changed (or the reload could not read the directory).
    @discardableResult
    public func checkOnce() async -> ReloadReport? {
        let last = coordinator.lastFingerprint
        var seen = coordinator.currentFingerprint(reusing: last)
        guard seen != last else { return nil }
        // Wait until the files stop changing.
        while true {
            do {
                try await clock.sleep(until: clock.now.advanced(by: settle))
            } catch {
                return nil
            }
            let again = coordinator.currentFingerprint(reusing: seen)
            if again == seen { break }
            seen = again
        }
        do {
            return try await coordinator.reloadAll(trigger: .watcher)
        } catch  where error.isWouldRemoveEveryTenant || error.isDirectoryChanging {
            return nil  // logged by the coordinator; the running tenants stay
        } catch {
            coordinator.logger.error(
                "tenants directory changed but could not be read", metadata: ["herald.error": "\(error)"])
            return nil
        }
    }
}
