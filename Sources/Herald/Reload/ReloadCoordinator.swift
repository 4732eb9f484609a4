import Foundation
import HeraldAPNs
import HeraldConfig
import HeraldCore
import Logging
import Metrics
import NIOCore
import NIOPosix
import Synchronization

/// How a ``ReloadCoordinator`` reads and checks tenant files.
public struct ReloadConfiguration: Sendable {
    /// The directory of tenant files.
    public var tenantsDirectory: String
    /// Before a new configuration replaces a running one: build its credential, sign a provider
    /// token (token tenants) and build its TLS context (trust roots, client identity). Off only
    /// for routers whose transports are not APNs (tests with scripted transports).
    public var verifyCredentials: Bool = true
    /// The clock certificates' validity is checked against, and probe tokens are dated with.
    public var credentialClock: any WallClock = SystemWallClock()
    /// Where the TLS probe's context is built (no connection is opened).
    public var eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    /// Where `herald_reloads_total` and `herald_reload_failures_total` go (nil: `MetricsSystem`'s).
    public var metricsFactory: (any MetricsFactory)? = nil
    /// The largest credential an upload may bring (bytes).
    public var maximumUploadBytes: Int = 64 * 1024

    public init(tenantsDirectory: String) {
        self.tenantsDirectory = tenantsDirectory
    }
}

/// Applies changed tenant files to a running ``Router`` without losing a notification.
///
/// Every reload reads the tenants directory and, for each tenant it covers:
///
/// - **unchanged** configuration (same YAML meaning, same key or certificate bytes): nothing
///   happens; its runtime and connections stay.
/// - **changed or new**: the new configuration is validated in full first (YAML, the key or
///   certificate loads as a signing key or identity, the certificate covers the tenant's topics, the
///   TLS context builds, the plugins build). Only then is the new runtime swapped in, atomically:
///   sends that start after the swap use it. The old runtime drains (its in-flight streams get
///   their answers) and closes its connections. With `revoke`, the old runtime's connections are
///   closed at once instead, and the sends that were on them and got no answer are resent once
///   on the new credential (see ``Router/send(tenant:notification:environment:deadline:)``).
/// - **broken** file: nothing changes for that tenant; the error is recorded (``status(of:)``,
///   ``failures``, the log and `herald_reload_failures_total{tenant}`).
/// - **removed** file: the tenant stops taking sends at once (its API keys stop working with the
///   observers' next index), its in-flight sends finish, its connections close.
///
/// Reloads run one at a time. A tenant whose credential did not change keeps its credential
/// provider (and its cached token) across the swap; a new key gets a new provider that signs its
/// own first token, so a rotation never makes APNs answer `TooManyProviderTokenUpdates`.
///
/// ```swift
/// let reloader = ReloadCoordinator(router: router, configuration: ReloadConfiguration(tenantsDirectory: "tenants"))
/// reloader.onChange { report in apiKeys.rebuild(from: router) }
/// try await reloader.reloadAll(trigger: .startup)
/// try await reloader.reload(tenant: try TenantID("acme"), revoke: true)
/// ```
public final class ReloadCoordinator: Sendable {
    public let router: Router
    public let configuration: ReloadConfiguration
    let logger: Logger
    let lock = ReloadLock()
    private let state = Mutex(State())

    private struct State {
        var statuses: [TenantID: TenantReloadStatus] = [:]
        var failures: [ReloadFailure] = []
        var generation: UInt64 = 0
        var observers: [@Sendable (ReloadReport) -> Void] = []
        var fingerprint: DirectoryFingerprint?
    }

    enum Scope: Sendable {
        case all
        case tenant(TenantID)

        func covers(_ id: TenantID) -> Bool {
            switch self {
            case .all: return true
            case .tenant(let only): return only == id
            }
        }
    }

    public init(router: Router, configuration: ReloadConfiguration) {
        self.router = router
        self.configuration = configuration
        var logger = router.configuration.logger
        logger[metadataKey: "herald.component"] = "reload"
        self.logger = logger
    }

