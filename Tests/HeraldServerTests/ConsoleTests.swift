import APNsSandbox
import Crypto
import Foundation
import HTTPTypes
import Herald
import HeraldCore
import Hummingbird
import Synchronization
import Testing

@testable import HeraldServer

/// A browser's side of the console, over the test client: the session cookie, the CSRF token of
/// the last page, and multipart forms.
struct ConsoleBrowser: Sendable {
    let client: APIClient
    var session: String?
    var csrf: String?

    static let boundary = "----herald-console-test-boundary"

    /// A `multipart/form-data` body: text fields, then files (name, file name, bytes).
    static func form(_ fields: [(String, String)], files: [(String, String, [UInt8])] = []) -> [UInt8] {
        var body: [UInt8] = []
        for (name, value) in fields {
            body += Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n".utf8)
        }
        for (name, filename, bytes) in files {
            body += Array(
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"; filename=\"\(filename)\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                    .utf8)
            body += bytes + Array("\r\n".utf8)
        }
        body += Array("--\(boundary)--\r\n".utf8)
        return body
    }

    static func cookies(_ reply: APIClient.Reply) -> [String: String] {
        var cookies: [String: String] = [:]
        for line in reply.headers[values: .setCookie] {
            let pair = line.split(separator: ";")[0].split(separator: "=", maxSplits: 1)
            cookies[String(pair[0])] = pair.count > 1 ? String(pair[1]) : ""
        }
        return cookies
    }

    /// The value of the first `name="csrf"` hidden field of a page.
    static func csrf(in html: String) -> String? {
        guard let range = html.range(of: #"name="csrf" value=""#) else { return nil }
        let rest = html[range.upperBound...]
        return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
    }

    func get(_ path: String) async throws -> APIClient.Reply {
        var headers = HTTPFields()
        if let session { headers[.cookie] = "herald_console=\(session)" }
        return try await client.request(.get, path, contentType: nil, headers: headers)
    }

    func post(
        _ path: String, _ fields: [(String, String)], files: [(String, String, [UInt8])] = [], csrf: String? = nil,
        headers extra: HTTPFields = [:]
    ) async throws -> APIClient.Reply {
        var headers = extra
        if let session { headers[.cookie] = "herald_console=\(session)" }
        let token = csrf ?? self.csrf ?? ""
        return try await client.request(
            .post, path, body: Self.form([("csrf", token)] + fields, files: files),
            contentType: "multipart/form-data; boundary=\(Self.boundary)", headers: headers)
    }

    /// Logs in with `token`; returns the login answer.
    mutating func login(_ token: String, headers: HTTPFields = [:]) async throws -> APIClient.Reply {
        let page = try await client.request(.get, "/console/login", contentType: nil)
        let loginCookie = Self.cookies(page)["herald_console_login"] ?? ""
        var loginHeaders = headers
        loginHeaders[.cookie] = "herald_console_login=\(loginCookie)"
        let reply = try await client.request(
            .post, "/console/login", body: Self.form([("csrf", Self.csrf(in: page.text) ?? ""), ("token", token)]),
            contentType: "multipart/form-data; boundary=\(Self.boundary)", headers: loginHeaders)
        if let session = Self.cookies(reply)["herald_console"], !session.isEmpty {
            self.session = session
            csrf = Self.csrf(in: try await get("/console/tenants").text)
        }
        return reply
    }
}

@Suite("Console: login, pages, forms")
struct ConsoleTests {
    static let admin = "console-admin-token"

    @Test func aWrongAdminTokenStaysOutAndTheRightOneOpensASession() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            // No session: every page sends to the login page.
            let tenants = try await browser.get("/console/tenants")
            #expect(tenants.status == 303)
            #expect(tenants.headers[.location] == "/console/login")
            let page = try await browser.get("/console/login")
            #expect(page.status == 200)
            let loginCookie = try #require(page.headers[values: .setCookie].first { $0.hasPrefix("herald_console_login=") })
            #expect(loginCookie.contains("HttpOnly") && loginCookie.contains("SameSite=Strict") && loginCookie.contains("Path=/console"))

            let wrong = try await browser.login(Self.admin + "x")
            #expect(wrong.status == 401)
            #expect(wrong.text.contains("The admin token is wrong"))
            #expect(ConsoleBrowser.cookies(wrong)["herald_console"] == nil)
            #expect(browser.session == nil)
            #expect(!wrong.text.contains(Self.admin))

            let right = try await browser.login(Self.admin)
            #expect(right.status == 303)
            #expect(right.headers[.location] == "/console/tenants")
            let cookie = try #require(right.headers[values: .setCookie].first { $0.hasPrefix("herald_console=") })
            #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
            #expect(!cookie.contains("Secure"), "plain HTTP: a Secure cookie would never come back")
            let list = try await browser.get("/console/tenants")
            #expect(list.status == 200)
            #expect(list.text.contains("acme") && list.text.contains("globex"))
            #expect(list.headers[.contentSecurityPolicy]?.contains("default-src 'none'") == true)
            #expect(list.headers[.cacheControl] == "no-store")
            // `no-referrer` would make browsers post the console's own forms with `Origin: null`.
            #expect(list.headers[HTTPField.Name("Referrer-Policy")!] == "same-origin")

            // Behind a TLS proxy the cookie is Secure.
            var proxied = ConsoleBrowser(client: live.client())
            let secure = try await proxied.login(Self.admin, headers: [HTTPField.Name("X-Forwarded-Proto")!: "https"])
            #expect(secure.headers[values: .setCookie].contains { $0.hasPrefix("herald_console=") && $0.contains("Secure") })

            // Logging out ends the session.
            #expect(try await browser.post("/console/logout", []).status == 303)
            #expect(try await browser.get("/console/tenants").status == 303)
        }
        await world.close()
    }

