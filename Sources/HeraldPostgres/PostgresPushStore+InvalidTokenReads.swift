import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// The `feedback` plugin's invalid-token lookup, read together: with `refuse` set (its default),
// every send of the tenant waits for one before it goes, so a batch sending 100 items at once
// would ask PostgreSQL 100 single-row questions at a time, a round trip each. The lookups that
// arrive while a read runs go together into the next one (``GroupCommit``): one prepared
// statement joining the asked keys to `invalid_token` by its primary key. Each lookup still reads
// the store as it is when its read runs (a token recorded by another instance a moment ago is
// found), and waits for at most the read under way plus its own.

/// One lookup waiting for the next read: the primary key of `invalid_token`.
struct InvalidTokenKey: Sendable, Hashable {
    var tenant: String
    var environment: String
    var token: String
    var topic: String
}

extension PostgresPushStore {
    /// The most lookups in one read (about 110 bytes each on the wire).
    static let lookupsPerRead = 1_000

    public func invalidToken(tenant: TenantID, token: DeviceToken, topic: String, environment: APNsEnvironment)
        async throws -> InvalidTokenRecord?
    {
        try await invalidTokenReads.submit(
            InvalidTokenKey(tenant: tenant.rawValue, environment: environment.rawValue, token: token.hex, topic: topic))
    }

    /// Reads the records of `keys` in one statement and answers each key in order (nil: none).
    /// The read runs in a task of its own: a waiting caller that gives up (its lookup's bound,
    /// its cancellation) takes nobody else's answer with it.
    static func readInvalidTokens(_ keys: [InvalidTokenKey], client: BoundedPostgresClient, logger: Logger) async
        -> [Result<InvalidTokenRecord?, any Error>]
    {
        let read = Task { () async throws -> [InvalidTokenKey: InvalidTokenRecord] in
            var tenants: [String] = []
            var environments: [String] = []
            var tokens: [String] = []
            var topics: [String] = []
            tenants.reserveCapacity(keys.count)
            environments.reserveCapacity(keys.count)
            tokens.reserveCapacity(keys.count)
            topics.reserveCapacity(keys.count)
            for key in keys {
                tenants.append(key.tenant)
                environments.append(key.environment)
                tokens.append(key.token)
                topics.append(key.topic)
            }
            let rows = try await client.execute(
                Prepared<InvalidTokensText>(tenants, environments, tokens, topics), logger: logger)
            var found: [InvalidTokenKey: InvalidTokenRecord] = [:]
            for row in rows {
                let record = try invalidTokenRecord(row)
                let tenant = try row.makeRandomAccess()[InvalidTokensText.tenantColumn].decode(String.self)
                let key = InvalidTokenKey(
                    tenant: tenant, environment: record.environment.rawValue, token: record.token.hex, topic: record.topic)
                found[key] = record
            }
            return found
        }
        do {
            let found = try await read.value
            return keys.map { .success(found[$0]) }
        } catch {
            return keys.map { _ in .failure(error) }
        }
    }

    /// The records of the keys given as four arrays, one element a key (a key asked twice is
    /// answered twice). The columns are ``invalidTokenColumns``, then the tenant.
    enum InvalidTokensText: PreparedText {
        static let name = "herald_invalid_tokens"
        static let sql = """
            SELECT \(invalidTokenColumns), tenant FROM invalid_token
            JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS asked(a_tenant, a_environment, a_token, a_topic)
              ON tenant = a_tenant AND environment = a_environment AND token = a_token AND topic = a_topic
            """
        static let types: [PostgresDataType] = [.textArray, .textArray, .textArray, .textArray]
        static let tenantColumn = 7
    }
}
