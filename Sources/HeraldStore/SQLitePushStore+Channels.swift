import Foundation
import GRDB
import HeraldCore

// A tenant's broadcast channels (migration v15).
extension SQLitePushStore: ChannelDirectory {
    public func saveChannel(_ channel: ChannelRecord) async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO channel (tenant, environment, id, bundle_id, storage_policy, label, created_ms)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (tenant, environment, id) DO UPDATE SET
                        bundle_id = excluded.bundle_id, storage_policy = excluded.storage_policy,
                        label = excluded.label, created_ms = excluded.created_ms
                    """,
                arguments: [
                    channel.tenant, channel.environment.rawValue, channel.id.rawValue, channel.bundleID,
                    channel.storagePolicy.rawValue, channel.label, Self.clampedMillis(channel.createdAt),
                ])
        }
    }

    public func channel(tenant: String, environment: APNsEnvironment, id: ChannelID) async throws -> ChannelRecord? {
        try await pool.read { db in
            try Row.fetchOne(
                db, sql: "\(Self.channelColumns) WHERE tenant = ? AND environment = ? AND id = ?",
                arguments: [tenant, environment.rawValue, id.rawValue]
            ).flatMap(Self.channelRecord)
        }
    }

    public func channels(
        tenant: String, environment: APNsEnvironment?, bundleID: String?, after: ChannelID?, limit: Int
    ) async throws -> [ChannelRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    \(Self.channelColumns)
                    WHERE tenant = ? AND (? IS NULL OR environment = ?) AND (? IS NULL OR bundle_id = ?)
                      AND (? IS NULL OR id > ?)
                    ORDER BY id LIMIT ?
                    """,
                arguments: [
                    tenant, environment?.rawValue, environment?.rawValue, bundleID, bundleID, after?.rawValue,
                    after?.rawValue, max(0, limit),
                ]
            ).compactMap(Self.channelRecord)
        }
    }

    public func channelCount(tenant: String, environment: APNsEnvironment, bundleID: String) async throws -> Int {
        try await pool.read { db in
            try Int.fetchOne(
                db, sql: "SELECT COUNT(*) FROM channel WHERE tenant = ? AND environment = ? AND bundle_id = ?",
                arguments: [tenant, environment.rawValue, bundleID]) ?? 0
        }
    }

    public func deleteChannel(tenant: String, environment: APNsEnvironment, id: ChannelID) async throws -> Bool {
        try await pool.write { db in
            try db.execute(
                sql: "DELETE FROM channel WHERE tenant = ? AND environment = ? AND id = ?",
                arguments: [tenant, environment.rawValue, id.rawValue])
            return db.changesCount > 0
        }
    }

    public func replaceChannels(
        tenant: String, environment: APNsEnvironment, bundleID: String, with ids: [ChannelID],
        policies: [ChannelID: ChannelStoragePolicy], now: Date
    ) async throws -> (added: Int, removed: Int) {
        let wanted = Set(ids)
        return try await pool.write { db in
            let held = Set(
                try String.fetchAll(
                    db, sql: "SELECT id FROM channel WHERE tenant = ? AND environment = ? AND bundle_id = ?",
                    arguments: [tenant, environment.rawValue, bundleID]
                ).compactMap { try? ChannelID($0) })
            // Each statement compiled once for the whole list (a sync may bring thousands).
            var removed = 0
            let delete = try db.cachedStatement(sql: "DELETE FROM channel WHERE tenant = ? AND environment = ? AND id = ?")
            for gone in held.subtracting(wanted) {
                try delete.execute(arguments: [tenant, environment.rawValue, gone.rawValue])
                removed += db.changesCount
            }
            var added = 0
            let insert = try db.cachedStatement(
                sql: """
                    INSERT INTO channel (tenant, environment, id, bundle_id, storage_policy, label, created_ms)
                    VALUES (?, ?, ?, ?, ?, NULL, ?) ON CONFLICT DO NOTHING
                    """)
            for new in wanted.subtracting(held).sorted() {
                try insert.execute(arguments: [
                    tenant, environment.rawValue, new.rawValue, bundleID,
                    (policies[new] ?? .mostRecentMessageStored).rawValue, Self.clampedMillis(now),
                ])
                added += db.changesCount
            }
            return (added, removed)
        }
    }

    private static let channelColumns =
        "SELECT tenant, environment, id, bundle_id, storage_policy, label, created_ms FROM channel"

    /// A row as a record; a row this version cannot read (written by a newer one) is left out.
    private static func channelRecord(_ row: Row) -> ChannelRecord? {
        let environmentText: String = row[1]
        let idText: String = row[2]
        let policyValue: Int = row[4]
        guard let environment = APNsEnvironment(rawValue: environmentText), let id = try? ChannelID(idText),
            let policy = ChannelStoragePolicy(rawValue: policyValue)
        else { return nil }
        return ChannelRecord(
            tenant: row[0], id: id, bundleID: row[3], environment: environment, storagePolicy: policy, label: row[5],
            createdAt: date(row[6]))
    }
}
