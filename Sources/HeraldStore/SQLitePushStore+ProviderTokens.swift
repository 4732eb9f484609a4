import Foundation
import GRDB
import HeraldCore

// Provider tokens kept in the file (migration v5), so a restarted instance sends the token it
// signed before instead of a new one within APNs' 20 minutes.
extension SQLitePushStore: ProviderTokenStore {
    public func providerToken(teamID: String, keyID: String, keyFingerprint: String) async throws
        -> SharedProviderToken?
    {
        try await pool.read { db in
            try Self.fetchProviderToken(db, teamID: teamID, keyID: keyID, keyFingerprint: keyFingerprint)
        }
    }

    public func replaceProviderToken(_ token: SharedProviderToken, replacing: Date?) async throws
        -> SharedProviderToken
    {
        try await pool.write { db in
            if let replacing {
                try db.execute(
                    sql: """
                        UPDATE provider_token SET token = ?, issued_at_ms = ?
                        WHERE team_id = ? AND key_id = ? AND key_fingerprint = ? AND issued_at_ms = ?
                        """,
                    arguments: [
                        token.token, Self.clampedMillis(token.issuedAt), token.teamID, token.keyID, token.keyFingerprint,
                        Self.clampedMillis(replacing),
                    ])
            } else {
                try db.execute(
                    sql: """
                        INSERT INTO provider_token (team_id, key_id, key_fingerprint, token, issued_at_ms)
                        VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                        """,
                    arguments: [
                        token.teamID, token.keyID, token.keyFingerprint, token.token, Self.clampedMillis(token.issuedAt),
                    ])
            }
            guard
                let stored = try Self.fetchProviderToken(
                    db, teamID: token.teamID, keyID: token.keyID, keyFingerprint: token.keyFingerprint)
            else { throw StoreError.notFound("the provider token of key \(token.keyID)") }
            return stored
        }
    }

    private static func fetchProviderToken(_ db: Database, teamID: String, keyID: String, keyFingerprint: String)
        throws -> SharedProviderToken?
    {
        try Row.fetchOne(
            db,
            sql: """
                SELECT token, issued_at_ms FROM provider_token
                WHERE team_id = ? AND key_id = ? AND key_fingerprint = ?
                """,
            arguments: [teamID, keyID, keyFingerprint]
        ).map { row in
            SharedProviderToken(
                teamID: teamID, keyID: keyID, keyFingerprint: keyFingerprint, token: row[0], issuedAt: date(row[1]))
        }
    }
}