    @Test func theLoginFormNeedsItsOwnCSRFToken() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            // The right admin token, but no login cookie to match the form's token: refused.
            let reply = try await client.request(
                .post, "/console/login", body: ConsoleBrowser.form([("csrf", "forged"), ("token", Self.admin)]),
                contentType: "multipart/form-data; boundary=\(ConsoleBrowser.boundary)")
            #expect(reply.status == 403)
            #expect(ConsoleBrowser.cookies(reply)["herald_console"] == nil)
            // Not a multipart form: a clear refusal, not a crash.
            let json = try await client.request(.post, "/console/login", json: #"{"token": "x"}"#)
            #expect(json.status == 400)
        }
        await world.close()
    }

    @Test func formsWithoutTheSessionsTokenOrFromAnotherOriginAreRefused() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let fields = [("device_token", Tokens.make(0x91, 1))]
            #expect(try await browser.post("/console/tenants/acme/test", fields, csrf: "wrong").status == 403)
            #expect(try await browser.post("/console/tenants/acme/test", fields, csrf: "").status == 403)
            let crossSite = try await browser.post(
                "/console/tenants/acme/test", fields, headers: [.origin: "https://evil.example"])
            #expect(crossSite.status == 403)
            #expect(world.sandbox.requests.isEmpty, "a refused form sent nothing")
            // Without a session a form goes to the login page.
            var stranger = browser
            stranger.session = nil
            let anonymous = try await stranger.post("/console/tenants/acme/test", fields)
            #expect(anonymous.status == 303)
            #expect(world.sandbox.requests.isEmpty)
        }
        await world.close()
    }

    @Test func aTestNotificationShowsAPNsAnswerAndBadInputNamesTheField() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let page = try await browser.get("/console/tenants/acme")
            #expect(page.status == 200)
            #expect(page.text.contains("com.acme.app"))
            #expect(page.text.contains("<code>test</code>"), "API keys by name")
            #expect(!page.text.contains(acme.apiKey) && !page.text.contains(APIKeys.sha256Hex(of: acme.apiKey)))

            let sent = try await browser.post(
                "/console/tenants/acme/test",
                [("device_token", Tokens.make(0x92, 1)), ("topic", "com.acme.app"), ("environment", "development"), ("title", "<b>hi</b>")])
            #expect(sent.status == 200)
            #expect(sent.text.contains(#"id="send-status">200<"#), "\(sent.text)")
            #expect(world.sandbox.requests.filter(\.processed).count == 1)

            let bad = try await browser.post("/console/tenants/acme/test", [("device_token", "not-hex")])
            #expect(bad.status == 422)
            #expect(bad.text.contains(#"id="error">device_token"#), "\(bad.text)")
            let unknown = try await browser.get("/console/tenants/nobody")
            #expect(unknown.status == 404)

            // What a page shows is escaped: a tenant's last error or a field never becomes markup.
            let escaped = try await browser.post("/console/tenants/acme/test", [("device_token", "<script>x</script>")])
            #expect(!escaped.text.contains("<script>x"))
        }
        await world.close()
    }

    /// A tenant's channels on its page: created, listed, a test broadcast answered by APNs,
    /// synced and deleted, each through the API's service and in the audit log.
    @Test func channelsAreMadeBroadcastToAndDeletedFromTheTenantsPage() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let empty = try await browser.get("/console/tenants/acme")
            #expect(empty.text.contains(#"id="channel-form""#) && !empty.text.contains(#"id="broadcast-form""#))

            let created = try await browser.post(
                "/console/tenants/acme/channels",
                [("bundle_id", "com.acme.app"), ("environment", "development"), ("storage_policy", "0"), ("label", "<i>final</i>")])
            #expect(created.status == 200, "\(created.text)")
            let channel = try #require(world.sandbox.channels(bundleID: "com.acme.app").first)
            #expect(channel.storagePolicy == 0)
            #expect(created.text.contains("<code>\(channel.id)</code>") && created.text.contains("&lt;i&gt;final&lt;/i&gt;"))
            #expect(created.text.contains(#"id="broadcast-form""#))
            #expect(created.text.contains("com.acme.app in development: 1 of 10000 channels"))

            let sent = try await browser.post(
                "/console/tenants/acme/broadcast",
                [("channel", "development \(channel.id)"), ("event", "update"), ("content_state", #"{"score": "1-0"}"#)])
            #expect(sent.text.contains(#"id="broadcast-status">200<"#), "\(sent.text)")
            let broadcasts = world.sandbox.requests.filter { $0.kind == .broadcast }
            #expect(broadcasts.count == 1 && broadcasts.first?.channelID == channel.id && broadcasts.first?.delivered == true)
            let badState = try await browser.post(
                "/console/tenants/acme/broadcast", [("channel", "development \(channel.id)"), ("content_state", "[1]")])
            #expect(badState.status == 422 && badState.text.contains("content_state"))

            #expect(world.sandbox.createChannel(bundleID: "com.acme.app", storagePolicy: .mostRecentMessageStored) != nil)
            let synced = try await browser.post("/console/tenants/acme/channels/sync", [("environment", "development")])
            #expect(synced.text.contains("1 imported, 0 dropped"), "\(synced.text)")

            let deleted = try await browser.post(
                "/console/tenants/acme/channels/delete", [("channel", channel.id), ("environment", "development")])
            #expect(deleted.status == 200 && !deleted.text.contains("<code>\(channel.id)</code>"), "\(deleted.text)")
            #expect(world.sandbox.channels(bundleID: "com.acme.app").count == 1)

            let audit = try await live.client().request(.get, "/admin/audit?tenant=acme", key: Self.admin)
            let actions = (audit.json["entries"] as? [[String: Any]])?.compactMap { $0["action"] as? String } ?? []
            #expect(Set(actions).isSuperset(of: ["channel.create", "broadcast.test", "channel.sync", "channel.delete"]), "\(actions)")
        }
        await world.close()
    }

    /// The operator stops a running batch from the tenant's page: the admin API's cancel. The
    /// page then counts the unsent items as cancelled (not pending) and offers no second cancel;
    /// a bad or unknown job id names the field, a finished job is refused.
    @Test func aJobIsCancelledFromTheTenantsPage() async throws {
        let tokens = (0..<1_000).map { Tokens.make(0x93, $0) }
        let world = try await TestWorld.make(faults: SandboxFaults(addedLatency: 0.04))
        let acme = world.tenant("acme")
        let options = world.options(adminToken: Self.admin) { $0.jobs.concurrencyPerTenant = 8 }
        try await LiveServer.with(options) { live async throws in
            let client = live.client()
            let small = """
                {"job_id": "small", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": ["\(Tokens.make(0x94, 1))"]}
                """
            #expect(try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: small).status == 202)
            _ = try await client.waitForJob("small", key: acme.apiKey)
            let body = """
                {"job_id": "slow", "notification": {"topic": "com.acme.app", "aps": {"alert": "hi"}},
                 "device_tokens": [\(tokens.map { "\"\($0)\"" }.joined(separator: ","))]}
                """
            let accepted = try await client.request(.post, "/v1/notifications/batch", key: acme.apiKey, json: body)
            #expect(accepted.status == 202, "\(accepted.text)")

            var browser = ConsoleBrowser(client: client)
            _ = try await browser.login(Self.admin)
            let page = try await browser.get("/console/tenants/acme")
            #expect(page.status == 200)
            #expect(Self.cancelButtons(page.text) == ["slow"], "only the unfinished job has a cancel button")

            let stale = try await browser.post("/console/tenants/acme/jobs/cancel", [("job", "no-such-job")])
            #expect(stale.status == 422)
            #expect(stale.text.contains(#"id="error">job names no job of tenant acme"#), "\(stale.text)")
            let malformed = try await browser.post("/console/tenants/acme/jobs/cancel", [("job", "../x")])
            #expect(malformed.status == 422)
            #expect(malformed.text.contains(#"id="error">job is not a job id"#), "\(malformed.text)")
            let elsewhere = try await browser.post("/console/tenants/globex/jobs/cancel", [("job", "slow")])
            #expect(elsewhere.status == 422, "another tenant's page finds no such job")
            let finished = try await browser.post("/console/tenants/acme/jobs/cancel", [("job", "small")])
            #expect(finished.status == 409)
            #expect(finished.text.contains("Job small is finished"), "\(finished.text)")
            let refused = try await browser.post("/console/tenants/acme/jobs/cancel", [("job", "slow")], csrf: "wrong")
            #expect(refused.status == 403)

            let cancelled = try await browser.post("/console/tenants/acme/jobs/cancel", [("job", "slow")])
            #expect(cancelled.status == 200, "\(cancelled.text)")
            #expect(cancelled.text.contains(#"id="notice">Job slow is cancelled"#), "\(cancelled.text)")
            for _ in 0..<400 where live.server.runner.permitsHeld(by: try TenantID(acme.id)) > 0 {
                try await Task.sleep(for: .milliseconds(25))
            }
            let report = try await client.request(.get, "/v1/jobs/slow", key: acme.apiKey)
            #expect(report.json["state"] as? String == "cancelled")
            let counts = try #require(report.json["counts"] as? [String: Int])
            let unsent = try #require(counts["cancelled"])
            #expect(unsent > tokens.count / 2, "\(counts)")
            #expect(world.sandbox.requests.count == 1 + (counts["sent"] ?? -1) + (counts["failed"] ?? -1))

            // The page counts them as the report does, and offers no second cancel.
            let after = try await browser.get("/console/tenants/acme")
            #expect(Self.cancelButtons(after.text).isEmpty)
            let row = try #require(Self.jobRow("slow", in: after.text))
            #expect(row.contains("<td>cancelled</td>"))
            let numbers = [tokens.count, counts["sent"] ?? -1, counts["failed"] ?? -1, 0, unsent]
            let cells = numbers.map { #"<td class="number">\#($0)</td>"# }.joined()
            #expect(row.contains(cells), "items, sent, failed, pending 0, cancelled \(numbers): \(row)")
            #expect(row.contains(#"value="100"></progress>"#), "nothing left to do: \(row)")
        }
        await world.close()
    }

    /// The job ids of a page's cancel buttons.
    static func cancelButtons(_ html: String) -> [String] {
        html.components(separatedBy: #"<input type="hidden" name="job" value=""#).dropFirst().compactMap { rest in
            rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
        }
    }

    /// The table row of job `id` on a tenant's page.
    static func jobRow(_ id: String, in html: String) -> String? {
        guard let start = html.range(of: "<tr><td><code>\(id)</code></td>") else { return nil }
        let rest = html[start.lowerBound...]
        return rest.range(of: "</tr>").map { String(rest[..<$0.upperBound]) }
    }

    @Test func aRotationGoesThroughTheReloadAndABadKeyChangesNothing() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var browser = ConsoleBrowser(client: live.client())
            _ = try await browser.login(Self.admin)
            let keyFile = world.tenantsDirectory + "/keys/globex.p8"
            let before = try String(contentsOfFile: keyFile, encoding: .utf8)

            let junk = try await browser.post(
                "/console/tenants/globex/credentials", [("key_id", "GLOBEXKEY2")], files: [("key_file", "x.p8", Array("junk".utf8))])
            #expect(junk.status == 422)
            #expect(junk.text.contains(#"id="error">key_file"#), "\(junk.text)")
            #expect(try String(contentsOfFile: keyFile, encoding: .utf8) == before)
            #expect(Self.keyID(live, "globex") == "GLOBEXKEY1")

            let missing = try await browser.post("/console/tenants/globex/credentials", [("key_id", "GLOBEXKEY2")])
            #expect(missing.status == 422)
            #expect(missing.text.contains("key_file is required"))

            let newKey = P256.Signing.PrivateKey()
            let rotated = try await browser.post(
                "/console/tenants/globex/credentials", [("key_id", "GLOBEXKEY2"), ("revoke", "on")],
                files: [("key_file", "AuthKey_GLOBEXKEY2.p8", Array(newKey.pemRepresentation.utf8))])
            #expect(rotated.status == 200, "\(rotated.text)")
            #expect(rotated.text.contains("The credential was replaced"))
            #expect(Self.keyID(live, "globex") == "GLOBEXKEY2")
            let written = try FileManager.default.attributesOfItem(atPath: world.tenantsDirectory + "/keys/AuthKey_GLOBEXKEY2.p8")
            #expect((written[.posixPermissions] as? Int) == 0o600)
        }
        await world.close()
    }

    static func isRunning(_ live: LiveServer, _ tenant: String) -> Bool {
        guard let id = try? TenantID(tenant) else { return false }
        return live.server.router.runtime(for: id) != nil
    }

    static func keyID(_ live: LiveServer, _ tenant: String) -> String? {
        guard let id = try? TenantID(tenant), case .token(let token)? = live.server.router.runtime(for: id)?.configuration.auth else {
            return nil
        }
        return token.keyID
    }

    @Test func withoutAnAdminTokenThereIsNoConsole() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: nil)) { live async throws in
            let browser = ConsoleBrowser(client: live.client())
            #expect(try await browser.get("/console/login").status == 404)
            #expect(try await browser.get("/console/tenants").status == 404)
        }
        await world.close()
    }
}

