import Foundation
import HeraldConfig
import HeraldCore
import Testing

/// `proxy:` in `config/herald.yaml` (every tenant) and in a tenant file (that tenant, or `none`).
@Suite("The proxy: setting of the server and tenant files")
struct ProxySectionTests {
    static let serverFile = "/srv/herald/config/herald.yaml"

    @Test func aURLAMappingWithCredentialsAndExceptionsAndTheEnvironment() throws {
        let short = try ServerConfiguration.parse(yaml: "proxy: http://proxy.internal\n", file: Self.serverFile, environment: [:])
        #expect(short.proxy == EgressProxy(scheme: .http, host: "proxy.internal", port: 3128))
        #expect(try ServerConfiguration.parse(yaml: "log_level: info\n", file: Self.serverFile, environment: [:]).proxy == nil)

        let full = try ServerConfiguration.parse(
            yaml: """
                proxy:
                  url: http://[fd00::3]:8080
                  username: herald
                  password: env:PROXY_PASSWORD
                  no_proxy: [localhost, .internal]

                """, file: Self.serverFile, environment: ["PROXY_PASSWORD": "proxy-s3cret"])
        let proxy = try #require(full.proxy)
        #expect(proxy.scheme == .http && proxy.host == "fd00::3" && proxy.port == 8080)
        #expect(proxy.username == "herald" && proxy.password?.text == "proxy-s3cret")
        #expect(proxy.bypass == ["localhost", ".internal"])
        #expect(proxy.address == "http://[fd00::3]:8080")
        #expect(!"\(proxy)".contains("proxy-s3cret"))

        let environment = ["HTTPS_PROXY": "socks5://gateway:1081", "NO_PROXY": "localhost, .corp"]
        let fromEnvironment = try ServerConfiguration.parse(yaml: "proxy: environment\n", file: Self.serverFile, environment: environment)
        #expect(fromEnvironment.proxy == EgressProxy(scheme: .socks5, host: "gateway", port: 1081, bypass: ["localhost", ".corp"]))
        #expect(try ServerConfiguration.parse(yaml: "proxy: environment\n", file: Self.serverFile, environment: [:]).proxy == nil)

        // Webhook posts take a proxy of their own.
        let hooks = try ServerConfiguration.parse(
            yaml: "proxy: http://apns-proxy:3128\nwebhooks:\n  proxy: socks5://hook-proxy\n", file: Self.serverFile, environment: [:])
        #expect(hooks.proxy == EgressProxy(scheme: .http, host: "apns-proxy", port: 3128))
        #expect(hooks.webhookProxy == EgressProxy(scheme: .socks5, host: "hook-proxy", port: 1080))
    }

    @Test func aTenantFileOverridesOrGoesDirect() throws {
        let fixture = try TenantFixture()
        let loader = TenantLoader(environment: [:])
        let file = fixture.path("acme.yaml")
        #expect(try loader.parseTenant(yaml: TenantFixture.tokenTenant, file: file).proxy == nil)
        #expect(try loader.parseTenant(yaml: TenantFixture.tokenTenant + "proxy: none\n", file: file).proxy == .direct)
        #expect(
            try loader.parseTenant(yaml: TenantFixture.tokenTenant + "proxy: socks5://127.0.0.1\n", file: file).proxy
                == .proxy(EgressProxy(scheme: .socks5, host: "127.0.0.1", port: 1080)))
    }

    @Test func badSettingsAreNamedWithTheirLineAndNeverRepeatASecret() throws {
        let cases: [(String, String)] = [
            ("proxy: ftp://proxy:21\n", "proxy: must read http://HOST[:PORT] or socks5://HOST[:PORT]"),
            ("proxy: http://user:hunter2@proxy:3128\n", "proxy: must not hold credentials"),
            ("proxy: http://proxy:70000\n", "proxy: the port must be 1 to 65535"),
            ("proxy: none\n", "proxy: 'none' is for a tenant file"),
            ("proxy: {url: 'http://proxy', username: herald}\n", "proxy.password: is required with username"),
            ("proxy: {url: 'http://proxy', username: herald, password: hunter2}\n", "proxy.password: must be env:NAME or file:PATH"),
            ("proxy: {url: 'socks5://proxy', username: herald, password: 'env:P'}\n", "proxy.username: a SOCKS5 proxy is reached without credentials"),
            ("proxy: {url: 'http://proxy', port: 3128}\n", "proxy.port: unknown key"),
            ("proxy: {username: herald}\n", "proxy.url: is required"),
        ]
        for (yaml, expected) in cases {
            do {
                _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml", environment: ["P": "x"])
                Issue.record("accepted: \(yaml)")
            } catch {
                let messages = error.errors.map(\.description)
                #expect(messages.contains { $0.hasPrefix("config/herald.yaml:1:") && $0.contains(expected) }, "\(yaml): \(messages)")
                #expect(!messages.joined().contains("hunter2"), "\(messages)")
            }
        }
    }
}
