import Crypto
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldStore
import Testing

/// Provider tokens shared through the store (``ProviderTokenStore``): the compare-and-swap on
/// both backends, and token credential providers that sign once between them and across a
/// restart.
@Suite("Shared provider tokens")
struct ProviderTokenTests {
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    func token(_ jwt: String, at: Date, key: String = "KEY0000001") -> SharedProviderToken {
        SharedProviderToken(teamID: "TEAM000001", keyID: key, keyFingerprint: "0011223344556677", token: jwt, issuedAt: at)
    }

    @Test("one row per key, replaced only by compare-and-swap on its issue time", arguments: StoreBackend.allCases)
    func compareAndSwap(_ backend: StoreBackend) async throws {
        let opened = try await backend.open()
        let store = try #require(opened.store as? any ProviderTokenStore)
        do {
            #expect(try await store.providerToken(teamID: "TEAM000001", keyID: "KEY0000001", keyFingerprint: "0011223344556677") == nil)
            // The first insert wins; a second "first" insert gets the stored one back.
            #expect(try await store.replaceProviderToken(token("a", at: t0), replacing: nil) == token("a", at: t0))
            #expect(try await store.replaceProviderToken(token("b", at: t0.addingTimeInterval(1)), replacing: nil) == token("a", at: t0))
            // Replacing the current one works; replacing a stale one returns the winner.
            let later = t0.addingTimeInterval(3_000)
            #expect(try await store.replaceProviderToken(token("c", at: later), replacing: t0) == token("c", at: later))
            #expect(
                try await store.replaceProviderToken(token("d", at: later.addingTimeInterval(5)), replacing: t0)
                    == token("c", at: later))
            // Another key, or the same key ID with another key (fingerprint), is a row of its own.
            #expect(try await store.replaceProviderToken(token("e", at: t0, key: "KEY0000002"), replacing: nil).token == "e")
            var otherKey = token("f", at: t0)
            otherKey.keyFingerprint = "8899aabbccddeeff"
            #expect(try await store.replaceProviderToken(otherKey, replacing: nil).token == "f")
            #expect(
                try await store.providerToken(teamID: "TEAM000001", keyID: "KEY0000001", keyFingerprint: "0011223344556677")?
                    .token == "c")
        } catch {
            await opened.close()
            throw error
        }
        await opened.close()
    }

    @Test(
        "two providers over one store sign one token between them; after 50 minutes one of them signs the next",
        arguments: StoreBackend.allCases)
    func twoProvidersSignOnce(_ backend: StoreBackend) async throws {
        let opened = try await backend.open()
        let store = try #require(opened.store as? any ProviderTokenStore)
        do {
            let clock = ManualWallClock(t0)
            let key = Secret(bytes: Array(P256.Signing.PrivateKey().pemRepresentation.utf8), origin: "test key")
            let providers = try (0..<2).map { _ in
                try TokenCredentialProvider(
                    teamID: "TEAM000001", keyID: "KEY0000001", privateKey: key, clock: clock, file: "test.yaml",
                    tokenStore: store)
            }
            let first = try #require(try await providers[0].authorization())
            let second = try #require(try await providers[1].authorization())
            #expect(first == second)
            #expect(providers.map(\.tokensCreated).reduce(0, +) == 1)
            // 30 minutes on: still the same token, nobody signs.
            clock.advance(by: 30 * 60)
            #expect(try await providers[1].authorization() == first)
            // 51 minutes: the first to ask signs, the other one takes it from the store.
            clock.advance(by: 21 * 60)
            let renewed = try #require(try await providers[1].authorization())
            #expect(renewed != first)
            #expect(try await providers[0].authorization() == renewed)
            #expect(providers.map(\.tokensCreated).reduce(0, +) == 2)
        } catch {
            await opened.close()
            throw error
        }
        await opened.close()
    }

    @Test("a restarted instance on the same SQLite file sends the token it signed before")
    func restartReusesToken() async throws {
        let directory = Fixtures.temporaryDirectory("herald-store")
        let clock = ManualWallClock(t0)
        let key = Secret(bytes: Array(P256.Signing.PrivateKey().pemRepresentation.utf8), origin: "test key")
        func provider(_ store: SQLitePushStore) throws -> TokenCredentialProvider {
            try TokenCredentialProvider(
                teamID: "TEAM000001", keyID: "KEY0000001", privateKey: key, clock: clock, file: "test.yaml",
                tokenStore: store)
        }
        let before: String
        do {
            let first = try provider(try SQLitePushStore(directory: directory))
            before = try #require(try await first.authorization())
            #expect(first.tokensCreated == 1)
        }
        clock.advance(by: 5 * 60)
        let restarted = try provider(try SQLitePushStore(directory: directory))
        #expect(try await restarted.authorization() == before)
        #expect(restarted.tokensCreated == 0)
        // APNs rejects it as expired: the restarted provider signs a new one and stores it.
        await restarted.tokenRejectedAsExpired(before)
        let fresh = try #require(try await restarted.authorization())
        #expect(fresh != before && restarted.tokensCreated == 1)
        let again = try provider(try SQLitePushStore(directory: directory))
        #expect(try await again.authorization() == fresh)
    }
}