@Suite("Console: sessions and counts as values")
struct ConsoleValueTests {
    final class FakeClock: Sendable {
        let start = PushInstant.now
        let offset = Mutex(Duration.zero)
        var now: PushInstant { start + offset.withLock { $0 } }
        func advance(_ duration: Duration) { offset.withLock { $0 += duration } }
    }

    @Test func sessionsExpireWhenIdleAndAtTheirLifetime() {
        let clock = FakeClock()
        let sessions = ConsoleSessions(capacity: 4, idleTimeout: .seconds(60), lifetime: .seconds(300), now: { clock.now })
        let session = sessions.open(actor: .breakGlass(source: nil), credential: .breakGlass)
        #expect(session.id.count == 43 && session.csrf != session.id)
        clock.advance(.seconds(50))
        #expect(sessions.session(for: session.id) != nil)
        clock.advance(.seconds(50))
        #expect(sessions.session(for: session.id) != nil, "a request restarts the idle time")
        clock.advance(.seconds(61))
        #expect(sessions.session(for: session.id) == nil)

        let long = sessions.open(actor: .breakGlass(source: nil), credential: .breakGlass)
        for _ in 0..<6 {
            clock.advance(.seconds(55))
            _ = sessions.session(for: long.id)
        }
        #expect(sessions.session(for: long.id) == nil, "no session outlives its lifetime")
        #expect(sessions.session(for: nil) == nil && sessions.session(for: "") == nil)
        #expect(sessions.session(for: String(repeating: "a", count: 10_000)) == nil)
    }