    // MARK: Observing

    /// Calls `observer` after every reload, right after the swaps and before the old runtimes
    /// drain: rebuild what derives from the loaded tenants (the API key index) there.
    public func onChange(_ observer: @escaping @Sendable (ReloadReport) -> Void) {
        state.withLock { $0.observers.append(observer) }
    }

    /// Goes up by one every time a reload changes which runtime serves a tenant.
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// The reload state of a tenant that is loaded or has failed to load; nil otherwise.
    public func status(of tenant: TenantID) -> TenantReloadStatus? {
        state.withLock { $0.statuses[tenant] }
    }

    /// Every tenant's reload state, sorted by tenant.
    public var statuses: [TenantReloadStatus] {
        state.withLock { Array($0.statuses.values) }.sorted { $0.tenant < $1.tenant }
    }

    /// The files (or tenants) that failed at the last reload and have not loaded since.
    public var failures: [ReloadFailure] { state.withLock { $0.failures } }

    // MARK: Reloading

    /// Reads the whole tenants directory and applies it: new tenants are added, changed ones
    /// swapped, removed ones taken out; broken files keep their tenant's running runtime.
    ///
    /// - Parameter revoke: for every tenant whose credential changed, close the old credential's
    ///   connections at once instead of draining them.
    /// - Returns: what happened to each tenant; failures are in the report, not thrown.
    /// - Throws: ``ReloadError`` only when the directory itself cannot be read.
    @discardableResult
    public func reloadAll(revoke: Bool = false, trigger: ReloadTrigger = .api) async throws(ReloadError) -> ReloadReport
    {
        try await lock.withLock { () async throws(ReloadError) -> ReloadReport in
            let (load, fingerprint) = try loadStableDirectory()
            do throws(ReloadError) {
                try refuseRemovingEveryTenant(load, trigger: trigger)
            } catch {
                // Seen: the watcher does not try (and log) again until the directory changes.
                state.withLock { $0.fingerprint = fingerprint }
                throw error
            }
            let report = try await apply(load, scope: .all, revoke: revoke, trigger: trigger)
            // Cover the files the tenants read now (a new CA outside the directory, say), as the watcher will.
            let settled = fingerprint.covering(
                directory: configuration.tenantsDirectory, extraFiles: runningReferences())
            state.withLock { $0.fingerprint = settled }
            return report
        }
    }

    /// Reads the tenant's file again and applies it to that tenant only.
    ///
    /// - Parameter revoke: close the old credential's connections at once (the credential must
    ///   have changed).
    /// - Returns: the report (the tenant is in `reloaded`, `added`, `unchanged` or `removed`).
    /// - Throws: ``ReloadError``: `validationFailed` (the running runtime stays, the error is
    ///   recorded), `unknownTenant`, `credentialUnchanged` (with `revoke`, nothing changed).
    @discardableResult
    public func reload(tenant: TenantID, revoke: Bool = false, trigger: ReloadTrigger = .api) async throws(ReloadError)
        -> ReloadReport
    {
        try await lock.withLock { () async throws(ReloadError) -> ReloadReport in
            try await reloadHoldingLock(tenant: tenant, revoke: revoke, trigger: trigger)
        }
    }

    func reloadHoldingLock(tenant: TenantID, revoke: Bool, trigger: ReloadTrigger) async throws(ReloadError)
        -> ReloadReport
    {
        let load = try loadDirectory()
        let known =
            router.runtime(for: tenant) != nil || load.tenants.contains { $0.id == tenant }
            || load.failures.contains { $0.tenantID == tenant }
        guard known else { throw .unknownTenant(tenant) }
        let report = try await apply(load, scope: .tenant(tenant), revoke: revoke, trigger: trigger)
        guard report.failures.isEmpty else { throw .validationFailed(report.failures) }
        return report
    }

    // MARK: Applying a load

