import Foundation
import GRDB

// Usage per tenant and hour (migration v14).
extension SQLitePushStore: UsageLedger {
    public func addUsage(_ counts: [UsageCount]) async throws {
        guard !counts.isEmpty else { return }
        try await pool.write { db in
            for count in counts {
                try db.execute(
                    sql: """
                        INSERT INTO usage_hour (tenant, hour_ms, kind, count) VALUES (?, ?, ?, ?)
                        ON CONFLICT (tenant, hour_ms, kind) DO UPDATE SET count = count + excluded.count
                        """,
                    arguments: [count.tenant, Self.clampedMillis(count.hour), count.kind.rawValue, count.count])
            }
        }
    }

    public func usage(tenant: String?, from: Date, to: Date) async throws -> [UsageCount] {
        let (low, high) = (Self.clampedMillis(from), Self.clampedMillis(to))
        return try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT tenant, hour_ms, kind, count FROM usage_hour
                    WHERE hour_ms >= ? AND hour_ms < ? AND (? IS NULL OR tenant = ?)
                    ORDER BY hour_ms, tenant, kind
                    """,
                arguments: [low, high, tenant, tenant]
            ).compactMap { row in
                // A kind this version does not know (written by a newer one) is left out.
                let kind: String = row[2]
                return UsageKind(rawValue: kind).map {
                    UsageCount(tenant: row[0], hour: Self.date(row[1]), kind: $0, count: row[3])
                }
            }
        }
    }

    public func pruneUsage(before cutoff: Date) async throws -> Int {
        let millis = Self.clampedMillis(cutoff)
        return try await pool.write { db in
            try db.execute(sql: "DELETE FROM usage_hour WHERE hour_ms < ?", arguments: [millis])
            return db.changesCount
        }
    }
}
