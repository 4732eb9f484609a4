import Foundation
import HeraldCore
import Testing

@Suite("Tenant models")
struct TenantModelTests {
    @Test(arguments: ["a", "acme", "acme-2", "0", String(repeating: "a", count: 64)])
    func validTenantIDs(id: String) throws {
        #expect(try TenantID(id).rawValue == id)
    }

    @Test(arguments: ["", "-acme", "Acme", "acme_2", "acme corp", "ac.me", String(repeating: "a", count: 65)])
    func invalidTenantIDs(id: String) {
        let error = #expect(throws: TenantIDError.self) { try TenantID(id) }
        #expect(error?.value == id)
        #expect(error?.description.contains("[a-z0-9][a-z0-9-]{0,63}") == true)
    }

    @Test func secretsPrintOnlyTheirOrigin() {
        let secret = Secret(bytes: Array("-----BEGIN PRIVATE KEY-----\nabc".utf8), origin: "env ACME_KEY")
        #expect("\(secret)" == "<secret from env ACME_KEY>")
        #expect(String(reflecting: secret) == "<secret from env ACME_KEY>")
        #expect(secret.text.hasPrefix("-----BEGIN"))
    }

    @Test func endpointURLs() {
        #expect(APNsEndpoint(url: "https://api.push.apple.com") == .production)
        #expect(APNsEndpoint(url: "https://api.sandbox.push.apple.com:443/") == .development)
        #expect(APNsEndpoint(url: "https://localhost:2197") == APNsEndpoint(host: "localhost", port: 2197))
        #expect(APNsEndpoint(url: "https://[::1]:2197") == APNsEndpoint(host: "::1", port: 2197))
        #expect(APNsEndpoint(host: "::1", port: 2197).url == "https://[::1]:2197")
        for bad in [
            "http://api.push.apple.com", "https://", "https://host:0", "https://host:65536", "https://host/path",
            "https://user@host", "https://host:x", "api.push.apple.com:443", "https://a:1:2",
        ] {
            #expect(APNsEndpoint(url: bad) == nil, "\(bad)")
        }
    }

    @Test func endpointsDefaults() {
        let endpoints = EndpointsConfiguration()
        #expect(endpoints.endpoint(for: .production) == .production)
        #expect(endpoints.endpoint(for: .development) == .development)
        #expect(endpoints.defaultEnvironment == .production)
    }
}
