import Foundation
import HeraldStore
import PostgresNIO

// Usage per tenant and hour (migration v14), added to by every instance.
extension PostgresPushStore: UsageLedger {
    public func addUsage(_ counts: [UsageCount]) async throws {
        guard !counts.isEmpty else { return }
        // One statement: the counts as arrays, unnested.
        let tenants = counts.map(\.tenant)
        let hours = counts.map { Self.millis($0.hour) }
        let kinds = counts.map(\.kind.rawValue)
        let values = counts.map(\.count)
        try await client.query(
            """
            INSERT INTO usage_hour (tenant, hour_ms, kind, count)
            SELECT * FROM unnest(\(tenants)::text[], \(hours)::bigint[], \(kinds)::text[], \(values)::bigint[])
            ON CONFLICT (tenant, hour_ms, kind) DO UPDATE SET count = usage_hour.count + excluded.count
            """, logger: logger)
    }

    public func usage(tenant: String?, from: Date, to: Date) async throws -> [UsageCount] {
        try await client.query(
            """
            SELECT tenant, hour_ms, kind, count FROM usage_hour
            WHERE hour_ms >= \(Self.millis(from)) AND hour_ms < \(Self.millis(to))
              AND (\(tenant)::text IS NULL OR tenant = \(tenant))
            ORDER BY hour_ms, tenant, kind
            """, logger: logger
        ).collect().compactMap { row in
            let cells = row.makeRandomAccess()
            // A kind this version does not know (written by a newer one) is left out.
            guard let kind = UsageKind(rawValue: try cells[2].decode(String.self)) else { return nil }
            return UsageCount(
                tenant: try cells[0].decode(String.self), hour: Self.date(try cells[1].decode(Int64.self)), kind: kind,
                count: try cells[3].decode(Int64.self))
        }
    }

    public func pruneUsage(before cutoff: Date) async throws -> Int {
        try await client.query("DELETE FROM usage_hour WHERE hour_ms < \(Self.millis(cutoff)) RETURNING 1", logger: logger)
            .collect().count
    }
}
