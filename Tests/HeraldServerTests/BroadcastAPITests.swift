import Foundation
import HTTPTypes
import HeraldCore
import HeraldStore
import Testing

@testable import HeraldServer

/// Broadcast channels and broadcasts through the API, against the sandbox's channel management
/// service and broadcast route: a channel's whole life, tenants kept apart, the sync, the
/// storage policy, the limits on both sides.
@Suite("API: broadcast channels and broadcasts")
struct BroadcastAPITests {
    static let admin = "broadcast-admin-token"
    static let update = #"{"aps": {"event": "update", "timestamp": 1764460800, "content-state": {"score": "1-0"}}}"#

    static func broadcast(_ channel: String, expiration: Int? = nil) -> String {
        #"{"channel_id": "\#(channel)", "payload": \#(update)\#(expiration.map { #", "expiration": \#($0)"# } ?? "")}"#
    }

    /// A channel ID as a path segment (base64url, no padding).
    static func path(_ id: String) -> String {
        String(id.compactMap { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 == "=" ? nil : $0 })
    }

    @Test func aChannelIsCreatedBroadcastToSyncedAndDeletedAndOnlyItsTenantSeesIt() async throws {
        let world = try await TestWorld.make()
        let (acme, globex) = (world.tenant("acme"), world.tenant("globex"))
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let created = try await client.request(
                .post, "/v1/channels", key: acme.apiKey, json: #"{"storage_policy": 1, "label": "final"}"#)
            #expect(created.status == 201, "\(created.text)")
            let id = try #require(created.json["channel_id"] as? String)
            #expect(created.json["bundle_id"] as? String == "com.acme.app", "the tenant's one broadcastable bundle")
            #expect(created.json["environment"] as? String == "development" && created.json["label"] as? String == "final")
            #expect(created.headers[.location] == "/v1/channels/\(Self.path(id))?environment=development")
            #expect(world.sandbox.channels(bundleID: "com.acme.app").map(\.id) == [id])

            let listed = try await client.request(.get, "/v1/channels", key: acme.apiKey)
            #expect((listed.json["channels"] as? [[String: Any]])?.compactMap { $0["channel_id"] as? String } == [id])
            let counts = try #require(listed.json["counts"] as? [[String: Any]])
            let development = counts.first { $0["environment"] as? String == "development" && $0["bundle_id"] as? String == "com.acme.app" }
            #expect(development?["count"] as? Int == 1 && development?["limit"] as? Int == 10_000, "\(counts)")
            let read = try await client.request(.get, "/v1/channels/\(Self.path(id))", key: acme.apiKey)
            #expect(read.status == 200 && read.json["storage_policy"] as? Int == 1, "\(read.text)")

            // One broadcast: APNs' request and unique IDs, recorded by the sandbox once.
            let sent = try await client.request(.post, "/v1/broadcasts", key: acme.apiKey, json: Self.broadcast(id))
            #expect(sent.status == 200 && sent.json["success"] as? Bool == true, "\(sent.text)")
            let requestID = try #require(sent.json["apns_request_id"] as? String)
            #expect((try? NotificationID(sent.json["apns_unique_id"] as? String ?? "")) != nil)
            let records = world.sandbox.requests.filter { $0.kind == .broadcast }
            #expect(records.count == 1 && records.first?.apnsID == requestID && records.first?.channelID == id)
            #expect(records.first?.topic == "com.acme.app" && records.first?.delivered == true)

            // Another tenant: not found, exactly like a missing channel, and nothing reaches APNs.
            let before = world.sandbox.requests.count
            #expect(try await client.request(.get, "/v1/channels/\(Self.path(id))", key: globex.apiKey).status == 404)
            let foreign = try await client.request(.post, "/v1/broadcasts", key: globex.apiKey, json: Self.broadcast(id))
            #expect(foreign.status == 404 && foreign.errorCode == "channel_not_found")
            #expect(try await client.request(.delete, "/v1/channels/\(Self.path(id))", key: globex.apiKey).status == 404)
            #expect((try await client.request(.get, "/v1/channels", key: globex.apiKey).json["channels"] as? [Any])?.isEmpty == true)
            #expect(world.sandbox.requests.count == before)
            #expect(world.sandbox.channels(bundleID: "com.acme.app").count == 1)

            // A channel made elsewhere is imported by a sync; its storage policy is APNs'.
            let elsewhere = try #require(world.sandbox.createChannel(bundleID: "com.acme.app", storagePolicy: .noMessageStored))
            let synced = try await client.request(.post, "/v1/channels/sync", key: acme.apiKey)
            #expect(synced.status == 200 && synced.json["added"] as? Int == 1 && synced.json["removed"] as? Int == 0, "\(synced.text)")
            #expect(synced.json["channels"] as? Int == 2 && synced.json["limit"] as? Int == 10_000)
            let imported = try await client.request(.get, "/v1/channels/\(Self.path(elsewhere.id))", key: acme.apiKey)
            #expect(imported.status == 200 && imported.json["storage_policy"] as? Int == 0)

            // A channel that stores nothing takes expiration 0 only: refused before the wire.
            let stored = try await client.request(
                .post, "/v1/broadcasts", key: acme.apiKey, json: Self.broadcast(elsewhere.id, expiration: 1_900_000_000))
            #expect(stored.status == 422 && stored.errorCode == "expiration_not_allowed" && stored.errorField == "expiration")
            #expect(
                try await client.request(.post, "/v1/broadcasts", key: acme.apiKey, json: Self.broadcast(elsewhere.id, expiration: 0))
                    .json["success"] as? Bool == true)

            // Deleted on APNs behind Herald's back: APNs' answer, never retried, and the list follows.
            #expect(world.sandbox.deleteChannel(bundleID: "com.acme.app", id: id))
            let unknown = try await client.request(.post, "/v1/broadcasts", key: acme.apiKey, json: Self.broadcast(id))
            #expect(unknown.status == 200 && unknown.json["success"] as? Bool == false, "\(unknown.text)")
            #expect(unknown.json["reason"] as? String == "ChannelNotRegistered" && unknown.json["attempts"] as? Int == 1)
            let remaining = try await client.request(.get, "/v1/channels", key: acme.apiKey)
            #expect((remaining.json["channels"] as? [[String: Any]])?.compactMap { $0["channel_id"] as? String } == [elsewhere.id])

            // Deleted through Herald: gone on APNs and here; a broadcast is then not found.
            let deleted = try await client.request(.delete, "/v1/channels/\(Self.path(elsewhere.id))", key: acme.apiKey)
            #expect(deleted.status == 204, "\(deleted.text)")
            #expect(world.sandbox.channels(bundleID: "com.acme.app").isEmpty)
            #expect(
                try await client.request(.post, "/v1/broadcasts", key: acme.apiKey, json: Self.broadcast(elsewhere.id)).status == 404)