    /// How many times a full reload reads the directory again when its files changed while it
    /// read them, before it gives up (`directoryChanging`).
    static let stableReadAttempts = 3

    /// Reads the directory and checks that nothing changed while it was read (the fingerprint
    /// before equals the one after), so a file that is still being written is never applied half
    /// written. Returns the load and the fingerprint it corresponds to.
    private func loadStableDirectory() throws(ReloadError) -> (TenantDirectoryLoad, DirectoryFingerprint) {
        for _ in 0..<Self.stableReadAttempts {
            let before = currentFingerprint(reusing: lastFingerprint)
            let load = try loadDirectory()
            if currentFingerprint(reusing: before) == before { return (load, before) }
        }
        logger.warning(
            "tenant files kept changing while they were read; reload skipped",
            metadata: ["herald.directory": "\(configuration.tenantsDirectory)"])
        throw .directoryChanging(configuration.tenantsDirectory)
    }

    /// A directory with no tenant file at all while tenants run is refused as a whole: an emptied
    /// directory or a volume that is not mounted must not take every customer down. (Removing
    /// tenants one by one, or replacing every file, is still a reload like any other.)
    private func refuseRemovingEveryTenant(_ load: TenantDirectoryLoad, trigger: ReloadTrigger) throws(ReloadError) {
        let running = router.tenantIDs.count
        guard running > 0, load.tenants.isEmpty, load.failures.isEmpty else { return }
        let error = ReloadError.wouldRemoveEveryTenant(directory: configuration.tenantsDirectory, running: running)
        counter("herald_reload_failures_total", tenant: "all").increment()
        logger.error(
            "reload refused: it would remove every tenant",
            metadata: [
                "herald.directory": "\(configuration.tenantsDirectory)", "herald.running": "\(running)",
                "herald.trigger": "\(trigger)",
            ])
        throw error
    }

    private func loadDirectory() throws(ReloadError) -> TenantDirectoryLoad {
        do {
            return try TenantLoader(environment: router.configuration.environment).loadDirectory(
                configuration.tenantsDirectory)
        } catch {
            throw .directoryUnreadable(error.description)
        }
    }

    private struct Swap {
        var runtime: TenantRuntime
        var revokePrevious: Bool
    }

