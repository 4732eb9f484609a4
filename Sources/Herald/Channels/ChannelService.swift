import Foundation
import HeraldCore
import HeraldStore
import Logging

/// Why a channel call was refused or failed: refused by Herald before APNs was asked, or
/// answered by APNs with an error.
public struct ChannelError: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The tenant holds no such channel (or it is another tenant's).
        case notFound = "channel_not_found"
        /// The tenant may not broadcast to that bundle ID.
        case bundleNotAllowed = "bundle_not_allowed"
        /// The tenant has no channel management endpoint for the environment.
        case environmentUnavailable = "environment_unavailable"
        /// The app holds as many channels as APNs allows in that environment.
        case limitReached = "channel_limit_reached"
        /// The storage policy refuses the broadcast's expiration.
        case expirationNotAllowed = "expiration_not_allowed"
        /// APNs answered the call with an error (``reason``, ``status``).
        case refusedByAPNs = "apns_refused"
        /// APNs' answer did not hold what the call expects.
        case badAnswer = "bad_apns_answer"
    }

    public var code: Code
    public var message: String
    /// APNs' reason, when APNs answered.
    public var reason: APNsReason?
    /// APNs' status, when APNs answered.
    public var status: Int?
    /// The request field it is about, when it is one.
    public var field: String?

    public init(_ code: Code, _ message: String, reason: APNsReason? = nil, status: Int? = nil, field: String? = nil) {
        self.code = code
        self.message = message
        self.reason = reason
        self.status = status
        self.field = field
    }

    public var description: String { message }
}

/// A tenant's broadcast channels: the calls to APNs' channel management service with the
/// tenant's own credential (on a connection of its transport's own to that service), and the
/// tenant's list of them in the store, so that listing asks nothing of APNs and the count
/// against Apple's limit is known before a creation goes out.
///
/// A tenant sees only its own channels: every call names the tenant, and a channel is looked
/// up under it; another tenant's ID is "not found" like a missing one.
public struct ChannelService: Sendable {
    /// APNs' limit per app and environment.
    public static let channelsPerApp = 10_000

    public let router: Router
    public let store: any ChannelDirectory
    /// How long a call may take (queue time included).
    public var timeout: Duration = .seconds(30)
    /// The limit checked before a creation goes out (``channelsPerApp``; lower in tests).
    public var limit: Int = ChannelService.channelsPerApp

    public init(router: Router, store: any ChannelDirectory) {
        self.router = router
        self.store = store
    }

    /// The runtime, the bundle ID (checked; defaulted when the tenant has one) and the environment
    /// (defaulted) of a call.
    private func resolve(tenant: TenantID, bundleID: String?, environment: APNsEnvironment?) throws
        -> (TenantRuntime, String, APNsEnvironment)
    {
        guard let runtime = router.runtime(for: tenant) else { throw PushError.unknownTenant(tenant.rawValue) }
        let configuration = runtime.configuration
        let bundles = configuration.broadcastBundleIDs
        let bundle: String
        if let bundleID {
            guard bundles.contains(bundleID) else {
                throw ChannelError(
                    .bundleNotAllowed,
                    "'\(bundleID.prefix(255))' is not a bundle ID this tenant may broadcast to; its bundle IDs: "
                        + (bundles.isEmpty ? "none" : bundles.joined(separator: ", ")),
                    field: "bundle_id")
            }
            bundle = bundleID
        } else if bundles.count == 1 {
            bundle = bundles[0]
        } else {
            throw ChannelError(
                .bundleNotAllowed,
                bundles.isEmpty
                    ? "this tenant has no topic it may broadcast to (a bundle ID, or <bundle>.push-type.liveactivity)"
                    : "name the bundle ID: this tenant has several (\(bundles.joined(separator: ", ")))",
                field: "bundle_id")
        }
        let environment = environment ?? configuration.endpoints.defaultEnvironment
        guard configuration.endpoints.channelEndpoint(for: environment) != nil else {
            throw ChannelError(
                .environmentUnavailable, "this tenant has no channel management endpoint for \(environment)", field: "environment")
        }
        return (runtime, bundle, environment)
    }

    private func call(_ call: ChannelCall, runtime: TenantRuntime, environment: APNsEnvironment) async throws -> APNsResponse {
        try await runtime.transport.manageChannels(
            call, requestID: router.newRequestID(), environment: environment, deadline: .now + timeout)
    }

    private static func refused(_ response: APNsResponse, doing what: String) -> ChannelError {
        let reason = response.reason
        return ChannelError(
            .refusedByAPNs, "APNs refused to \(what): \(response.status) \(reason?.wireValue ?? "(no reason)")",
            reason: reason, status: response.status)
    }

