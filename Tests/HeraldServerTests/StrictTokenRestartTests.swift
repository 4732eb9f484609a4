import APNsSandbox
import Foundation
import HeraldServer
import Testing

/// A single instance on SQLite, restarted within 20 minutes, sends with the provider
/// token it signed before, so a sandbox holding the strict token-update rule (any other token
/// for the key within 20 minutes is 429 `TooManyProviderTokenUpdates`, as Apple answers) accepts
/// every request. A stack on a fresh store signs its own token and is refused: the rule bites.
@Suite("Strict provider token rule across restarts")
struct StrictTokenRestartTests {
    static func send(_ server: LiveServer, key: String, _ index: Int) async throws -> APIClient.Reply {
        try await server.client().request(
            .post, "/v1/notifications", key: key,
            json: #"{"device_token": "\#(Tokens.make(0xC3, index))", "topic": "com.globex.app", "payload": {"aps": {}}}"#)
    }

    @Test("a restarted stack on the same SQLite store sends the same token: no 429 from the strict sandbox")
    func restartOnTheSameStoreKeepsTheToken() async throws {
        let globex = TestTenant.make(id: "globex", teamID: "GLOBEXTM01", keyID: "GLOBEXKEY1", topics: ["com.globex.app"])
        let world = try await TestWorld.make(
            tenants: [globex], devices: [], faults: .none, recordPayloads: false, tokenUpdateScope: .strict)
        defer { Task { await world.close() } }
        let key = globex.apiKey

        for run in 0..<3 {
            let reply = try await LiveServer.with(world.options()) { server in
                try await Self.send(server, key: key, run)
            }
            #expect(reply.status == 200, "run \(run): \(reply.text)")
            #expect(reply.json["status"] as? Int == 200, "run \(run): \(reply.text)")
        }
        let answered = world.sandbox.requests.filter(\.processed)
        #expect(answered.count == 3)
        #expect(answered.allSatisfy { $0.status == 200 && $0.reason == nil })

        // The same tenant on another (empty) store signs a token of its own: refused.
        let fresh = try await LiveServer.with(
            world.options { $0.configuration.storagePath = world.directory + "/data/other.sqlite" }
        ) { server in
            try await Self.send(server, key: key, 99)
        }
        #expect(fresh.json["status"] as? Int == 429, "\(fresh.text)")
        #expect(fresh.json["reason"] as? String == "TooManyProviderTokenUpdates", "\(fresh.text)")
    }
}
