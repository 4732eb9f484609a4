import Foundation
import HTTPTypes
import HeraldStore
import Testing

@testable import HeraldServer

/// Named admin accounts: roles on every admin route and console form, tokens that stop working
/// when revoked, and the audit log of every change.
@Suite("API: admin accounts, roles and audit")
struct AdminAccountsTests {
    static let admin = "accounts-admin-token"

    /// Makes an account with `role` through the API and one token for it; returns the token.
    static func account(_ name: String, _ role: AdminRole, client: APIClient, admin: String = admin) async throws -> String {
        let created = try await client.request(
            .post, "/admin/accounts", key: admin, json: #"{"name": "\#(name)", "role": "\#(role.rawValue)"}"#)
        #expect(created.status == 201, "\(created.text)")
        let token = try await client.request(.post, "/admin/accounts/\(name)/tokens", key: admin, json: #"{"name": "tests"}"#)
        #expect(token.status == 201, "\(token.text)")
        return try #require(token.json["secret"] as? String)
    }

    /// A path of `endpoint` with its parameters filled with names that exist nowhere: a call
    /// that passes the role check changes nothing (404, or 400/422 for its empty body).
    static func harmlessPath(_ endpoint: APIEndpoint) -> String {
        endpoint.path.replacingOccurrences(of: "{id}", with: "nosuchtenant")
            .replacingOccurrences(of: "{name}", with: "nosuchaccount").replacingOccurrences(of: "{job}", with: "nosuchjob")
            .replacingOccurrences(of: "{token}", with: "at_0000000000000000").replacingOccurrences(of: "{channel}", with: "bm9zdWNoY2hhbm5lbA")
    }

    @Test("a password is hashed at the configured cost and checked at its own; no hash never matches")
    func passwordsAreHashedAtTheConfiguredCost() async throws {
        let password = "correct horse battery"
        let low = try await AdminPasswords(cost: 4).hash(password)
        #expect(low.hasPrefix("$2b$04$"))
        let high = AdminPasswords(cost: 5)
        #expect(try await high.hash(password).hasPrefix("$2b$05$"))
        // A hash made at another cost still checks: each hash carries its cost.
        #expect(try await high.verify(password, hash: low))
        #expect(try await !high.verify("correct horse battery!", hash: low))
        #expect(try await !high.verify(password, hash: nil))
    }

    @Test func everyAdminRouteChecksTheCallersRole() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let tokens: [AdminRole: String] = [
                .viewer: try await Self.account("vera", .viewer, client: client),
                .operator: try await Self.account("otto", .operator, client: client),
                .owner: try await Self.account("olga", .owner, client: client),
            ]
            for endpoint in APIEndpoint.allCases {
                guard case .admin(let permission) = endpoint.access else { continue }
                // The ones who may not call it first: a 403 changes nothing.
                for role in AdminRole.allCases.sorted() {
                    let reply = try await client.request(
                        endpoint.method, Self.harmlessPath(endpoint), key: tokens[role],
                        json: endpoint.method == .get || endpoint.method == .delete ? nil : "{}")
                    if role >= permission.role {
                        #expect(reply.status != 403 && reply.status != 401, "\(endpoint) as \(role): \(reply.status) \(reply.text)")
                    } else {
                        #expect(reply.status == 403, "\(endpoint) as \(role): \(reply.status)")
                        #expect(reply.errorCode == "forbidden")
                        #expect((reply.error["message"] as? String)?.contains(permission.rawValue) == true, "\(reply.text)")
                    }
                }
            }
            // An account's own tokens are its own, whatever its role; another's are not.
            let own = try await client.request(.post, "/admin/accounts/vera/tokens", key: tokens[.viewer], json: #"{"name": "mine"}"#)
            #expect(own.status == 201, "\(own.text)")
            #expect(try await client.request(.get, "/admin/accounts/vera/tokens", key: tokens[.viewer]).status == 200)
            #expect(try await client.request(.get, "/admin/accounts/otto/tokens", key: tokens[.viewer]).status == 403)
            let me = try await client.request(.get, "/admin/me", key: tokens[.operator])
            #expect(me.json["account"] as? String == "otto" && me.json["role"] as? String == "operator")
            #expect(me.json["permissions"] as? [String] == ["admin:read", "admin:operate"])
            // Without a credential, or with a wrong one: 401 as before.
            #expect(try await client.request(.get, "/admin/tenants").status == 401)
            #expect(try await client.request(.get, "/admin/tenants", key: "hat_wrong").status == 401)
        }
        await world.close()
    }

    @Test func accountsAndTokensFollowTheirRules() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let olga = try await Self.account("olga", .owner, client: client)
            for (body, field) in [
                (#"{"name": "Bad Name", "role": "viewer"}"#, "name"), (#"{"name": "ok", "role": "root"}"#, "role"),
                (#"{"role": "viewer"}"#, "name"),
            ] {
                let refused = try await client.request(.post, "/admin/accounts", key: olga, json: body)
                #expect(refused.status == 422 || refused.status == 400, "\(body): \(refused.text)")
                #expect(refused.errorField == field, "\(body): \(refused.text)")
            }
            #expect(try await client.request(.post, "/admin/accounts", key: olga, json: #"{"name": "olga", "role": "viewer"}"#).status == 409)
            // The last owner stays.
            let demote = try await client.request(.patch, "/admin/accounts/olga", key: olga, json: #"{"role": "viewer"}"#)
            #expect(demote.status == 409, "\(demote.text)")
            #expect(try await client.request(.delete, "/admin/accounts/olga", key: Self.admin).status == 409)
            let list = try await client.request(.get, "/admin/accounts", key: olga)
            #expect((list.json["accounts"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["olga"])

            // A token: shown once, listed without its secret, revoked at once.
            let made = try await client.request(
                .post, "/admin/accounts/olga/tokens", key: olga, json: #"{"name": "laptop", "expires_in_days": 30}"#)
            #expect(made.status == 201)
            let secret = try #require(made.json["secret"] as? String)
            let id = try #require((made.json["token"] as? [String: Any])?["id"] as? String)
            #expect((made.json["token"] as? [String: Any])?["expires_at"] is String)
            #expect(try await client.request(.get, "/admin/me", key: secret).status == 200)
            let listed = try await client.request(.get, "/admin/accounts/olga/tokens", key: olga)
            #expect(!listed.text.contains(secret) && listed.text.contains(id))
            let revoked = try await client.request(.delete, "/admin/accounts/olga/tokens/\(id)", key: olga)
            #expect(revoked.status == 200 && revoked.json["revoked_at"] is String, "\(revoked.text)")
            #expect(try await client.request(.get, "/admin/me", key: secret).status == 401)
            #expect(try await client.request(.delete, "/admin/accounts/olga/tokens/\(id)", key: olga).status == 404)

            // A deleted account's tokens stop working with it.
            let vera = try await Self.account("vera", .viewer, client: client)
            #expect(try await client.request(.get, "/admin/me", key: vera).status == 200)
            #expect(try await client.request(.delete, "/admin/accounts/vera", key: olga).status == 200)
            #expect(try await client.request(.get, "/admin/me", key: vera).status == 401)
            // A role change applies to the next call.
            let otto = try await Self.account("otto", .operator, client: client)
            #expect(try await client.request(.post, "/admin/reload", key: otto).status == 200)
            #expect(try await client.request(.patch, "/admin/accounts/otto", key: olga, json: #"{"role": "viewer"}"#).status == 200)
            #expect(try await client.request(.post, "/admin/reload", key: otto).status == 403)
        }
        await world.close()
    }

    @Test func everyChangeIsAuditedUnderItsAccountAndNoSecretIsWritten() async throws {
        let world = try await TestWorld.make()
        let acme = world.tenant("acme")
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            var secrets: [String] = [Self.admin, acme.apiKey]
            let client = live.client()
            let otto = try await Self.account("otto", .operator, client: client)
            secrets.append(otto)
            var headers = HTTPFields()
            headers[HTTPField.Name("x-request-id")!] = "audit-req-1"
            let key = try await client.request(
                .post, "/admin/tenants/acme/api-keys", key: otto, json: #"{"name": "ci"}"#, headers: headers)
            #expect(key.status == 201, "\(key.text)")
            secrets.append(try #require(key.json["key"] as? String))
            let patched = try await client.request(
                .patch, "/admin/tenants/acme", key: otto, json: #"{"topics": ["com.acme.app", "com.acme.other"]}"#)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(try await client.request(.delete, "/admin/tenants/acme/api-keys/ci", key: otto).status == 204)
            #expect(try await client.request(.post, "/admin/tenants/acme/reload", key: otto).status == 200)

            // Through the console, as the same account.
            var browser = ConsoleBrowser(client: client)
            #expect(try await browser.login(otto).status == 303)
            let consoleKey = try await browser.post("/console/tenants/acme/api-keys", [("name", "console-key")])
            #expect(consoleKey.status == 200, "\(consoleKey.text)")

            let audit = try await client.request(.get, "/admin/audit?tenant=acme", key: Self.admin)
            #expect(audit.status == 200, "\(audit.text)")
            let entries = try #require(audit.json["entries"] as? [[String: Any]])
            #expect(
                entries.compactMap { $0["action"] as? String }
                    == ["api_key.create", "tenant.reload", "api_key.revoke", "tenant.update", "api_key.create"], "\(audit.text)")
            #expect(entries.allSatisfy { $0["account"] as? String == "otto" })
            let first = try #require(entries.last)
            #expect(first["request_id"] as? String == "audit-req-1" && first["object"] as? String == "ci")
            #expect(first["source"] as? String == "127.0.0.1")
            #expect((entries[3]["details"] as? [String: String])?["topics"] == "set")
            #expect(entries[0]["object"] as? String == "console-key")

            // Filters and paging.
            let page = try await client.request(.get, "/admin/audit?account=otto&limit=2", key: Self.admin)
            let paged = try #require(page.json["entries"] as? [[String: Any]])
            #expect(paged.count == 2)
            let before = try #require(page.json["next_before"] as? Int)
            let next = try await client.request(.get, "/admin/audit?account=otto&limit=2&before=\(before)", key: Self.admin)
            #expect((next.json["entries"] as? [[String: Any]])?.first?["id"] as? Int ?? .max < before)
            #expect(try await client.request(.get, "/admin/audit?bogus=1", key: Self.admin).status == 400)
            #expect(try await client.request(.get, "/admin/audit?from=yesterday", key: Self.admin).status == 400)
            let logins = try await client.request(.get, "/admin/audit?action=login", key: Self.admin)
            #expect((logins.json["entries"] as? [[String: Any]])?.first?["account"] as? String == "otto")
            let accounts = try await client.request(.get, "/admin/audit?action=account.create", key: Self.admin)
            #expect((accounts.json["entries"] as? [[String: Any]])?.first?["account"] as? String == AuditEntry.breakGlass)

            // No entry holds a secret: no admin token, account token or API key.
            let everything = try await client.request(.get, "/admin/audit?limit=500", key: Self.admin)
            for secret in secrets { #expect(!everything.text.contains(secret)) }
        }
        await world.close()
    }

    @Test func aViewersConsoleSessionReadsButChangesNothing() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let vera = try await Self.account("vera", .viewer, client: client)
            var browser = ConsoleBrowser(client: client)
            #expect(try await browser.login(vera).status == 303)
            #expect(try await browser.get("/console/tenants/acme").status == 200)
            let refused = try await browser.post("/console/tenants/acme/api-keys", [("name", "nope")])
            #expect(refused.status == 403)
            #expect(refused.text.contains("admin:operate"))
            let page = try await client.request(.get, "/admin/tenants/acme", key: Self.admin)
            #expect(page.json["api_keys"] as? [String] == ["test"])

            // Revoking the token ends the session at once.
            let tokens = try await client.request(.get, "/admin/accounts/vera/tokens", key: Self.admin)
            let id = try #require((tokens.json["tokens"] as? [[String: Any]])?.first?["id"] as? String)
            #expect(try await client.request(.delete, "/admin/accounts/vera/tokens/\(id)", key: Self.admin).status == 200)
            let after = try await browser.get("/console/tenants")
            #expect(after.status == 303 && after.headers[.location] == "/console/login")
        }
        await world.close()
    }

    /// Logs in to the console with an account and password; returns the login answer.
    static func passwordLogin(_ browser: inout ConsoleBrowser, account: String, password: String) async throws -> APIClient.Reply {
        let page = try await browser.client.request(.get, "/console/login", contentType: nil)
        var headers = HTTPFields()
        headers[.cookie] = "herald_console_login=\(ConsoleBrowser.cookies(page)["herald_console_login"] ?? "")"
        let reply = try await browser.client.request(
            .post, "/console/login",
            body: ConsoleBrowser.form([
                ("csrf", ConsoleBrowser.csrf(in: page.text) ?? ""), ("account", account), ("password", password),
            ]),
            contentType: "multipart/form-data; boundary=\(ConsoleBrowser.boundary)", headers: headers)
        if let session = ConsoleBrowser.cookies(reply)["herald_console"], !session.isEmpty {
            browser.session = session
            browser.csrf = ConsoleBrowser.csrf(in: try await browser.get("/console/tenants").text)
        }
        return reply
    }

    @Test func aPasswordLogsInAsTheAccountAndRepeatedFailuresLockOnlyThePassword() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            let vera = try await Self.account("vera", .viewer, client: client)
            let short = try await client.request(.put, "/admin/accounts/vera/password", key: vera, json: #"{"password": "short"}"#)
            #expect(short.status == 422 && short.errorField == "password", "\(short.text)")
            let password = "correct horse battery staple"
            // An account sets its own password; another's it may not.
            #expect(try await client.request(.put, "/admin/accounts/vera/password", key: vera, json: #"{"password": "\#(password)"}"#).status == 204)
            #expect(try await client.request(.put, "/admin/accounts/olga/password", key: vera, json: #"{"password": "\#(password)"}"#).status == 403)
            let listed = try await client.request(.get, "/admin/accounts", key: Self.admin)
            #expect((listed.json["accounts"] as? [[String: Any]])?.first?["password_set"] as? Bool == true)
            #expect(!listed.text.contains("$2"), "no hash in an answer")

            // The console as a viewer: who is logged in, no form that changes anything.
            var browser = ConsoleBrowser(client: client)
            #expect(try await Self.passwordLogin(&browser, account: "vera", password: password).status == 303)
            let page = try await browser.get("/console/tenants/acme")
            #expect(page.status == 200)
            #expect(page.text.contains(#"id="who">vera · viewer"#), "\(page.text.prefix(1200))")
            #expect(!page.text.contains("api-key-form") && !page.text.contains("rotate-form") && !page.text.contains("/console/onboard"))
            #expect(try await browser.get("/console/onboard").status == 403)
            let audit = try await browser.get("/console/audit")
            #expect(audit.status == 200 && audit.text.contains("account.password") && audit.text.contains("login"), "\(audit.text)")

            // Five wrong passwords in a row lock the password, not the account's tokens.
            var other = ConsoleBrowser(client: client)
            for attempt in 0..<AdminPasswords.lockThreshold {
                let wrong = try await Self.passwordLogin(&other, account: "vera", password: "wrong password \(attempt)")
                #expect(wrong.status == 401 && wrong.text.contains("The account or password is wrong"))
            }
            let locked = try await Self.passwordLogin(&other, account: "vera", password: password)
            #expect(locked.status == 429 && locked.text.contains("locked"), "\(locked.text)")
            #expect(other.session == nil)
            #expect(try await client.request(.get, "/admin/me", key: vera).status == 200)
            // An unknown account answers as a wrong password does.
            let unknown = try await Self.passwordLogin(&other, account: "nobody", password: password)
            #expect(unknown.status == 401 && unknown.text.contains("The account or password is wrong"))
            let lock = try await client.request(.get, "/admin/audit?action=account.locked", key: Self.admin)
            #expect((lock.json["entries"] as? [[String: Any]])?.first?["object"] as? String == "vera", "\(lock.text)")
            // An owner's new password ends the lock.
            let renewed = "another long passphrase"
            #expect(try await client.request(.put, "/admin/accounts/vera/password", key: Self.admin, json: #"{"password": "\#(renewed)"}"#).status == 204)
            #expect(try await Self.passwordLogin(&other, account: "vera", password: renewed).status == 303)
        }
        await world.close()
    }

    /// Every console page and form, for a viewer and an operator: a viewer reads every page and
    /// is refused every change (403 naming `admin:operate`); an operator is refused none (its
    /// empty forms are refused for their fields instead).
    @Test func everyConsolePageAndFormChecksTheRole() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            var viewer = ConsoleBrowser(client: client)
            #expect(try await viewer.login(try await Self.account("vera", .viewer, client: client)).status == 303)
            var operator_ = ConsoleBrowser(client: client)
            #expect(try await operator_.login(try await Self.account("otto", .operator, client: client)).status == 303)
            for page in ["/console/tenants", "/console/tenants/acme", "/console/audit"] {
                #expect(try await viewer.get(page).status == 200, "\(page)")
                #expect(try await operator_.get(page).status == 200, "\(page)")
            }
            #expect(try await viewer.get("/console/onboard").status == 403)
            #expect(try await operator_.get("/console/onboard").status == 200)
            let forms = [
                "test", "credentials", "settings", "api-keys", "api-keys/delete", "delete", "jobs/cancel", "channels",
                "channels/delete", "channels/sync", "broadcast",
            ]
                .map { "/console/tenants/acme/\($0)" } + ["/console/onboard"]
            for form in forms {
                let refused = try await viewer.post(form, [])
                #expect(refused.status == 403 && refused.text.contains("admin:operate"), "\(form): \(refused.status)")
                let allowed = try await operator_.post(form, [])
                #expect(allowed.status != 403 && allowed.status != 401, "\(form): \(allowed.status)")
            }
            // Nothing changed: acme still has its one key and its file.
            let acme = try await client.request(.get, "/admin/tenants/acme", key: Self.admin)
            #expect(acme.status == 200 && acme.json["api_keys"] as? [String] == ["test"])
        }
        await world.close()
    }