    private func apply(_ load: TenantDirectoryLoad, scope: Scope, revoke: Bool, trigger: ReloadTrigger)
        async throws(ReloadError)
        -> ReloadReport
    {
        let now = router.configuration.clock.date
        var report = ReloadReport(trigger: trigger)
        let failedFiles = Set(load.failures.map(\.file))

        // 1. Plan: validate every new or changed configuration; nothing is swapped yet.
        for failure in load.failures {
            if case .tenant(let only) = scope, failure.tenantID != only,
                router.runtime(for: only)?.configuration.sourceFile != failure.file
            {
                continue  // another tenant's file
            }
            report.failures.append(
                ReloadFailure(file: failure.file, tenant: failure.tenantID, message: failure.description, at: now))
        }
        var swaps: [Swap] = []
        var changed: [TenantConfiguration] = []
        for tenant in load.tenants where scope.covers(tenant.id) {
            if let current = router.runtime(for: tenant.id), Self.sameMeaning(current.configuration, tenant) {
                if revoke, case .tenant = scope { throw .credentialUnchanged(tenant.id) }
                report.unchanged.append(tenant.id)
                continue
            }
            changed.append(tenant)
        }
        let validations = await validateAll(changed)
        for (index, (tenant, validation)) in zip(changed, validations).enumerated() {
            switch validation {
            case .invalid(let message):
                report.failures.append(
                    ReloadFailure(file: tenant.sourceFile, tenant: tenant.id, message: message, at: now))
            case .valid(let runtime):
                let current = router.runtime(for: tenant.id)
                let rotated = current.map { $0.credentialIdentity != runtime.credentialIdentity } ?? false
                if revoke, !rotated, current != nil, case .tenant = scope {
                    // Never opened: nothing to drain.
                    for swap in swaps { await swap.runtime.shutdown() }
                    for case .valid(let unused) in validations[index...] { await unused.shutdown() }
                    throw .credentialUnchanged(tenant.id)
                }
                swaps.append(Swap(runtime: runtime, revokePrevious: revoke && rotated))
            }
        }
        let present = Set(load.tenants.map(\.id)).union(load.failures.compactMap(\.tenantID))
        let removals = router.tenantIDs.filter { id in
            guard scope.covers(id), !present.contains(id) else { return false }
            // A file that failed before its tenant ID could be read keeps its tenant running.
            guard let file = router.runtime(for: id)?.configuration.sourceFile else { return true }
            return !failedFiles.contains(file)
        }

        // 2. Swap each tenant atomically (sends that look it up from now on get its new runtime)
        //    and retire its old runtime at once: drain, or, revoked, cut its connections now.
        //    Then record, count, log and tell the observers (the API key index follows the swap)
        //    while the old runtimes finish.
        let finalReport = await withTaskGroup(of: Void.self, returning: ReloadReport.self) { group in
            var report = report
            for swap in swaps {
                let id = swap.runtime.id
                if let old = router.exchange(swap.runtime) {
                    if swap.revokePrevious {
                        // Here, not in a child task: the connections are cut now, not when a thread is free.
                        await old.revoke()
                        report.revoked.append(id)
                    } else {
                        group.addTask { await old.shutdown() }
                    }
                    report.reloaded.append(id)
                } else {
                    report.added.append(id)
                }
            }
            for id in removals {
                if let old = router.detach(tenant: id) {
                    group.addTask { await old.shutdown() }
                    report.removed.append(id)
                }
            }
            let observers = record(report, scope: scope, swaps: swaps, at: now)
            countAndLog(report)
            logWarnings(load, for: Set(swaps.map { $0.runtime.configuration.sourceFile }))
            for observer in observers { observer(report) }
            await group.waitForAll()
            return report
        }
        return finalReport
    }

    /// Updates the tenants' reload states and the failure list; returns the observers to call.
    private func record(_ report: ReloadReport, scope: Scope, swaps: [Swap], at now: Date)
        -> [@Sendable (ReloadReport) -> Void]
    {
        state.withLock { state in
            for swap in swaps {
                let id = swap.runtime.id
                var status = state.statuses[id] ?? TenantReloadStatus(tenant: id)
                status.file = swap.runtime.configuration.sourceFile
                status.loadedAt = now
                status.credentialIdentity = swap.runtime.credentialIdentity
                status.lastReloadAt = now
                status.lastError = nil
                status.lastErrorAt = nil
                status.consecutiveFailures = 0
                status.swaps += 1
                state.statuses[id] = status
            }
            for id in report.unchanged {
                var status = state.statuses[id] ?? TenantReloadStatus(tenant: id)
                if status.loadedAt == nil, let runtime = router.runtime(for: id) {
                    status.file = runtime.configuration.sourceFile
                    status.loadedAt = now
                    status.credentialIdentity = runtime.credentialIdentity
                }
                status.lastReloadAt = now
                status.lastError = nil
                status.lastErrorAt = nil
                status.consecutiveFailures = 0
                state.statuses[id] = status
            }
            for failure in report.failures {
                guard let id = failure.tenant else { continue }
                var status = state.statuses[id] ?? TenantReloadStatus(tenant: id)
                status.lastReloadAt = now
                status.lastError = failure.message
                status.lastErrorAt = now
                status.consecutiveFailures += 1
                state.statuses[id] = status
            }
            for id in report.removed { state.statuses[id] = nil }
            switch scope {
            case .all:
                state.failures = report.failures
                // Failed tenants that are not running and whose file is gone: forget them.
                let keep = Set(router.tenantIDs).union(report.failures.compactMap(\.tenant))
                for id in state.statuses.keys where !keep.contains(id) { state.statuses[id] = nil }
            case .tenant(let id):
                let file = router.runtime(for: id)?.configuration.sourceFile
                state.failures.removeAll { $0.tenant == id || (file != nil && $0.file == file) }
                state.failures += report.failures
                state.failures.sort { $0.file < $1.file }
            }
            if report.changedRuntimes { state.generation &+= 1 }
            return state.observers
        }
    }

