import FeedbackPlugin
import Foundation
import Herald
import HeraldCore
import HeraldServer
import Hummingbird
import Testing

@Suite("OpenAPI document")
struct OpenAPITests {
    static let methods = ["get", "put", "post", "delete", "patch", "head", "options", "trace"]

    static func documentedRoutes() throws -> Set<String> {
        let document = try OpenAPIEvents.document()
        #expect(document["openapi"] as? String == "3.1.0")
        let paths = try #require(document["paths"] as? [String: Any])
        var routes = Set<String>()
        for (path, item) in paths {
            let operations = try #require(item as? [String: Any])
            for (key, operation) in operations where methods.contains(key) {
                routes.insert("\(key.uppercased()) \(path)")
                let responses = (operation as? [String: Any])?["responses"] as? [String: Any]
                #expect(responses?.isEmpty == false, "\(key) \(path) documents no response")
            }
        }
        return routes
    }

    @Test func everyRouteIsDocumentedAndEveryDocumentedRouteExists() throws {
        let documented = try Self.documentedRoutes()
        let served = Set(APIEndpoint.allCases.map { "\($0.method.rawValue) \($0.path)" })
        #expect(documented.subtracting(served).isEmpty, "documented but not served: \(documented.subtracting(served).sorted())")
        #expect(served.subtracting(documented).isEmpty, "served but not documented: \(served.subtracting(documented).sorted())")
    }

    /// The live server answers every documented route (never "no such route" or "method not
    /// allowed"), and serves the document itself.
    @Test func theLiveServerRoutesEveryDocumentedRoute() async throws {
        let world = try await TestWorld.make()
        let routes = try Self.documentedRoutes()
        try await LiveServer.with(world.options(adminToken: "admin")) { live async throws in
            let client = live.client()
            let served = try await client.request(.get, "/openapi.yaml")
            #expect(served.status == 200)
            #expect(served.text == OpenAPIDocument.text)
            for route in routes.sorted() {
                let parts = route.split(separator: " ", maxSplits: 1)
                let method = HTTPRequest.Method(String(parts[0]))!
                let path = String(parts[1])
                    .replacingOccurrences(of: "{id}", with: "acme")
                    .replacingOccurrences(of: "{token}", with: Tokens.make(0x71, 1))
                    .replacingOccurrences(of: "{name}", with: "test")
                    .replacingOccurrences(of: "{job}", with: "some-job")
                    .replacingOccurrences(of: "{channel}", with: "dHN0LXNyY2gtY2hubA")
                let key = path.hasPrefix("/admin") ? "admin" : nil
                let reply = try await client.request(method, path, key: key)
                #expect(reply.errorCode != "route_not_found", "\(route): \(reply.text)")
                #expect(reply.status != 405, "\(route): \(reply.text)")
            }
        }
        await world.close()
    }

    /// The document lists every event Herald posts to a tenant's webhook; the ones a test cannot
    /// easily make happen end to end (a certificate's expiry) are built here and checked against it.
    @Test func theWebhookEventsAreDocumented() throws {
        let document = try OpenAPIEvents.document()
        let webhooks = try #require(document["webhooks"] as? [String: Any])
        #expect(Set(webhooks.keys) == ["deviceTokenInvalid", "credentialExpiring", "jobFinished", "jobCancelled"])
        let webhook = TenantWebhook(
            url: "https://hooks.example.com/herald", secret: Secret(bytes: Array("a-secret-of-some-length".utf8), origin: "test"),
            secretReference: "env:HOOK_SECRET")
        let now = Date()
        let tenant = try TenantID("acme")
        let expiring = webhook.credentialExpiringRequest(tenant: tenant, notAfter: now.addingTimeInterval(9 * 86_400), sentAt: now)
        try OpenAPIEvents.check(expiring.body, headers: Self.lowercased(expiring.headers), as: "credentialExpiring")
        let end = TenantWebhook.JobEnd(
            state: "cancelled", jobID: "j", items: 10, sent: 3, failed: 1, unknown: 0, cancelled: 6, endedAt: now)
        let cancelled = webhook.jobEndedRequest(tenant: tenant, end: end, sentAt: now)
        try OpenAPIEvents.check(cancelled.body, headers: Self.lowercased(cancelled.headers), as: "jobCancelled")
    }

    static func lowercased(_ headers: [String: String]) -> [String: String] {
        Dictionary(uniqueKeysWithValues: headers.map { ($0.key.lowercased(), $0.value) })
    }
}