    @Test func wrongAdminCredentialsFromOneAddressAreSlowedBeforeAnyIsCompared() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            // No credential at all is not a guess.
            for _ in 0..<20 { #expect(try await client.request(.get, "/admin/tenants").status == 401) }
            let failures = live.server.api.routes.adminAuthenticator.failures
            for attempt in 0..<failures.burst {
                #expect(try await client.request(.get, "/admin/tenants", key: "hat_guess-\(attempt)").status == 401)
            }
            // The bucket emptied far below what any test run could refill (10 a minute), however
            // slowly the requests went (its arithmetic on a manual clock is
            // `failedLoginsEmptyTheBucketAndItRefills`): from here this address is refused before
            // any credential is compared, the right one too.
            for _ in 0..<100 { failures.failed(source: "127.0.0.1") }
            for key in ["hat_another-guess", Self.admin] {
                let refused = try await client.request(.get, "/admin/tenants", key: key)
                #expect(refused.status == 429 && refused.errorCode == "too_many_failures", "\(refused.text)")
                #expect(Int(refused.headers[.retryAfter] ?? "") ?? 0 >= 1)
            }
        }
        await world.close()
    }

    @Test func anAccountHoldsABoundedNumberOfTokens() async throws {
        let world = try await TestWorld.make()
        try await LiveServer.with(world.options(adminToken: Self.admin)) { live async throws in
            let client = live.client()
            // A viewer makes its own tokens: the bound is one it cannot raise.
            let vera = try await Self.account("vera", .viewer, client: client)
            for index in 1..<AdminAccountHandlers.maxLiveTokens {
                let made = try await client.request(.post, "/admin/accounts/vera/tokens", key: vera, json: #"{"name": "t\#(index)"}"#)
                #expect(made.status == 201, "token \(index): \(made.text)")
            }
            let refused = try await client.request(.post, "/admin/accounts/vera/tokens", key: vera, json: #"{"name": "one more"}"#)
            #expect(refused.status == 409 && (refused.error["message"] as? String)?.contains("revoke one first") == true)
            let listed = try await client.request(.get, "/admin/accounts/vera/tokens", key: vera)
            let id = try #require((listed.json["tokens"] as? [[String: Any]])?.first?["id"] as? String)
            #expect(try await client.request(.delete, "/admin/accounts/vera/tokens/\(id)", key: Self.admin).status == 200)
            #expect(try await client.request(.post, "/admin/accounts/vera/tokens", key: vera, json: #"{"name": "after"}"#).status == 201)
        }
        await world.close()
    }

    @Test func anAccountInTheStoreEnablesTheAdminAPIWithoutTheAdminToken() async throws {
        let world = try await TestWorld.make()
        let (secret, id) = AdminTokens.generate()
        do {
            // Closed when it goes out of scope, before the server opens the file.
            let store = try SQLitePushStore(directory: (world.storagePath as NSString).deletingLastPathComponent)
            let now = Date()
            #expect(try await store.createAdminAccount(AdminAccount(name: "first", role: .owner, createdAt: now)))
            try await store.addAdminToken(
                AdminTokenRecord(id: id, account: "first", name: "bootstrap", createdAt: now, expiresAt: nil),
                sha256: APIKeys.sha256Hex(of: secret))
        }
        try await LiveServer.with(world.options(adminToken: nil)) { live async throws in
            let client = live.client()
            #expect(try await client.request(.get, "/admin/tenants").status == 401)
            let me = try await client.request(.get, "/admin/me", key: secret)
            #expect(me.status == 200 && me.json["account"] as? String == "first", "\(me.text)")
        }
        await world.close()
    }
}

/// `herald admin`: the first owner made on the store itself, then accounts through the API as
/// that owner; both in the audit log under who made them.
@Suite("herald admin: accounts from the command line")
struct AdminCommandTests {
    @Test func theFirstOwnerIsMadeOnTheStoreAndTheNextAccountsThroughTheAPI() async throws {
        let binary = try #require(CrashResumeTests.heraldBinary)
        let world = try await TestWorld.make()
        let config = world.directory + "/cli-herald.yaml"
        try "tenants_dir: tenants\nlisten: {host: 127.0.0.1, port: 1}\nstorage_path: \(world.storagePath)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let bootstrap = try await TenantsCommandTests.herald(
            binary, ["admin", "accounts", "create", "first", "--role", "owner", "--store", "--config", config], token: "")
        #expect(bootstrap.status == 0, "\(bootstrap.errors)")
        let secret = try #require(TenantsCommandTests.json(bootstrap.output)["secret"] as? String, "\(bootstrap.output)")
        #expect(secret.hasPrefix("hat_"))
        let taken = try await TenantsCommandTests.herald(
            binary, ["admin", "accounts", "create", "first", "--role", "viewer", "--store", "--config", config], token: "")
        #expect(taken.status == 1 && taken.errors.contains("exists"), "\(taken.errors)")
        let password = try await TenantsCommandTests.herald(
            binary, ["admin", "accounts", "set-password", "first", "--password-env", "HERALD_TEST_PASSWORD", "--store", "--config", config],
            token: "", environment: ["HERALD_TEST_PASSWORD": "a long enough passphrase"])
        #expect(password.status == 0, "\(password.errors)")
        #expect(!password.output.contains("passphrase") && !password.errors.contains("passphrase"))

        try await LiveServer.with(world.options(adminToken: nil)) { live async throws in
            let server = ["--config", config, "--server", "http://127.0.0.1:\(live.port)"]
            // With the store held by herald serve, --store is refused.
            let held = try await TenantsCommandTests.herald(
                binary, ["admin", "accounts", "create", "x", "--role", "viewer", "--store", "--config", config], token: "")
            #expect(held.status == 2, "\(held.output) \(held.errors)")
            let vera = try await TenantsCommandTests.herald(
                binary, ["admin", "accounts", "create"] + server + ["vera", "--role", "viewer"], token: secret)
            #expect(vera.status == 0, "\(vera.errors)")
            let token = try await TenantsCommandTests.herald(
                binary, ["admin", "tokens", "create"] + server + ["vera", "--name", "cli", "--expires-in-days", "7"], token: secret)
            #expect(token.status == 0, "\(token.errors)")
            let veraSecret = try #require(TenantsCommandTests.json(token.output)["secret"] as? String)
            let refused = try await TenantsCommandTests.herald(
                binary, ["admin", "accounts", "delete"] + server + ["first"], token: veraSecret)
            #expect(refused.status == 1 && refused.errors.contains("admin:accounts"), "\(refused.errors)")
            let list = try await TenantsCommandTests.herald(binary, ["admin", "accounts", "list"] + server, token: veraSecret)
            #expect(list.status == 1, "a viewer may not list accounts: \(list.output)")

            let accounts = try await live.client().request(.get, "/admin/accounts", key: secret)
            #expect((accounts.json["accounts"] as? [[String: Any]])?.first { $0["name"] as? String == "first" }?["password_set"] as? Bool == true)
            // A change through `herald tenants` is audited under the account whose token it used.
            let operatorToken = try await AdminAccountsTests.account("otto", .operator, client: live.client(), admin: secret)
            let added = try await TenantsCommandTests.herald(
                binary, ["tenants", "add-key"] + server + ["acme", "from-cli"], token: operatorToken)
            #expect(added.status == 0, "\(added.errors)")
            let keyAudit = try await live.client().request(.get, "/admin/audit?action=api_key.create", key: secret)
            let keyEntry = (keyAudit.json["entries"] as? [[String: Any]])?.first
            #expect(keyEntry?["account"] as? String == "otto" && keyEntry?["object"] as? String == "from-cli", "\(keyAudit.text)")

            let audit = try await live.client().request(.get, "/admin/audit?action=account.create", key: secret)
            let entries = try #require(audit.json["entries"] as? [[String: Any]])
            #expect(entries.map { "\($0["account"] ?? "")/\($0["object"] ?? "")" } == ["first/otto", "first/vera", "store/first"])
        }
        await world.close()
    }
}
