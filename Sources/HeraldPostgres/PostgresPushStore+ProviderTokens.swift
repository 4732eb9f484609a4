import Foundation
import HeraldCore
import HeraldStore
import PostgresNIO

// Provider tokens shared by every instance on the database (migration v5): whichever instance
// needs a fresh token first signs it and swaps it in; the others read it.
extension PostgresPushStore: ProviderTokenStore {
    public func providerToken(teamID: String, keyID: String, keyFingerprint: String) async throws
        -> SharedProviderToken?
    {
        try await client.query(
            """
            SELECT token, issued_at_ms FROM provider_token
            WHERE team_id = \(teamID) AND key_id = \(keyID) AND key_fingerprint = \(keyFingerprint)
            """, logger: logger
        ).collect().first.map { row in
            let cells = row.makeRandomAccess()
            return SharedProviderToken(
                teamID: teamID, keyID: keyID, keyFingerprint: keyFingerprint, token: try cells[0].decode(String.self),
                issuedAt: Self.date(try cells[1].decode(Int64.self)))
        }
    }

    public func replaceProviderToken(_ token: SharedProviderToken, replacing: Date?) async throws
        -> SharedProviderToken
    {
        let issued = Self.millis(token.issuedAt)
        if let replacing {
            // The row lock makes this a compare-and-swap: of two instances replacing the same
            // token, the second sees the first's issue time and changes nothing.
            try await client.query(
                """
                UPDATE provider_token SET token = \(token.token), issued_at_ms = \(issued)
                WHERE team_id = \(token.teamID) AND key_id = \(token.keyID)
                  AND key_fingerprint = \(token.keyFingerprint) AND issued_at_ms = \(Self.millis(replacing))
                """, logger: logger)
        } else {
            try await client.query(
                """
                INSERT INTO provider_token (team_id, key_id, key_fingerprint, token, issued_at_ms)
                VALUES (\(token.teamID), \(token.keyID), \(token.keyFingerprint), \(token.token), \(issued))
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        guard
            let stored = try await providerToken(
                teamID: token.teamID, keyID: token.keyID, keyFingerprint: token.keyFingerprint)
        else { throw StoreError.notFound("the provider token of key \(token.keyID)") }
        return stored
    }
}