    /// Creates a channel on APNs and keeps it. Refused before APNs is asked when the tenant's
    /// app already holds ``limit`` channels in that environment.
    public func create(
        tenant: TenantID, bundleID: String?, environment: APNsEnvironment?, storagePolicy: ChannelStoragePolicy,
        label: String?
    ) async throws -> ChannelRecord {
        let (runtime, bundle, environment) = try resolve(tenant: tenant, bundleID: bundleID, environment: environment)
        let held = try await store.channelCount(tenant: tenant.rawValue, environment: environment, bundleID: bundle)
        guard held < limit else {
            throw ChannelError(
                .limitReached,
                "\(bundle) holds \(held) channels in \(environment), APNs' limit is \(limit): delete channels no longer used")
        }
        let response = try await call(.create(bundleID: bundle, storagePolicy: storagePolicy), runtime: runtime, environment: environment)
        guard response.status == 201 else { throw Self.refused(response, doing: "create a channel") }
        let id: ChannelID
        do {
            id = try ChannelAnswer.createdChannel(response)
        } catch {
            throw ChannelError(.badAnswer, "APNs created a channel but its answer is unusable: \(error.message)")
        }
        let record = ChannelRecord(
            tenant: tenant.rawValue, id: id, bundleID: bundle, environment: environment, storagePolicy: storagePolicy,
            label: label, createdAt: router.configuration.clock.date)
        try await store.saveChannel(record)
        return record
    }

    /// The tenant's kept channel.
    public func stored(tenant: TenantID, environment: APNsEnvironment?, id: ChannelID) async throws -> ChannelRecord {
        let environment = try environmentOf(tenant: tenant, environment)
        guard let record = try await store.channel(tenant: tenant.rawValue, environment: environment, id: id) else {
            throw ChannelError(.notFound, "this tenant holds no channel \(id) in \(environment)")
        }
        return record
    }

    /// Reads a kept channel from APNs (its storage policy as APNs has it). A channel APNs no
    /// longer knows (`ChannelNotRegistered`) is dropped from the store and not found.
    public func read(tenant: TenantID, environment: APNsEnvironment?, id: ChannelID) async throws -> ChannelRecord {
        var record = try await stored(tenant: tenant, environment: environment, id: id)
        let (runtime, _, _) = try resolve(tenant: tenant, bundleID: record.bundleID, environment: record.environment)
        let response = try await call(.read(bundleID: record.bundleID, channel: id), runtime: runtime, environment: record.environment)
        if response.reason == .channelNotRegistered {
            _ = try await store.deleteChannel(tenant: tenant.rawValue, environment: record.environment, id: id)
            throw ChannelError(.notFound, "APNs no longer knows channel \(id); it was dropped", reason: .channelNotRegistered)
        }
        guard response.status == 200 else { throw Self.refused(response, doing: "read the channel") }
        let policy: ChannelStoragePolicy
        do {
            policy = try ChannelAnswer.storagePolicy(response)
        } catch {
            throw ChannelError(.badAnswer, "APNs' answer to a channel read is unusable: \(error.message)")
        }
        if policy != record.storagePolicy {
            record.storagePolicy = policy
            try await store.saveChannel(record)
        }
        return record
    }

    /// The tenant's kept channels (no call to APNs).
    public func list(
        tenant: TenantID, environment: APNsEnvironment?, bundleID: String?, after: ChannelID?, limit: Int
    ) async throws -> [ChannelRecord] {
        guard router.runtime(for: tenant) != nil else { throw PushError.unknownTenant(tenant.rawValue) }
        return try await store.channels(
            tenant: tenant.rawValue, environment: environment, bundleID: bundleID, after: after, limit: limit)
    }

    /// How many channels each of the tenant's apps holds in each environment it has a channel
    /// management endpoint for, against APNs' limit.
    public func counts(tenant: TenantID) async throws -> [(bundleID: String, environment: APNsEnvironment, count: Int)] {
        guard let runtime = router.runtime(for: tenant) else { throw PushError.unknownTenant(tenant.rawValue) }
        let configuration = runtime.configuration
        var counts: [(bundleID: String, environment: APNsEnvironment, count: Int)] = []
        for bundle in configuration.broadcastBundleIDs {
            for environment in APNsEnvironment.allCases where configuration.endpoints.channelEndpoint(for: environment) != nil {
                let count = try await store.channelCount(tenant: tenant.rawValue, environment: environment, bundleID: bundle)
                counts.append((bundle, environment, count))
            }
        }
        return counts
    }

    /// How many channels the tenant's app holds in `environment`, and APNs' limit.
    public func count(tenant: TenantID, bundleID: String?, environment: APNsEnvironment?) async throws
        -> (bundleID: String, environment: APNsEnvironment, count: Int, limit: Int)
    {
        let (_, bundle, environment) = try resolve(tenant: tenant, bundleID: bundleID, environment: environment)
        let count = try await store.channelCount(tenant: tenant.rawValue, environment: environment, bundleID: bundle)
        return (bundle, environment, count, limit)
    }

    /// Deletes a kept channel on APNs and from the store. One APNs no longer knows
    /// (`ChannelNotRegistered`) is dropped all the same.
    public func delete(tenant: TenantID, environment: APNsEnvironment?, id: ChannelID) async throws -> ChannelRecord {
        let record = try await stored(tenant: tenant, environment: environment, id: id)
        let (runtime, _, _) = try resolve(tenant: tenant, bundleID: record.bundleID, environment: record.environment)
        let response = try await call(.delete(bundleID: record.bundleID, channel: id), runtime: runtime, environment: record.environment)
        guard response.status == 204 || response.reason == .channelNotRegistered else {
            throw Self.refused(response, doing: "delete the channel")
        }
        _ = try await store.deleteChannel(tenant: tenant.rawValue, environment: record.environment, id: id)
        return record
    }

