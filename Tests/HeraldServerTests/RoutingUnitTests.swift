import Foundation
import Hummingbird
import Testing

@testable import HeraldServer

/// The route table's 404/405 decision, the response encoding, and the lifecycle's field names,
/// as values.
@Suite("Routing values")
struct RoutingUnitTests {
    @Test func aRoutesLiteralPathBelongsToItAloneAndAdminRoutesCountOnlyWhenEnabled() {
        #expect(APIEndpoint.methods(at: "/v1/devices/invalid", adminEnabled: true) == [.get])
        #expect(APIEndpoint.methods(at: "/v1/devices/abc", adminEnabled: true) == [.put])
        #expect(APIEndpoint.methods(at: "/v1/nothing", adminEnabled: true).isEmpty)
        #expect(Set(APIEndpoint.methods(at: "/admin/tenants/acme", adminEnabled: true)) == [.get, .patch, .delete])
        #expect(APIEndpoint.methods(at: "/admin/tenants/acme", adminEnabled: false).isEmpty)
        #expect(APIEndpoint.methods(at: "/admin/tenants", adminEnabled: true) == [.get, .post])
        #expect(APIEndpoint.methods(at: "/metrics", adminEnabled: false).isEmpty)
    }

    @Test func everyRouteSitsUnderTheGroupOfItsAccess() {
        for endpoint in APIEndpoint.allCases {
            switch endpoint.access {
            case .tenant: #expect(endpoint.path.hasPrefix("/v1/"), "\(endpoint)")
            case .admin: #expect(endpoint.path.hasPrefix("/admin") || endpoint.path == "/metrics", "\(endpoint)")
            case .open: #expect(!endpoint.path.hasPrefix("/v1/") && !endpoint.path.hasPrefix("/admin"), "\(endpoint)")
            }
        }
        #expect(APIEndpoint.adminDeleteAPIKey.routerPath(under: "/admin") == "/tenants/:id/api-keys/:name")
        #expect(APIEndpoint.registerDevice.routerPath(under: "/v1") == "/devices/:token")
    }

    struct Sample: ResponseEncodable {
        var apnsID: String
        @Nullable var reason: String?
        var optionalLeftOut: Int?
        var at: Date
    }

    @Test func answersAreSnakeCaseWithNullsWhereDocumentedAndMillisecondDates() throws {
        let bytes = try APIResponseEncoder.bytes(
            Sample(apnsID: "x", reason: nil, optionalLeftOut: nil, at: Date(timeIntervalSince1970: 1.5)))
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"apns_id":"x","at":"1970-01-01T00:00:01.500Z","reason":null}"# + "\n")
        let response = try APIResponseEncoder.response(Sample(apnsID: "y", reason: "r", optionalLeftOut: 3, at: Date()))
        #expect(response.headers[.contentType] == "application/json")
    }

    @Test func tenantFileFieldsAreNamedAsTheRequestNamesThem() {
        let fields = AdminLifecycleHandlers.createFieldNames
        #expect(AdminLifecycleHandlers.requestField("auth.token.key_id", fields: fields) == "credential.key_id")
        #expect(AdminLifecycleHandlers.requestField("auth.token.key_file", fields: fields) == "credential.pem")
        #expect(AdminLifecycleHandlers.requestField("auth.certificate.cert_file", fields: fields) == "credential.pem")
        #expect(AdminLifecycleHandlers.requestField("auth.certificate.passphrase", fields: fields) == "credential.passphrase")
        #expect(AdminLifecycleHandlers.requestField("topics[3]", fields: fields) == "topics[3]")
        #expect(AdminLifecycleHandlers.requestField("pool.connections", fields: fields) == "pool.connections")
        #expect(AdminLifecycleHandlers.requestField("api_keys[0].name", fields: fields) == "api_key_name")
    }
}
