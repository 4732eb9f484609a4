import Foundation
import HeraldServer
import Testing

/// The tenant lifecycle on several instances: two `herald serve` (in this process) on one
/// PostgreSQL schema and one tenants directory, neither watching the directory. A tenant
/// created, changed or deleted through one instance's admin API reaches the other through the
/// store's `tenants` notification (it reads the directory again). Needs `HERALD_TEST_POSTGRES_URL`
/// like ``ClusterTests``.
@Suite("Cluster: the tenant lifecycle on several instances")
struct LifecycleClusterTests {
    static let admin = "test-admin-token"

    @Test("a tenant created, changed and deleted through instance A is served, changed and gone on instance B")
    func lifecycleReachesTheOtherInstance() async throws {
        let settings = try ClusterTests.postgresSettings(schema: ClusterTests.freshSchema())
        let world = try await LifecycleAPITests.world()
        let options = ClusterTests.options(world, settings: settings, rescan: .seconds(3600))
        #expect(options.watchInterval == nil, "the directory watcher would hide whether the notification works")
        try await ClusterTests.withTwoInstances(world, settings: settings, options: options) { a, b in
            let toA = a.client()
            let toB = b.client()
            #expect(try await toB.request(.get, "/admin/tenants/initech", key: Self.admin).status == 404)

            // Created through A: B loads it and takes its new API key.
            let created = try await toA.request(
                .post, "/admin/tenants", key: Self.admin, json: LifecycleAPITests.createBody(world))
            #expect(created.status == 201, "\(created.text)")
            let apiKey = try #require((created.json["api_key"] as? [String: Any])?["key"] as? String)
            try await ClusterTests.eventually("instance B loads the tenant created through A") {
                try await toB.request(.get, "/admin/tenants/initech", key: Self.admin).status == 200
            }
            let sent = try await LifecycleAPITests.send(toB, key: apiKey)
            #expect(sent.status == 200, "\(sent.text)")

            // Changed through A: B runs the new topics.
            let changed = try await toA.request(
                .patch, "/admin/tenants/initech", key: Self.admin,
                json: #"{"topics": ["com.initech.app", "com.initech.other"]}"#)
            #expect(changed.status == 200, "\(changed.text)")
            try await ClusterTests.eventually("instance B runs the topics changed through A") {
                let shown = try await toB.request(.get, "/admin/tenants/initech", key: Self.admin)
                return shown.json["topics"] as? [String] == ["com.initech.app", "com.initech.other"]
            }

            // A key revoked through A stops working on B.
            let extra = try await toA.request(
                .post, "/admin/tenants/initech/api-keys", key: Self.admin, json: #"{"name": "second"}"#)
            #expect(extra.status == 201, "\(extra.text)")
            let extraKey = try #require(extra.json["key"] as? String)
            try await ClusterTests.eventually("instance B takes the key added through A") {
                try await LifecycleAPITests.send(toB, key: extraKey).status == 200
            }
            #expect(try await toA.request(.delete, "/admin/tenants/initech/api-keys/second", key: Self.admin).status == 204)
            try await ClusterTests.eventually("instance B refuses the key revoked through A") {
                try await LifecycleAPITests.send(toB, key: extraKey).status == 401
            }

            // Deleted through A: B stops taking its sends.
            let deleted = try await toA.request(.delete, "/admin/tenants/initech", key: Self.admin)
            #expect(deleted.status == 200, "\(deleted.text)")
            try await ClusterTests.eventually("instance B removes the tenant deleted through A") {
                try await toB.request(.get, "/admin/tenants/initech", key: Self.admin).status == 404
            }
            #expect(try await LifecycleAPITests.send(toB, key: apiKey).status == 401)
        }
    }
}
