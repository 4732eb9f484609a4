import Foundation
import HeraldCore
import HeraldStore
import PostgresNIO

// A tenant's broadcast channels (migration v15), shared by every instance.
extension PostgresPushStore: ChannelDirectory {
    public func saveChannel(_ channel: ChannelRecord) async throws {
        let policy = Int32(channel.storagePolicy.rawValue)
        try await client.query(
            """
            INSERT INTO channel (tenant, environment, id, bundle_id, storage_policy, label, created_ms)
            VALUES (\(channel.tenant), \(channel.environment.rawValue), \(channel.id.rawValue), \(channel.bundleID),
                    \(policy), \(channel.label), \(Self.millis(channel.createdAt)))
            ON CONFLICT (tenant, environment, id) DO UPDATE SET
                bundle_id = excluded.bundle_id, storage_policy = excluded.storage_policy,
                label = excluded.label, created_ms = excluded.created_ms
            """, logger: logger)
    }

    public func channel(tenant: String, environment: APNsEnvironment, id: ChannelID) async throws -> ChannelRecord? {
        try await client.query(
            """
            SELECT tenant, environment, id, bundle_id, storage_policy, label, created_ms FROM channel
            WHERE tenant = \(tenant) AND environment = \(environment.rawValue) AND id = \(id.rawValue)
            """, logger: logger
        ).collect().compactMap(Self.channelRecord).first
    }

    public func channels(
        tenant: String, environment: APNsEnvironment?, bundleID: String?, after: ChannelID?, limit: Int
    ) async throws -> [ChannelRecord] {
        let environmentText = environment?.rawValue
        let afterText = after?.rawValue
        return try await client.query(
            """
            SELECT tenant, environment, id, bundle_id, storage_policy, label, created_ms FROM channel
            WHERE tenant = \(tenant) AND (\(environmentText)::text IS NULL OR environment = \(environmentText))
              AND (\(bundleID)::text IS NULL OR bundle_id = \(bundleID))
              AND (\(afterText)::text IS NULL OR id > \(afterText))
            ORDER BY id LIMIT \(Int64(max(0, limit)))
            """, logger: logger
        ).collect().compactMap(Self.channelRecord)
    }

    public func channelCount(tenant: String, environment: APNsEnvironment, bundleID: String) async throws -> Int {
        let rows = try await client.query(
            """
            SELECT COUNT(*) FROM channel
            WHERE tenant = \(tenant) AND environment = \(environment.rawValue) AND bundle_id = \(bundleID)
            """, logger: logger
        ).collect()
        return Int(try rows.first?.makeRandomAccess()[0].decode(Int64.self) ?? 0)
    }

    public func deleteChannel(tenant: String, environment: APNsEnvironment, id: ChannelID) async throws -> Bool {
        try await !client.query(
            """
            DELETE FROM channel WHERE tenant = \(tenant) AND environment = \(environment.rawValue) AND id = \(id.rawValue)
            RETURNING 1
            """, logger: logger
        ).collect().isEmpty
    }

    public func replaceChannels(
        tenant: String, environment: APNsEnvironment, bundleID: String, with ids: [ChannelID],
        policies: [ChannelID: ChannelStoragePolicy], now: Date
    ) async throws -> (added: Int, removed: Int) {
        let wanted = ids.map(\.rawValue)
        let wantedPolicies = ids.map { Int32((policies[$0] ?? .mostRecentMessageStored).rawValue) }
        let logger = self.logger
        let environmentText = environment.rawValue
        let createdMillis = Self.millis(now)
        return try await client.withTransaction(logger: logger) { connection in
            let removed = try await connection.query(
                """
                DELETE FROM channel
                WHERE tenant = \(tenant) AND environment = \(environmentText) AND bundle_id = \(bundleID)
                  AND NOT (id = ANY(\(wanted)::text[]))
                RETURNING 1
                """, logger: logger
            ).collect().count
            let added = try await connection.query(
                """
                INSERT INTO channel (tenant, environment, id, bundle_id, storage_policy, label, created_ms)
                SELECT \(tenant), \(environmentText), new.id, \(bundleID), new.policy, NULL, \(createdMillis)
                FROM unnest(\(wanted)::text[], \(wantedPolicies)::integer[]) AS new(id, policy)
                ON CONFLICT DO NOTHING
                RETURNING 1
                """, logger: logger
            ).collect().count
            return (added, removed)
        }
    }

    /// A row as a record; a row this version cannot read (written by a newer one) is left out.
    private static func channelRecord(_ row: PostgresRow) -> ChannelRecord? {
        let cells = row.makeRandomAccess()
        guard let tenant = try? cells[0].decode(String.self),
            let environment = (try? cells[1].decode(String.self)).flatMap(APNsEnvironment.init(rawValue:)),
            let id = (try? cells[2].decode(String.self)).flatMap({ try? ChannelID($0) }),
            let bundleID = try? cells[3].decode(String.self),
            let policy = (try? cells[4].decode(Int32.self)).flatMap({ ChannelStoragePolicy(rawValue: Int($0)) }),
            let created = try? cells[6].decode(Int64.self)
        else { return nil }
        return ChannelRecord(
            tenant: tenant, id: id, bundleID: bundleID, environment: environment, storagePolicy: policy,
            label: try? cells[5].decode(String?.self), createdAt: date(created))
    }
}