    @Test func sessionsAreBoundedByCapacity() {
        let clock = FakeClock()
        let sessions = ConsoleSessions(capacity: 3, now: { clock.now })
        var opened: [ConsoleSessions.Session] = []
        for _ in 0..<10 {
            clock.advance(.seconds(1))
            opened.append(sessions.open(actor: .breakGlass(source: nil), credential: .breakGlass))
        }
        #expect(sessions.count == 3)
        #expect(sessions.session(for: opened[0].id) == nil)
        #expect(sessions.session(for: opened[9].id) != nil)
        #expect(ConsoleSessions.tokensMatch(opened[9].csrf, opened[9].csrf))
        #expect(!ConsoleSessions.tokensMatch(opened[8].csrf, opened[9].csrf))
        #expect(!ConsoleSessions.tokensMatch(nil, opened[9].csrf))
    }

    @Test func failedLoginsEmptyTheBucketAndItRefills() {
        let clock = FakeClock()
        let sessions = ConsoleSessions(failedLoginBurst: 3, failedLoginsPerMinute: 6, now: { clock.now })
        for _ in 0..<3 {
            #expect(sessions.loginWait(source: "192.0.2.1") == nil)
            sessions.loginFailed(source: "192.0.2.1")
        }
        let wait = sessions.loginWait(source: "192.0.2.1")
        #expect(wait.map { $0 > .seconds(9) && $0 <= .seconds(10) } == true, "one more in 10 s at 6 a minute: \(String(describing: wait))")
        clock.advance(.seconds(10))
        #expect(sessions.loginWait(source: "192.0.2.1") == nil, "refilled")
        sessions.loginFailed(source: "192.0.2.1")
        #expect(sessions.loginWait(source: "192.0.2.1") != nil)
        // A successful login takes nothing: only failures are counted.
        clock.advance(.seconds(30))
        #expect(sessions.loginWait(source: "192.0.2.1") == nil)
        _ = sessions.open(actor: .breakGlass(source: nil), credential: .breakGlass)
        #expect(sessions.loginWait(source: "192.0.2.1") == nil)
        // Another address's failures hold back nobody else.
        for _ in 0..<10 { sessions.loginFailed(source: "198.51.100.7") }
        #expect(sessions.loginWait(source: "198.51.100.7") != nil)
        #expect(sessions.loginWait(source: "192.0.2.1") == nil)
    }

