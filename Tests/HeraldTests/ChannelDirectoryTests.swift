import Foundation
import HeraldCore
import Testing

@testable import HeraldStore

/// A tenant's broadcast channels in the store, on both backends: kept per tenant and
/// environment, paged, counted per app, replaced by a sync, deleted one by one.
@Suite("Channel directory")
struct ChannelDirectoryTests {
    static func id(_ text: String) throws -> ChannelID { try ChannelID(Data(text.utf8).base64EncodedString()) }

    @Test("channels are kept per tenant and environment, paged, counted, synced and removed", arguments: StoreBackend.allCases)
    func directory(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            let created = Date(timeIntervalSince1970: 1_764_000_000)
            let (a, b, c) = (try Self.id("alpha"), try Self.id("bravo"), try Self.id("charlie"))
            for (tenant, id, environment) in [
                ("acme", a, APNsEnvironment.development), ("acme", b, .development), ("acme", c, .production),
                ("globex", a, .development),
            ] {
                try await store.saveChannel(
                    ChannelRecord(
                        tenant: tenant, id: id, bundleID: "com.\(tenant).app", environment: environment,
                        storagePolicy: .mostRecentMessageStored, label: tenant == "acme" ? "label \(id)" : nil, createdAt: created))
            }
            // The same ID under another tenant is another channel.
            let acmeA = try #require(try await store.channel(tenant: "acme", environment: .development, id: a))
            #expect(acmeA.label == "label \(a)" && acmeA.bundleID == "com.acme.app" && acmeA.createdAt == created)
            #expect(try await store.channel(tenant: "globex", environment: .development, id: a)?.label == nil)
            #expect(try await store.channel(tenant: "globex", environment: .development, id: b) == nil)
            #expect(try await store.channel(tenant: "acme", environment: .production, id: a) == nil)

            // Saving again replaces (a read from APNs may correct the storage policy).
            var changed = acmeA
            changed.storagePolicy = .noMessageStored
            try await store.saveChannel(changed)
            #expect(try await store.channel(tenant: "acme", environment: .development, id: a)?.storagePolicy == .noMessageStored)

            let all = try await store.channels(tenant: "acme", environment: nil, bundleID: nil, after: nil, limit: 10)
            #expect(all.map(\.id) == [a, b, c].sorted())
            let page = try await store.channels(tenant: "acme", environment: nil, bundleID: nil, after: all[0].id, limit: 1)
            #expect(page.map(\.id) == [all[1].id])
            #expect(try await store.channels(tenant: "acme", environment: .production, bundleID: nil, after: nil, limit: 10).map(\.id) == [c])
            #expect(try await store.channels(tenant: "acme", environment: nil, bundleID: "com.other", after: nil, limit: 10).isEmpty)
            #expect(try await store.channelCount(tenant: "acme", environment: .development, bundleID: "com.acme.app") == 2)

            // A sync: what APNs lists is what is kept; new ones take the policy read for them.
            let d = try Self.id("delta")
            let (added, removed) = try await store.replaceChannels(
                tenant: "acme", environment: .development, bundleID: "com.acme.app", with: [b, d],
                policies: [d: .noMessageStored], now: created.addingTimeInterval(60))
            #expect(added == 1 && removed == 1)
            let synced = try await store.channels(tenant: "acme", environment: .development, bundleID: nil, after: nil, limit: 10)
            #expect(Set(synced.map(\.id)) == [b, d])
            #expect(synced.first { $0.id == d }?.storagePolicy == .noMessageStored)
            #expect(synced.first { $0.id == b }?.label == "label \(b)", "a kept channel keeps its label")
            #expect(try await store.channel(tenant: "acme", environment: .production, id: c) != nil, "other environments untouched")
            #expect(try await store.channel(tenant: "globex", environment: .development, id: a) != nil, "other tenants untouched")

            #expect(try await store.deleteChannel(tenant: "acme", environment: .development, id: b))
            #expect(!(try await store.deleteChannel(tenant: "acme", environment: .development, id: b)))
            #expect(try await store.channels(tenant: "acme", environment: nil, bundleID: nil, after: nil, limit: 10).count == 2)
            #expect(try await store.channelCount(tenant: "globex", environment: .development, bundleID: "com.globex.app") == 1)
        }
    }
}