            // The payload is checked as a Live Activity update, naming the field.
            let fresh = try #require(
                try await client.request(.post, "/v1/channels", key: acme.apiKey, json: "{}").json["channel_id"] as? String)
            let noState = try await client.request(
                .post, "/v1/broadcasts", key: acme.apiKey,
                json: #"{"channel_id": "\#(fresh)", "payload": {"aps": {"event": "update", "timestamp": 1}}}"#)
            #expect(noState.status == 422 && noState.errorField == "payload.aps.content-state", "\(noState.text)")
            let started = try await client.request(
                .post, "/v1/broadcasts", key: acme.apiKey,
                json: #"{"channel_id": "\#(fresh)", "payload": {"aps": {"event": "start", "timestamp": 1, "content-state": {}}}}"#)
            #expect(started.status == 422 && started.errorField == "payload.aps.event")
            let badID = try await client.request(.post, "/v1/broadcasts", key: acme.apiKey, json: Self.broadcast("not base64!"))
            #expect(badID.status == 400 && badID.errorField == "channel_id")
            let otherApp = try await client.request(.post, "/v1/channels", key: acme.apiKey, json: #"{"bundle_id": "com.globex.app"}"#)
            #expect(otherApp.status == 422 && otherApp.errorCode == "bundle_not_allowed" && otherApp.errorField == "bundle_id")

            // An operator: any tenant's channels, each change in the audit log.
            let adminList = try await client.request(.get, "/admin/tenants/acme/channels", key: Self.admin)
            #expect((adminList.json["channels"] as? [[String: Any]])?.count == 1)
            let adminMade = try await client.request(
                .post, "/admin/tenants/globex/channels", key: Self.admin, json: #"{"storage_policy": 0}"#)
            #expect(adminMade.status == 201 && adminMade.json["bundle_id"] as? String == "com.globex.app", "\(adminMade.text)")
            let globexChannel = try #require(adminMade.json["channel_id"] as? String)
            #expect(
                try await client.request(.delete, "/admin/tenants/globex/channels/\(Self.path(globexChannel))", key: Self.admin).status
                    == 204)
            let audit = try await client.request(.get, "/admin/audit?tenant=globex", key: Self.admin)
            let actions = (audit.json["entries"] as? [[String: Any]])?.compactMap { $0["action"] as? String } ?? []
            #expect(actions.contains("channel.create") && actions.contains("channel.delete"), "\(audit.text)")
        }
        await world.close()
    }

    @Test("a sync imports every channel made elsewhere with its own storage policy, read several at once, and drops the deleted")
    func aSyncReadsManyChannels() async throws {
        let acme = TestTenant.make(id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"])
        let world = try await TestWorld.make(tenants: [acme], devices: [], faults: .none, recordPayloads: false)
        var expected: [String: Int] = [:]
        for index in 0..<70 {
            let policy: ChannelStoragePolicy = index % 3 == 0 ? .noMessageStored : .mostRecentMessageStored
            let channel = try #require(world.sandbox.createChannel(bundleID: "com.acme.app", storagePolicy: policy))
            expected[channel.id] = Int(policy.rawValue)
        }
        let made = expected
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let synced = try await client.request(.post, "/v1/channels/sync", key: acme.apiKey)
            #expect(synced.status == 200 && synced.json["added"] as? Int == 70 && synced.json["channels"] as? Int == 70, "\(synced.text)")
            var listed: [String: Int] = [:]
            var after: String? = nil
            repeat {
                let page = try await client.request(
                    .get, "/v1/channels?limit=50" + (after.map { "&after=\(Self.path($0))" } ?? ""), key: acme.apiKey)
                #expect(page.status == 200, "\(page.text)")
                for channel in page.json["channels"] as? [[String: Any]] ?? [] {
                    if let id = channel["channel_id"] as? String { listed[id] = channel["storage_policy"] as? Int }
                }
                after = page.json["next"] as? String
            } while after != nil
            #expect(listed == made)
            // One read a channel, each with an apns-request-id of its own.
            let reads = world.sandbox.requests.filter { $0.kind == .channelManagement && $0.method == "GET" && $0.channelID != nil }
            #expect(reads.count == 70 && Set(reads.map(\.apnsID)).count == 70)

            // Deleted elsewhere: the next sync drops them and reads nothing again.
            let gone = Array(made.keys.sorted().prefix(5))
            for id in gone { #expect(world.sandbox.deleteChannel(bundleID: "com.acme.app", id: id)) }
            let again = try await client.request(.post, "/v1/channels/sync", key: acme.apiKey)
            #expect(again.json["added"] as? Int == 0 && again.json["removed"] as? Int == 5 && again.json["channels"] as? Int == 65, "\(again.text)")
            #expect(world.sandbox.requests.filter { $0.kind == .channelManagement && $0.method == "GET" && $0.channelID != nil }.count == 70)
        }
        await world.close()
    }

    @Test func theChannelLimitIsCheckedByHeraldAndAnsweredByAPNs() async throws {
        let acme = TestTenant.make(id: "acme", teamID: "ACMETEAM01", keyID: "ACMEKEY001", topics: ["com.acme.app"])
        let world = try await TestWorld.make(tenants: [acme], devices: [], faults: .none, recordPayloads: false, channelsPerApp: 1)

        // APNs' own limit (here 1): its reason, nothing kept.
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            #expect(try await client.request(.post, "/v1/channels", key: acme.apiKey, json: "{}").status == 201)
            let second = try await client.request(.post, "/v1/channels", key: acme.apiKey, json: "{}")
            #expect(second.status == 422 && second.errorCode == "apns_refused", "\(second.text)")
            #expect(second.error["apns_reason"] as? String == "CannotCreateChannelConfig")
            #expect((try await client.request(.get, "/v1/channels", key: acme.apiKey).json["channels"] as? [Any])?.count == 1)
        }

        // Herald's count against Apple's 10,000: the 10,001st is refused before APNs is asked.
        do {
            let store = try SQLitePushStore(path: world.storagePath)
            let ids = try (0..<10_000).map { try ChannelID(Data("held-\($0)".utf8).base64EncodedString()) }
            _ = try await store.replaceChannels(
                tenant: "acme", environment: .development, bundleID: "com.acme.app", with: ids, policies: [:], now: Date())
        }
        let creations = world.sandbox.requests.filter { $0.kind == .channelManagement && $0.method == "POST" }.count
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let refused = try await live.client().request(.post, "/v1/channels", key: acme.apiKey, json: "{}")
            #expect(refused.status == 409 && refused.errorCode == "channel_limit_reached", "\(refused.text)")
            #expect(refused.error["apns_reason"] as? String == "CannotCreateChannelConfig")
        }
        #expect(world.sandbox.requests.filter { $0.kind == .channelManagement && $0.method == "POST" }.count == creations)
        await world.close()
    }
}
