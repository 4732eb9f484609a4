import Crypto
import Foundation
import HTTPTypes
import Herald
import HeraldCore
import Testing

import HeraldProcess
@testable import HeraldServer

/// The console's guards over HTTP: login attempts bounded, every form behind the session's CSRF
/// token and the same origin, pages for both kinds of tenant with what tenants control escaped,
/// and the test send and rotation refused by the API's own rules.
@Suite("Console: guards, escaping, the API's rules")
struct ConsoleGuardTests {
    static let admin = "console-guard-admin-token"

    /// Every form the console serves, with fields that would do something if the guards let them.
    static let forms: [(path: String, fields: [(String, String)])] = [
        ("/console/logout", []),
        ("/console/onboard", [("id", "newco"), ("team_id", "NEWCOTEAM1"), ("topics", "com.newco.app")]),
        ("/console/tenants/acme/test", [("device_token", Tokens.make(0xA1, 1))]),
        ("/console/tenants/acme/credentials", [("key_id", "ACMEKEY002")]),
        ("/console/tenants/acme/settings", [("topics", "com.acme.app"), ("connections", "3")]),
        ("/console/tenants/acme/api-keys", [("name", "forged")]),
        ("/console/tenants/acme/api-keys/delete", [("name", "test")]),
        ("/console/tenants/acme/delete", [("confirm", "acme")]),
        ("/console/tenants/acme/channels", [("storage_policy", "1")]),
        ("/console/tenants/acme/channels/sync", [("environment", "development")]),
        ("/console/tenants/acme/channels/delete", [("channel", "dGVzdA=="), ("environment", "development")]),
        ("/console/tenants/acme/broadcast", [("channel", "development dGVzdA=="), ("event", "update")]),
    ]

