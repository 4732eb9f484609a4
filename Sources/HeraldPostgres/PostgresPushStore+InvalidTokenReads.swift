import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// The invalid-token lookups of a tenant's sends under way, read together
// (``HeraldStore/TenantInvalidTokens`` groups them): one prepared statement joining the asked keys
// to `invalid_token` by its primary key, instead of a single-row read and a round trip each.

extension PostgresPushStore {
    public func invalidTokens(tenant: TenantID, lookups: [InvalidTokenLookup]) async throws -> [InvalidTokenRecord?] {
        guard !lookups.isEmpty else { return [] }
        var environments: [String] = []
        var tokens: [String] = []
        var topics: [String] = []
        environments.reserveCapacity(lookups.count)
        tokens.reserveCapacity(lookups.count)
        topics.reserveCapacity(lookups.count)
        for lookup in lookups {
            environments.append(lookup.environment.rawValue)
            tokens.append(lookup.token.hex)
            topics.append(lookup.topic)
        }
        let rows = try await client.execute(
            Prepared<InvalidTokensText>(tenant.rawValue, environments, tokens, topics), logger: logger)
        var found: [InvalidTokenLookup: InvalidTokenRecord] = [:]
        for row in rows {
            let record = try Self.invalidTokenRecord(row)
            found[InvalidTokenLookup(token: record.token, topic: record.topic, environment: record.environment)] = record
        }
        return lookups.map { found[$0] }
    }

    /// The tenant's records of the keys given as three arrays, one element a key (a key asked
    /// twice is answered twice). The columns are ``invalidTokenColumns``.
    enum InvalidTokensText: PreparedText {
        static let name = "herald_invalid_tokens"
        static let sql = """
            SELECT \(invalidTokenColumns) FROM invalid_token
            JOIN unnest($2::text[], $3::text[], $4::text[]) AS asked(a_environment, a_token, a_topic)
              ON environment = a_environment AND token = a_token AND topic = a_topic
            WHERE tenant = $1
            """
        static let types: [PostgresDataType] = [.text, .textArray, .textArray, .textArray]
    }
}
