import Foundation
import HeraldCore

/// One broadcast channel a tenant holds on APNs' channel management service, as Herald keeps
/// it: so that a tenant lists its channels without asking APNs, and counts them against
/// Apple's limit.
public struct ChannelRecord: Sendable, Hashable {
    public var tenant: String
    public var id: ChannelID
    /// The app's bundle ID the channel belongs to.
    public var bundleID: String
    public var environment: APNsEnvironment
    public var storagePolicy: ChannelStoragePolicy
    /// The tenant's own name for it (at most ``maximumLabelLength`` characters); nil when none.
    public var label: String?
    public var createdAt: Date

    /// The longest label, in Unicode scalars (JSON Schema's characters).
    public static let maximumLabelLength = 200

    public init(
        tenant: String, id: ChannelID, bundleID: String, environment: APNsEnvironment, storagePolicy: ChannelStoragePolicy,
        label: String?, createdAt: Date
    ) {
        self.tenant = tenant
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.storagePolicy = storagePolicy
        self.label = label
        self.createdAt = createdAt
    }
}

/// A tenant's broadcast channels (migration `v15-channels`), shared by every instance on one
/// store. A channel is known by its tenant, environment and ID: the same ID under another
/// tenant is another row, never visible to the first.
public protocol ChannelDirectory: Sendable {
    /// Adds a channel, or replaces the one with the same tenant, environment and ID.
    func saveChannel(_ channel: ChannelRecord) async throws
    /// The channel, or nil when the tenant holds none with that ID in that environment.
    func channel(tenant: String, environment: APNsEnvironment, id: ChannelID) async throws -> ChannelRecord?
    /// The tenant's channels in order of ID, `limit` at most after `after` (an ID, for paging);
    /// `environment` and `bundleID` narrow it when given.
    func channels(
        tenant: String, environment: APNsEnvironment?, bundleID: String?, after: ChannelID?, limit: Int
    ) async throws -> [ChannelRecord]
    /// How many channels the tenant holds for `bundleID` in `environment` (Apple's limit is per
    /// app and environment).
    func channelCount(tenant: String, environment: APNsEnvironment, bundleID: String) async throws -> Int
    /// Removes a channel; false when there was none.
    func deleteChannel(tenant: String, environment: APNsEnvironment, id: ChannelID) async throws -> Bool
    /// Makes the tenant's list for `bundleID` in `environment` what APNs says it is: `ids` not
    /// held are added (storage policy from `policies`, label none, created now), held ones not
    /// in `ids` are removed. Returns how many were added and removed.
    func replaceChannels(
        tenant: String, environment: APNsEnvironment, bundleID: String, with ids: [ChannelID],
        policies: [ChannelID: ChannelStoragePolicy], now: Date
    ) async throws -> (added: Int, removed: Int)
}