    @Test func failedLoginsAreBoundedAndNoTokenIsEchoed() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            for attempt in 0..<3 {
                let guess = "guess-\(attempt)-of-the-admin-token"
                let reply = try await browser.login(guess)
                #expect(reply.status == 401, "attempt \(attempt)")
                #expect(!reply.text.contains(guess) && !reply.text.contains(Self.admin))
                #expect(ConsoleBrowser.cookies(reply)["herald_console"] == nil)
            }
            // The address's bucket emptied far below what any test run could refill (10 a minute), however
            // slowly the requests go: from here no token is compared, the right one included,
            // and the answer says when to come back. (The bucket's arithmetic, on a manual
            // clock, is `failedLoginsEmptyTheBucketAndItRefills`.)
            let sessions = live.server.api.console.sessions
            for _ in 0..<(sessions.failedLoginBurst + 100) { sessions.loginFailed(source: "127.0.0.1") }
            for token in ["another-guess", Self.admin] {
                let refused = try await browser.login(token)
                #expect(refused.status == 429, "\(refused.text)")
                #expect(refused.text.contains("Too many failed logins"))
                #expect(Int(refused.headers[.retryAfter] ?? "") ?? 0 >= 1)
                #expect(ConsoleBrowser.cookies(refused)["herald_console"] == nil)
                #expect(!refused.text.contains(token))
            }
            #expect(browser.session == nil)
        }
        await world.close()
    }

    @Test func everyFormRefusesAWrongTokenAnotherOriginAndNoSession() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let goodCSRF = try #require(browser.csrf)
            let files = try Self.snapshot(world.tenantsDirectory)
            for (path, fields) in Self.forms {
                for csrf in ["wrong", "", String(goodCSRF.dropLast())] {
                    let reply = try await browser.post(path, fields, csrf: csrf)
                    #expect(reply.status == 403, "\(path) with csrf \"\(csrf)\": \(reply.status)")
                    #expect(reply.text.contains("did not come from this console"), "\(path)")
                }
                let crossSite = try await browser.post(path, fields, headers: [.origin: "https://evil.example"])
                #expect(crossSite.status == 403, "\(path) from another origin: \(crossSite.status)")
                // The test client's Host is `127.0.0.1` (no port): the same host on a port is another origin.
                let otherPort = try await browser.post(path, fields, headers: [.origin: "http://127.0.0.1:1"])
                #expect(otherPort.status == 403, "\(path) from another port: \(otherPort.status)")
                let opaque = try await browser.post(path, fields, headers: [.origin: "null"])
                #expect(opaque.status == 403, "\(path) from an opaque origin: \(opaque.status)")
                var stranger = browser
                stranger.session = nil
                let anonymous = try await stranger.post(path, fields)
                #expect(anonymous.status == 303 && anonymous.headers[.location] == "/console/login", "\(path)")
            }
            #expect(world.sandbox.requests.isEmpty, "no refused form sent anything")
            #expect(try Self.snapshot(world.tenantsDirectory) == files, "no refused form wrote anything")
            #expect(Self.apiKeyNames(live, "acme") == ["test"])
            #expect(ConsoleTests.isRunning(live, "acme"))

            // The same origin (the client's Host is `127.0.0.1`), with the session's token, is let
            // through, and the session survived the refusals.
            let sameOrigin = try await browser.post(
                "/console/tenants/acme/test", [("device_token", Tokens.make(0xA1, 2)), ("topic", "com.acme.app")],
                headers: [.origin: "http://127.0.0.1"])
            #expect(sameOrigin.status == 200, "\(sameOrigin.text)")
            #expect(sameOrigin.text.contains(#"id="send-status">200<"#))
            // The login form checks the origin too.
            var fresh = ConsoleBrowser(client: live.client())
            let crossLogin = try await fresh.login(Self.admin, headers: [.origin: "https://evil.example"])
            #expect(crossLogin.status == 403 && fresh.session == nil)
        }
        await world.close()
    }

    @Test func pagesRenderTokenAndCertificateTenantsAndEscapeWhatTenantsControl() async throws {
        let tenant = try await CertificateUploadAPITests.certificateTenant()
        let world = tenant.world
        // A tenant file that does not load, with markup in its name and its fields: the console
        // lists it with the loader's message, as text.
        let evil = world.tenantsDirectory + "/x<script>alert(1)<!--.yaml"
        try #"id: "<script>alert(2)</script>"\#nteam_id: "<img src=x onerror=alert(3)>"\#n"#.write(
            toFile: evil, atomically: true, encoding: .utf8)
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let list = try await browser.get("/console/tenants")
            #expect(list.status == 200)
            for id in ["acme", "globex", "certco"] { #expect(list.text.contains(#"id="tenant-\#(id)""#), "\(id)") }
            let certRow = try #require(Self.row("certco", in: list.text))
            #expect(certRow.contains("certificate expires"), "\(certRow)")
            #expect(certRow.contains("(in 29 days)") || certRow.contains("(in 30 days)"), "\(certRow)")
            let tokenRow = try #require(Self.row("globex", in: list.text))
            #expect(tokenRow.contains("token key GLOBEXKEY1") && tokenRow.contains(">ok<"), "\(tokenRow)")
            #expect(list.text.contains("Tenant files that did not load"))
            #expect(list.text.contains("x&lt;script&gt;alert(1)&lt;!--.yaml"), "the file name, escaped")
            #expect(!list.text.contains("<script") && !list.text.contains("<img") && !list.text.contains("<!--"))

            let certPage = try await browser.get("/console/tenants/certco")
            #expect(certPage.status == 200)
            #expect(certPage.text.contains(#"id="auth-kind">certificate<"#))
            #expect(certPage.text.contains(#"name="certificate_file""#))
            #expect(!certPage.text.contains(#"name="key_id""#), "no key ID for a certificate tenant")
            #expect(!certPage.text.contains("BEGIN"), "no credential bytes on the page")
            let tokenPage = try await browser.get("/console/tenants/acme")
            #expect(tokenPage.text.contains(#"id="auth-kind">token<"#) && tokenPage.text.contains(#"name="key_file""#))
            #expect(tokenPage.text.contains("<code>retry</code>") && tokenPage.text.contains("<code>com.acme.app.voip</code>"))
        }
        await tenant.close()
    }

    @Test func aTestSendIsRefusedByTheAPIsOwnRulesAndCountedInTheLastHour() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            // The same bad field, through the API and through the console: the same rule.
            let cases: [(fields: [(String, String)], json: String, field: String)] = [
                ([("device_token", "abc")], #"{"device_token": "abc", "payload": {"aps": {}}}"#, "device_token"),
                (
                    [("device_token", Tokens.make(0xA2, 1)), ("environment", "staging")],
                    #"{"device_token": "\#(Tokens.make(0xA2, 1))", "environment": "staging", "payload": {"aps": {}}}"#,
                    "environment"
                ),
            ]
            for (fields, json, field) in cases {
                let api = try await client.request(.post, "/v1/notifications", key: acme.apiKey, json: json)
                #expect(api.status == 400 && api.errorField == field, "\(api.text)")
                let message = try #require(api.error["message"] as? String)
                let console = try await browser.post("/console/tenants/acme/test", fields)
                #expect(console.status == 422)
                #expect(
                    Self.unescaped(console.text).contains(#"id="error">\#(field) \#(message)"#), "\(message) in \(console.text)")
            }
            #expect(world.sandbox.requests.isEmpty, "refused by the rules, nothing sent")

            // One accepted, one refused by the router (a topic the tenant does not have).
            let ok = try await browser.post(
                "/console/tenants/acme/test", [("device_token", Tokens.make(0xA2, 2)), ("topic", "com.acme.app")])
            #expect(ok.text.contains(#"id="send-status">200<"#))
            let foreign = try await browser.post(
                "/console/tenants/acme/test", [("device_token", Tokens.make(0xA2, 3)), ("topic", "com.globex.app")])
            #expect(foreign.status == 422 && foreign.text.contains("TopicDisallowed"), "\(foreign.text)")
            let health = try #require(live.server.health.health(of: try TenantID("acme")))
            #expect(health.sendsLastHour == 2 && health.failuresLastHour == 1)
            let row = try #require(Self.row("acme", in: try await browser.get("/console/tenants").text))
            #expect(row.contains(#"<td class="number">2</td>"#) && row.contains(#"<td class="number">1</td>"#), "\(row)")
            #expect(row.contains(">warning<"), "a failure in the last hour: \(row)")
        }
        await world.close()
    }

    @Test func aCertificateRotationIsCheckedAsTheAPIChecksIt() async throws {
        let tenant = try await CertificateUploadAPITests.certificateTenant()
        try await LiveServer.with(tenant.world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let certificateBefore = try String(contentsOfFile: tenant.certPath, encoding: .utf8)
            // Only the first topic: the voip topic is not covered (the API's 422 for the same).
            let narrow = try tenant.issue("Apple Push Services: com.certco.app (narrow)", topics: ["com.certco.app"], days: 90)
            let refused = try await browser.post(
                "/console/tenants/certco/credentials", [],
                files: [("certificate_file", "narrow.pem", Array((narrow.certificatePEM + narrow.privateKeyPEM).utf8))])
            #expect(refused.status == 422)
            #expect(refused.text.contains(#"id="error">certificate_file"#) && refused.text.contains("com.certco.app.voip"))
            #expect(!refused.text.contains("BEGIN"), "no credential echoed")
            #expect(try String(contentsOfFile: tenant.certPath, encoding: .utf8) == certificateBefore)

            let next = try tenant.issue("Apple Push Services: com.certco.app (next)", topics: CertificateUploadAPITests.topics, days: 90)
            let rotated = try await browser.post(
                "/console/tenants/certco/credentials", [],
                files: [("certificate_file", "next.pem", Array((next.certificatePEM + next.privateKeyPEM).utf8))])
            #expect(rotated.status == 200, "\(rotated.text)")
            #expect(rotated.text.contains("The credential was replaced"))
            #expect(rotated.text.contains("(in 89 days)") || rotated.text.contains("(in 90 days)"), "the new expiry shown")
            #expect(try CertificateUploadAPITests.permissions(tenant.certPath) == 0o600)
            let sent = try await browser.post(
                "/console/tenants/certco/test", [("device_token", Tokens.make(0xA3, 1)), ("topic", "com.certco.app")])
            #expect(sent.text.contains(#"id="send-status">200<"#), "\(sent.text)")
            #expect(tenant.sandbox.requests.last?.authKind == .certificate)
        }
        await tenant.close()
    }

    // MARK: Helpers

    /// The tenants page's row of a tenant.
    static func row(_ id: String, in html: String) -> String? {
        guard let start = html.range(of: #"<tr id="tenant-\#(id)">"#) else { return nil }
        guard let end = html.range(of: "</tr>", range: start.upperBound..<html.endIndex) else { return nil }
        return String(html[start.lowerBound..<end.upperBound])
    }

    /// Undoes the five escapes of HTML text (to compare a page's text with an API message).
    static func unescaped(_ html: String) -> String {
        html.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&#39;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }

    /// Every file under a directory with its bytes.
    static func snapshot(_ directory: String) throws -> [String: Data] {
        var files: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let path = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: directory + "/" + path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files[path] = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + path))
            }
        }
        return files
    }

    static func apiKeyNames(_ live: LiveServer, _ tenant: String) -> [String] {
        guard let id = try? TenantID(tenant) else { return [] }
        return live.server.router.runtime(for: id)?.configuration.apiKeys.map(\.name) ?? []
    }
}