    /// What a sync changed.
    public struct SyncReport: Sendable {
        public var bundleID: String
        public var environment: APNsEnvironment
        /// Channels APNs has now.
        public var channels: Int
        public var added: Int
        public var removed: Int
    }

    /// Makes the tenant's kept list for the app and environment what APNs says: channels made
    /// elsewhere are imported (their storage policy read from APNs), deleted ones dropped.
    public func sync(tenant: TenantID, bundleID: String?, environment: APNsEnvironment?) async throws -> SyncReport {
        let (runtime, bundle, environment) = try resolve(tenant: tenant, bundleID: bundleID, environment: environment)
        let response = try await call(.list(bundleID: bundle), runtime: runtime, environment: environment)
        guard response.status == 200 else { throw Self.refused(response, doing: "list the channels") }
        let ids: [ChannelID]
        do {
            ids = try ChannelAnswer.channels(response, limit: max(limit, Self.channelsPerApp))
        } catch {
            throw ChannelError(.badAnswer, "APNs' channel list is unusable: \(error.message)")
        }
        let held = Set(
            try await store.channels(
                tenant: tenant.rawValue, environment: environment, bundleID: bundle, after: nil, limit: Int.max / 2
            ).map(\.id))
        let policies = try await storagePolicies(
            of: ids.filter { !held.contains($0) }, bundleID: bundle, runtime: runtime, environment: environment)
        let (added, removed) = try await store.replaceChannels(
            tenant: tenant.rawValue, environment: environment, bundleID: bundle, with: ids, policies: policies,
            now: router.configuration.clock.date)
        return SyncReport(bundleID: bundle, environment: environment, channels: ids.count, added: added, removed: removed)
    }

    /// How many channels a sync reads at once: the tenant's channel connection carries them as
    /// concurrent streams, and APNs' limit of 10,000 channels an app is read in a few seconds.
    static let concurrentReads = 16

    /// The storage policy of each channel, read from APNs, at most ``concurrentReads`` at once;
    /// a channel APNs does not answer 200 for (deleted meanwhile) has none. A call that fails
    /// fails the sync.
    private func storagePolicies(
        of ids: [ChannelID], bundleID: String, runtime: TenantRuntime, environment: APNsEnvironment
    ) async throws -> [ChannelID: ChannelStoragePolicy] {
        try await withThrowingTaskGroup(of: (ChannelID, ChannelStoragePolicy?).self) { group in
            var pending = ids.makeIterator()
            func readNext() -> Bool {
                guard let id = pending.next() else { return false }
                group.addTask {
                    let read = try await call(.read(bundleID: bundleID, channel: id), runtime: runtime, environment: environment)
                    return (id, read.status == 200 ? try? ChannelAnswer.storagePolicy(read) : nil)
                }
                return true
            }
            var started = 0
            while started < Self.concurrentReads, readNext() { started += 1 }
            var policies: [ChannelID: ChannelStoragePolicy] = [:]
            while let (id, policy) = try await group.next() {
                if let policy { policies[id] = policy }
                _ = readNext()
            }
            return policies
        }
    }

    /// Sends a broadcast on a kept channel through the tenant's send path (plugins, delivery
    /// policy, circuit), after the channel's storage policy was checked against the
    /// expiration: a channel that stores nothing takes expiration 0 only.
    public func broadcast(tenant: TenantID, notification: HeraldCore.Notification, environment: APNsEnvironment?) async throws
        -> PushResult
    {
        guard let id = notification.channelID else {
            throw ChannelError(.notFound, "a broadcast names its channel", field: "channel_id")
        }
        let record = try await stored(tenant: tenant, environment: environment, id: id)
        if record.storagePolicy == .noMessageStored, let expiration = notification.expiration, expiration != .immediately {
            throw ChannelError(
                .expirationNotAllowed,
                "channel \(id) stores no messages (storage policy 0): a broadcast on it takes expiration 0 only",
                reason: .badExpirationDate, field: "expiration")
        }
        var note = notification
        if note.topic == nil { note.topic = record.bundleID }
        let result = try await router.sendThroughCircuit(tenant: tenant, notification: note, environment: record.environment)
        if result.reason == .channelNotRegistered {
            // APNs no longer knows it (deleted elsewhere): the kept list follows.
            _ = try? await store.deleteChannel(tenant: tenant.rawValue, environment: record.environment, id: id)
        }
        return result
    }

    private func environmentOf(tenant: TenantID, _ environment: APNsEnvironment?) throws -> APNsEnvironment {
        guard let runtime = router.runtime(for: tenant) else { throw PushError.unknownTenant(tenant.rawValue) }
        return environment ?? runtime.configuration.endpoints.defaultEnvironment
    }
}