    private func countAndLog(_ report: ReloadReport) {
        for id in report.added + report.reloaded {
            counter("herald_reloads_total", tenant: id.rawValue).increment()
        }
        for failure in report.failures {
            counter("herald_reload_failures_total", tenant: failure.tenant?.rawValue ?? "unknown").increment()
            logger.error(
                "tenant reload failed; the running configuration stays",
                metadata: [
                    "herald.tenant": "\(failure.tenant.map(\.rawValue) ?? "unknown")", "herald.file": "\(failure.file)",
                    "herald.error": "\(failure.message)", "herald.trigger": "\(report.trigger)",
                ])
        }
        for id in report.revoked {
            logger.notice(
                "tenant credential revoked: old connections closed at once", metadata: ["herald.tenant": "\(id)"])
        }
        if report.changedRuntimes || !report.failures.isEmpty {
            logger.notice(
                "tenants reloaded",
                metadata: [
                    "herald.trigger": "\(report.trigger)", "herald.added": "\(report.added.count)",
                    "herald.reloaded": "\(report.reloaded.count)", "herald.revoked": "\(report.revoked.count)",
                    "herald.removed": "\(report.removed.count)", "herald.unchanged": "\(report.unchanged.count)",
                    "herald.failed": "\(report.failures.count)",
                ])
        } else {
            logger.debug("tenants reloaded: nothing changed", metadata: ["herald.trigger": "\(report.trigger)"])
        }
    }

    /// Logs the load's warnings (a key file others can read) for the files whose tenant was just
    /// added or changed: once per change, not at every reload.
    private func logWarnings(_ load: TenantDirectoryLoad, for files: Set<String>) {
        for warning in load.warnings where files.contains(warning.location.file) {
            logger.warning(
                "tenant file loaded with a warning",
                metadata: [
                    "herald.file": "\(warning.location)", "herald.field": "\(warning.field)",
                    "herald.warning": "\(warning.message)",
                ])
        }
    }

    private func counter(_ label: String, tenant: String) -> Counter {
        if let factory = configuration.metricsFactory {
            return Counter(label: label, dimensions: [("tenant", tenant)], factory: factory)
        }
        return Counter(label: label, dimensions: [("tenant", tenant)])
    }

    /// True when two configurations mean the same: equal except for where plugin entries sit
    /// in the file (a comment added above them moves their lines, nothing else).
    static func sameMeaning(_ a: TenantConfiguration, _ b: TenantConfiguration) -> Bool {
        func normalized(_ tenant: TenantConfiguration) -> TenantConfiguration {
            var tenant = tenant
            tenant.plugins = tenant.plugins.map { plugin in
                var plugin = plugin
                plugin.location = SourceLocation(file: plugin.location.file, line: 0, column: 0)
                return plugin
            }
            return tenant
        }
        return normalized(a) == normalized(b)
    }

    // MARK: Fingerprints (for the watcher)

    /// What the directory and the running tenants' key, certificate and CA files look like now.
    /// The directory's fingerprint now; files `earlier` stamped and nobody wrote since are not read again.
    func currentFingerprint(reusing earlier: DirectoryFingerprint? = nil) -> DirectoryFingerprint {
        DirectoryFingerprint.take(
            directory: configuration.tenantsDirectory, extraFiles: runningReferences(), reusing: earlier)
    }

    private func runningReferences() -> [String] {
        router.currentRuntimes.flatMap { DirectoryFingerprint.referencedFiles(of: $0.configuration) }
    }

    /// The fingerprint taken at the start of the last full reload.
    var lastFingerprint: DirectoryFingerprint? { state.withLock { $0.fingerprint } }
}