    @Test func theHourWindowCountsOnlyTheLastSixtyMinutes() {
        var window = HourWindow()
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        window.record(at: start, failed: false)
        window.record(at: start.addingTimeInterval(30), failed: true)
        window.record(at: start.addingTimeInterval(59 * 60), failed: false)
        let full = window.totals(at: start.addingTimeInterval(59 * 60))
        #expect(full.sends == 3 && full.failures == 1)
        // An hour on, the first minute has left the window.
        let later = window.totals(at: start.addingTimeInterval(61 * 60))
        #expect(later.sends == 1 && later.failures == 0)
        // Two hours on, the same buckets are reused; the old counts are gone.
        window.record(at: start.addingTimeInterval(120 * 60), failed: true)
        let reused = window.totals(at: start.addingTimeInterval(120 * 60))
        #expect(reused.sends == 1 && reused.failures == 1)
        // A clock gone wrong does not trap.
        window.record(at: Date(timeIntervalSince1970: .infinity), failed: false)
    }

    @Test func formsAreParsedWithinTheirBounds() throws {
        let body = ConsoleBrowser.form([("a", "1"), ("a", "2"), ("b", " text ")], files: [("f", "k.p8", [0, 1, 2])])
        let form = try ConsoleForm.parse(ByteBuffer(bytes: body), boundary: ConsoleBrowser.boundary)
        #expect(try form.text("a") == "1", "the first value of a field named twice")
        #expect(try form.text("b") == "text")
        #expect(form.file("f") == [0, 1, 2])
        #expect(form.parts["f"]?.filename == "k.p8")
        #expect(ConsoleForm.boundary(of: "multipart/form-data; boundary=\"abc\"") == "abc")
        #expect(ConsoleForm.boundary(of: "multipart/form-data; boundary=") == nil)
        #expect(ConsoleForm.boundary(of: "application/json") == nil)
        #expect(ConsoleForm.boundary(of: "multipart/form-data; boundary=" + String(repeating: "x", count: 71)) == nil)
        let many = ConsoleBrowser.form((0..<40).map { ("f\($0)", "v") })
        #expect(throws: ConsoleError.self) { try ConsoleForm.parse(ByteBuffer(bytes: many), boundary: ConsoleBrowser.boundary) }
        let broken = Array("--\(ConsoleBrowser.boundary)\r\nContent-Disposition: form-data; name=\"x\"\r\n".utf8)
        _ = try? ConsoleForm.parse(ByteBuffer(bytes: broken), boundary: ConsoleBrowser.boundary)
        let invalidUTF8 = try ConsoleForm.parse(
            ByteBuffer(bytes: ConsoleBrowser.form([], files: [("t", "t", [0xff, 0xfe])])), boundary: ConsoleBrowser.boundary)
        #expect(throws: ConsoleError.self) { try invalidUTF8.text("t") }
    }
}
