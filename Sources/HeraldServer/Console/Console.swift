import Foundation
import HTTPTypes
import Herald
import HeraldAPNs
import HeraldCore
import HeraldStore
import Hummingbird
import Logging

/// The operator console at `/console`: server-rendered pages (swift-mustache; the one script is
/// the usage chart's, from the console's own files) behind a login with an admin credential: an
/// account and its password, an account's token, or the break-glass admin token.
///
/// A login opens a session (``ConsoleSessions``): an HttpOnly, SameSite=Strict cookie scoped to
/// `/console`, Secure when the request came over TLS (or through a proxy that says
/// `X-Forwarded-Proto: https`). Every form carries the session's CSRF token (the login form a
/// double-submitted one) and a cross-origin or opaque `Origin` is refused; failed logins are
/// bounded (``ConsoleSessions/loginWait()``). The console reads and changes tenants only through
/// what the admin API uses: the router and health registry for what runs, the store for jobs and
/// invalid tokens, ``ReloadCoordinator`` for credential rotation, and the tenant lifecycle for
/// onboarding, settings, API keys and deletion. A session acts as the account it was opened with:
/// its role is checked again on every request (a revoked token or deleted account ends the
/// session at once), a change needs the `operator` role, and every change is written to the
/// audit log under the account. While neither the admin token is set nor an account exists, the
/// console does not exist (404, like `/admin`).
struct Console: Sendable {
    let router: Herald.Router
    let health: TenantHealthRegistry
    let reloader: ReloadCoordinator
    let store: any PushStore
    /// The jobs' cancel, the admin API's own path.
    let cancellation: JobCancellation
    let authenticator: AdminAuthenticator
    let audit: AuditTrail
    /// Console passwords' hashes (`api.password_cost`).
    let passwords: AdminPasswords
    /// The tenants' usage per hour (the tenant page's chart).
    let usage: any UsageLedger
    /// Broadcast channels and broadcasts, the API's own service.
    let channels: ChannelService
    let sessions: ConsoleSessions
    let pages: ConsolePages
    /// The tenant lifecycle the admin API uses (create, settings, API keys, delete).
    let lifecycle: any ConsoleLifecycle
    let logger: Logger
    /// The largest form (a credential upload with its fields).
    let maxFormBytes: Int

    static let sessionCookie = "herald_console"
    static let loginCookie = "herald_console_login"
    /// Jobs and invalid tokens listed on a tenant's page.
    static let listLimit = 20

    /// Adds the console's routes to the API's router.
    func addRoutes<Context: RequestContext>(to router: Hummingbird.Router<Context>) {
        let console = router.group("console")
        console.get { request, context in
            try await self.guarded(request, context) { _ in ConsolePages.redirect("/console/tenants") }
        }
        console.get("console.css") { _, _ in
            guard try await self.authenticator.isEnabled() else { throw APIError.routeNotFound }
            return self.pages.css()
        }
        console.get("usage-chart.js") { _, _ in
            guard try await self.authenticator.isEnabled() else { throw APIError.routeNotFound }
            return self.pages.script(self.pages.chartScript)
        }
        console.get("chart.min.js") { _, _ in
            guard try await self.authenticator.isEnabled() else { throw APIError.routeNotFound }
            return self.pages.script(self.pages.chartLibrary)
        }
        console.get("login") { request, _ in try await self.loginPage(request) }
        console.post("login") { request, context in try await self.login(request, source: AdminActor.source(of: context)) }
        console.post("logout") { request, context in
            try await self.form(request, context, needs: .read) { session, _ in await self.logout(session) }
        }
        console.get("tenants") { request, context in
            try await self.guarded(request, context) { session in await self.tenantsPage(session) }
        }
        console.get("tenants/:id") { request, context in
            let id = context.parameters.get("id") ?? ""
            return try await self.guarded(request, context) { session in try await self.tenantPage(session, id: id) }
        }
        // The forms of a tenant's page: each needs a session, the same origin and the CSRF token.
        let tenantForms: [(String, @Sendable (Console, ConsoleSessions.Session, String, ConsoleForm) async throws -> Response)] = [
            ("test", { try await $0.sendTest($1, id: $2, form: $3) }),
            ("credentials", { try await $0.rotate($1, id: $2, form: $3) }),
            ("settings", { try await $0.edit($1, id: $2, form: $3) }),
            ("api-keys", { try await $0.createKey($1, id: $2, form: $3) }),
            ("api-keys/delete", { try await $0.revokeKey($1, id: $2, form: $3) }),
            ("delete", { try await $0.delete($1, id: $2, form: $3) }),
            ("jobs/cancel", { try await $0.cancelJob($1, id: $2, form: $3) }),
            ("channels", { try await $0.createChannel($1, id: $2, form: $3) }),
            ("channels/delete", { try await $0.deleteChannel($1, id: $2, form: $3) }),
            ("channels/sync", { try await $0.syncChannels($1, id: $2, form: $3) }),
            ("broadcast", { try await $0.sendTestBroadcast($1, id: $2, form: $3) }),
        ]
        for (path, handler) in tenantForms {
            console.post(RouterPath("tenants/:id/" + path)) { request, context in
                let id = context.parameters.get("id") ?? ""
                return try await self.form(request, context) { session, form in try await handler(self, session, id, form) }
            }
        }
        console.get("audit") { request, context in
            let tenant = request.uri.queryParameters["tenant"].map(String.init)
            return try await self.guarded(request, context) { session in try await self.auditPage(session, tenant: tenant) }
        }
        console.get("onboard") { request, context in
            try await self.guarded(request, context) { session in
                guard session.actor.may(.operate) else { throw ConsoleError.lacks(.operate, session.actor) }
                return self.pages.render("onboard", OnboardPage(csrf: session.csrf))
            }
        }
        console.post("onboard") { request, context in
            try await self.form(request, context) { session, form in await self.onboard(session, form: form) }
        }
    }

    // MARK: Login

    private func loginPage(_ request: Request, error: String? = nil, status: HTTPResponse.Status = .ok) async throws -> Response {
        guard try await authenticator.isEnabled() else { throw APIError.routeNotFound }
        if error == nil, sessions.session(for: request.cookies[Self.sessionCookie]?.value) != nil {
            return ConsolePages.redirect("/console/tenants")
        }
        let token = ConsoleSessions.randomToken()
        var response = pages.render("login", LoginPage(error: error, loginCSRF: token), status: status)
        response.setCookie(cookie(Self.loginCookie, token, request: request, maxAge: 900))
        return response
    }

    /// `POST /console/login`: an account name and its password, or a token (an account's, or
    /// the break-glass admin token). Each source address's failures are bounded
    /// (``ConsoleSessions/loginWait(source:)``); an account's password logins are locked after
    /// ``AdminPasswords/lockThreshold`` failures in a row (its tokens keep working).
    private func login(_ request: Request, source: String?) async throws -> Response {
        guard try await authenticator.isEnabled() else { throw APIError.routeNotFound }
        let actor: AdminActor
        let credential: ConsoleSessions.Credential
        do {
            try checkOrigin(request)
            let form = try await ConsoleForm.read(request, limit: 8192)
            guard let expected = request.cookies[Self.loginCookie]?.value, !expected.isEmpty,
                ConsoleSessions.tokensMatch(try form.text("csrf"), expected)
            else { throw ConsoleError.forbidden }
            if let wait = sessions.loginWait(source: source) {
                let seconds = APIKeyRateLimiter.retryAfterSeconds(wait)
                logger.notice("console login refused: too many failed logins", metadata: ["herald.component": "console"])
                var response = try await loginPage(
                    request, error: "Too many failed logins; try again in \(seconds) s.", status: .tooManyRequests)
                response.headers[.retryAfter] = "\(seconds)"
                return response
            }
            if let account = try form.text("account"), !account.isEmpty {
                switch try await passwordLogin(account: account, password: try form.text("password") ?? "", source: source) {
                case .success(let found):
                    actor = found
                    credential = .password(account: found.account)
                case .failure(let refusal):
                    return try await loginPage(request, error: refusal.message, status: refusal.status)
                }
            } else {
                guard let token = try form.text("token"), let found = try await authenticator.authenticate(token, source: source)
                else {
                    sessions.loginFailed(source: source)
                    logger.notice("console login refused: wrong admin token", metadata: ["herald.component": "console"])
                    await audit.record(.loginFailed, details: ["via": "console token"], actor: Self.anonymous(source))
                    return try await loginPage(request, error: "The admin token is wrong.", status: .unauthorized)
                }
                actor = found
                credential = found.account == AuditEntry.breakGlass ? .breakGlass : .token(sha256: APIKeys.sha256Hex(of: token))
            }
        } catch let error as ConsoleError {
            return try await loginPage(request, error: error.message, status: error.status)
        }
        let session = sessions.open(actor: actor, credential: credential)
        await audit.record(.login, details: ["via": "console"], actor: actor)
        logger.info("console login", metadata: ["herald.component": "console", "herald.sessions": "\(sessions.count)"])
        var response = ConsolePages.redirect("/console/tenants")
        response.setCookie(cookie(Self.sessionCookie, session.id, request: request, maxAge: nil))
        response.setCookie(cookie(Self.loginCookie, "", request: request, maxAge: 0))
        return response
    }

    /// Who a failed login is recorded as when no account is known.
    private static func anonymous(_ source: String?) -> AdminActor {
        AdminActor(account: "unknown", role: .viewer, source: source)
    }

    /// An account's password login: the account's actor, or why not (the same words whether the
    /// account is unknown, has no password, or the password is wrong).
    private func passwordLogin(account name: String, password: String, source: String?) async throws
        -> Result<AdminActor, ConsoleError>
    {
        let wrong = ConsoleError(status: .unauthorized, message: "The account or password is wrong.")
        let state = AdminAccount.validName(name) ? try await authenticator.directory.adminLoginState(account: name) : nil
        let now = router.configuration.clock.date
        if let state, let until = state.lockedUntil, until > now {
            sessions.loginFailed(source: source)
            await audit.record(.loginFailed, details: ["via": "console password", "reason": "locked"], actor: actorOf(state, source))
            let minutes = max(1, Int((until.timeIntervalSince(now) / 60).rounded(.up)))
            return .failure(
                ConsoleError(
                    status: .tooManyRequests,
                    message: "This account's password logins are locked for \(minutes) more minutes after repeated failures. "
                        + "Its tokens still work; an owner can set a new password to end the lock."))
        }
        guard try await passwords.verify(password, hash: state?.passwordHash), let state else {
            sessions.loginFailed(source: source)
            guard let state else {
                await audit.record(.loginFailed, details: ["via": "console password"], actor: Self.anonymous(source))
                return .failure(wrong)
            }
            await audit.record(.loginFailed, details: ["via": "console password"], actor: actorOf(state, source))
            if let until = try await authenticator.directory.recordAdminLoginFailure(
                account: name, at: now, threshold: AdminPasswords.lockThreshold, lockFor: AdminPasswords.lockDuration)
            {
                logger.warning(
                    "admin account locked after repeated failed logins",
                    metadata: ["herald.component": "console", "herald.account": "\(name)"])
                await audit.record(
                    .accountLocked, object: name, details: ["until": Timestamps.iso8601(until)], actor: actorOf(state, source))
            }
            return .failure(wrong)
        }
        try await authenticator.directory.recordAdminLoginSuccess(account: name)
        return .success(actorOf(state, source))
    }

    private func actorOf(_ state: AdminLoginState, _ source: String?) -> AdminActor {
        AdminActor(account: state.account.name, role: state.account.role, source: source)
    }

    private func logout(_ session: ConsoleSessions.Session) async -> Response {
        sessions.close(session.id)
        await audit.record(.logout, details: ["via": "console"])
        var response = ConsolePages.redirect("/console/login")
        response.setCookie(Cookie(name: Self.sessionCookie, value: "", maxAge: 0, path: "/console", httpOnly: true, sameSite: .strict))
        return response
    }

    /// A console cookie: HttpOnly, SameSite=Strict, only for `/console`, Secure over TLS.
    private func cookie(_ name: String, _ value: String, request: Request, maxAge: Int?) -> Cookie {
        Cookie(
            name: name, value: value, maxAge: maxAge, path: "/console", secure: Self.isSecure(request), httpOnly: true,
            sameSite: .strict)
    }

    /// Whether the browser reached the console over TLS: directly, or through a proxy that says so.
    static func isSecure(_ request: Request) -> Bool {
        request.uri.scheme == .https
            || request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.lowercased() == "https"
    }

    // MARK: Guards

    /// A page that needs a session: without one, the login page. The session's account is
    /// looked up again (its role may have changed; a revoked token or deleted account ends the
    /// session), and the page is served as that account (``AdminActor/current``).
    private func guarded(
        _ request: Request, _ context: some RequestContext, _ body: (ConsoleSessions.Session) async throws -> Response
    ) async throws -> Response {
        guard try await authenticator.isEnabled() else { throw APIError.routeNotFound }
        guard var session = sessions.session(for: request.cookies[Self.sessionCookie]?.value) else {
            return ConsolePages.redirect("/console/login")
        }
        let account: AdminAccount?
        switch session.credential {
        case .breakGlass: account = nil
        case .token(let sha256):
            account = try await authenticator.directory.authenticateAdminToken(sha256: sha256, now: router.configuration.clock.date)?.0
            if account == nil { return endSession(session) }
        case .password(let name):
            account = try await authenticator.directory.adminAccount(named: name)
            if account == nil { return endSession(session) }
        }
        if let account { session.actor.role = account.role }
        session.actor.source = AdminActor.source(of: context)
        return try await AdminActor.$current.withValue(session.actor) {
            do {
                return try await body(session)
            } catch let error as ConsoleError {
                return messagePage(session, error)
            }
        }
    }

    /// The newest 100 audit entries, of one tenant when `tenant` is given (a viewer may read them).
    private func auditPage(_ session: ConsoleSessions.Session, tenant: String?) async throws -> Response {
        let filter = tenant.flatMap { $0.isEmpty || $0.unicodeScalars.count > 256 ? nil : $0 }
        let entries = try await authenticator.directory.auditEntries(AuditQuery(tenant: filter, limit: 100))
        return pages.render(
            "audit",
            AuditPage(
                csrf: session.csrf, tenant: filter,
                entries: entries.map { entry in
                    AuditPage.Entry(
                        at: Timestamps.iso8601(entry.at), account: entry.account, action: entry.action, tenant: entry.tenant,
                        object: entry.object,
                        details: entry.details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "),
                        source: entry.source)
                }))
    }

    /// The session's credential stopped working (a revoked or expired token, a deleted account).
    private func endSession(_ session: ConsoleSessions.Session) -> Response {
        sessions.close(session.id)
        return ConsolePages.redirect("/console/login")
    }

    /// A form post: a session whose role has `permission` (a change needs `operator`), a
    /// same-origin request, and the session's CSRF token in the form.
    private func form(
        _ request: Request, _ context: some RequestContext, needs permission: AdminPermission = .operate,
        _ body: (ConsoleSessions.Session, ConsoleForm) async throws -> Response
    ) async throws -> Response {
        try await guarded(request, context) { session in
            guard session.actor.may(permission) else { throw ConsoleError.lacks(permission, session.actor) }
            try checkOrigin(request)
            let form = try await ConsoleForm.read(request, limit: maxFormBytes)
            guard ConsoleSessions.tokensMatch(try form.text("csrf"), session.csrf) else {
                logger.notice("console form refused: CSRF token missing or wrong", metadata: ["herald.component": "console"])
                throw ConsoleError.forbidden
            }
            return try await body(session, form)
        }
    }

    /// Refuses a request whose `Origin` names another site (browsers send it with every POST), or
    /// is `null` (an opaque origin: a sandboxed frame, a `file:` page, a cross-site redirect).
    private func checkOrigin(_ request: Request) throws(ConsoleError) {
        guard let origin = request.headers[.origin] else { return }
        guard let host = request.head.authority, let url = URL(string: origin), let originHost = url.host else {
            throw ConsoleError.forbidden
        }
        let originAuthority = url.port.map { "\(originHost):\($0)" } ?? originHost
        guard originAuthority.lowercased() == host.lowercased() else { throw ConsoleError.forbidden }
    }

    private func messagePage(_ session: ConsoleSessions.Session, _ error: ConsoleError) -> Response {
        pages.render(
            "message", MessagePage(title: error.status == .notFound ? "Not found" : "Refused", csrf: session.csrf, error: error.message),
            status: error.status)
    }

    // MARK: Tenants

    func tenantsPage(_ session: ConsoleSessions.Session, notice: String? = nil) async -> Response {
        let now = router.configuration.clock.date
        let rows = router.tenantIDs.compactMap { router.runtime(for: $0)?.configuration }.map { tenant in
            let health = self.health.health(of: tenant.id)
            return TenantsPage.Row(
                id: tenant.id.rawValue, health: healthWord(tenant, health: health, now: now), auth: tenant.auth.kind.rawValue,
                credential: credentialText(tenant, health: health, now: now), pool: poolText(tenant, health: health),
                lastError: lastError(tenant, health: health), sends: health?.sendsLastHour ?? 0,
                failures: health?.failuresLastHour ?? 0)
        }
        let failures = reloader.failures.map { TenantsPage.Failure(file: $0.file, message: $0.message) }
        return pages.render("tenants", TenantsPage(
                csrf: session.csrf, notice: notice, tenants: rows, failures: failures, hasFailures: !failures.isEmpty))
    }

    /// ok, warning or failing, at a glance.
    func healthWord(_ tenant: TenantConfiguration, health: TenantHealth?, now: Date) -> String {
        let expiresIn = health?.credential?.notAfter.map { $0.timeIntervalSince(now) }
        if reloader.status(of: tenant.id)?.lastError != nil || (expiresIn.map { $0 <= 0 } ?? false) {
            return "failing"
        }
        if let health, health.sendsLastHour > 0, health.failuresLastHour == health.sendsLastHour {
            return "failing"
        }
        if (expiresIn.map { $0 < 30 * 86_400 } ?? false) || (health?.failuresLastHour ?? 0) > 0 {
            return "warning"
        }
        return "ok"
    }

    func credentialText(_ tenant: TenantConfiguration, health: TenantHealth?, now: Date) -> String {
        switch tenant.auth {
        case .token(let token):
            return "token key \(token.keyID)"
        case .certificate:
            guard let notAfter = health?.credential?.notAfter else { return "certificate (not read yet)" }
            let days = Int(notAfter.timeIntervalSince(now) / 86_400)
            let date = notAfter.formatted(.iso8601.year().month().day())
            return days < 0 ? "certificate expired on \(date)" : "certificate expires \(date) (in \(days) days)"
        }
    }

    private func poolText(_ tenant: TenantConfiguration, health: TenantHealth?) -> String {
        "\(health?.poolState ?? "idle"), \(tenant.pool.connections) connection(s) per endpoint, \(health?.inFlight ?? 0) in flight"
    }

    private func lastError(_ tenant: TenantConfiguration, health: TenantHealth?) -> String? {
        if let reload = reloader.status(of: tenant.id)?.lastError { return "reload: \(reload)" }
        return health?.lastError
    }

    // MARK: A tenant

    func runningTenant(_ raw: String) throws(ConsoleError) -> TenantConfiguration {
        guard let id = try? TenantID(raw), let tenant = router.runtime(for: id)?.configuration else { throw ConsoleError.notFound }
        return tenant
    }

    func tenantPage(
        _ session: ConsoleSessions.Session, id raw: String, notice: String? = nil, error: ConsoleError? = nil,
        sendResult: TenantPage.SendResult? = nil, newKey: TenantPage.NewKey? = nil, typed: TenantPage.Edit? = nil,
        broadcastResult: TenantPage.BroadcastResult? = nil
    ) async throws -> Response {
        let tenant = try runningTenant(raw)
        let now = router.configuration.clock.date
        let health = self.health.health(of: tenant.id)
        var jobs: [TenantPage.JobRow] = []
        var invalid: [TenantPage.InvalidToken] = []
        var storeProblem: String? = nil
        do {
            for job in try await store.jobs(tenant: tenant.id, states: nil, limit: Self.listLimit) {
                jobs.append(Self.jobRow(job, progress: try await store.progress(tenant: tenant.id, job: job.id)))
            }
            invalid = try await store.invalidTokens(tenant: tenant.id, limit: Self.listLimit).map { record in
                TenantPage.InvalidToken(
                    token: record.token.hex, topic: record.topic, environment: record.environment.rawValue,
                    reason: record.reason.wireValue, recorded: Self.timestamp(record.recordedAt))
            }
        } catch {
            logger.warning(
                "console: the store could not be read", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
            storeProblem = "The store could not be read; jobs and invalid tokens are not shown."
        }
        let usage = try? await usageSummary(tenant.id, now: now)
        let channelList = await channelSection(tenant)
        let keyID: String
        var keyIDs: [String] = []
        if case .token(let token) = tenant.auth {
            keyID = token.keyID
            if token.keys.count > 1 { keyIDs = token.keys.map(\.keyID) }
        } else {
            keyID = ""
        }
        let page = TenantPage(
            title: "Tenant \(tenant.id)", csrf: session.csrf, notice: notice, error: error?.message ?? storeProblem,
            tenant: TenantPage.Tenant(
                id: tenant.id.rawValue, file: tenant.sourceFile, teamID: tenant.teamID, auth: tenant.auth.kind.rawValue,
                isToken: tenant.auth.kind == .token, keyID: keyID, otherKeyIDs: keyIDs, severalKeys: keyIDs.count > 1, credential: credentialText(tenant, health: health, now: now),
                topics: tenant.topics,
                endpoints: APNsEnvironment.allCases.compactMap { environment in
                    tenant.endpoints.endpoint(for: environment).map {
                        TenantPage.Endpoint(
                            environment: environment.rawValue, url: $0.url,
                            isDefault: environment == tenant.endpoints.defaultEnvironment)
                    }
                },
                defaultEnvironment: tenant.endpoints.defaultEnvironment.rawValue, pool: poolText(tenant, health: health),
                plugins: tenant.plugins.map(\.name),
                delivery: "\(tenant.delivery.guarantee.rawValue), retries for up to \(Int(tenant.delivery.maxRetryDuration.secondsValue)) s",
                webhook: tenant.webhook.map { webhook in
                    webhook.origin == .section
                        ? webhook.url : "\(webhook.url) (set in the feedback plugin's options, deprecated: saving the settings moves it)"
                },
                proxy: tenant.proxy.map { $0.shown == "none" ? "none: directly" : $0.shown } ?? "the server's (config/herald.yaml)",
                lastError: lastError(tenant, health: health), sends: health?.sendsLastHour ?? 0,
                failures: health?.failuresLastHour ?? 0,
                apiKeys: tenant.apiKeys.map { TenantPage.APIKey(name: $0.name, tenantID: tenant.id.rawValue) },
                jobs: jobs, invalidTokens: invalid, sendResult: sendResult, newKey: newKey,
                edit: typed ?? Self.editForm(tenant), usage: usage, channels: channelList, broadcastResult: broadcastResult))
        return pages.render("tenant", page, status: error?.status ?? .ok)
    }

    /// The last 7 days' delivered and failed sends per hour, 168 hours up to the current one.
    func usageSummary(_ tenant: TenantID, now: Date) async throws -> TenantPage.Usage {
        let end = UsageCount.hour(of: now).addingTimeInterval(3600)
        let start = end.addingTimeInterval(-168 * 3600)
        var delivered = [Int64](repeating: 0, count: 168)
        var failed = [Int64](repeating: 0, count: 168)
        var batchItems: Int64 = 0
        for count in try await usage.usage(tenant: tenant.rawValue, from: start, to: end) {
            let index = Int((count.hour.timeIntervalSince(start) / 3600).rounded(.down))
            guard delivered.indices.contains(index) else { continue }
            if count.kind == .delivered { delivered[index] &+= count.count }
            if count.kind.isFailure { failed[index] &+= count.count }
            if count.kind == .batchItems { batchItems &+= count.count }
        }
        struct Series: Encodable {
            var hours: [String]
            var delivered: [Int64]
            var failed: [Int64]
        }
        let series = Series(
            hours: (0..<168).map { Timestamps.iso8601(start.addingTimeInterval(Double($0) * 3600)) }, delivered: delivered,
            failed: failed)
        let json = String(decoding: try JSONEncoder().encode(series), as: UTF8.self)
        return TenantPage.Usage(
            series: json, delivered: delivered.reduce(0, &+), failed: failed.reduce(0, &+), batchItems: batchItems,
            chart: pages.chartLibrary != nil)
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601)
    }

    // MARK: POST /console/tenants/{id}/test

    /// Sends one alert exactly as `POST /v1/notifications` does (the same decoding and checks,
    /// then the router), and shows APNs' answer.
    private func sendTest(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let result: PushResult
        do throws(ConsoleError) {
            let body = try Self.testNotificationJSON(form)
            result = try await TestNotification.send(body, tenant: tenant.id, router: router)
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        await audit.record(
            .testSend, tenant: tenant.id.rawValue, object: result.notificationID.rawValue,
            details: ["status": String(result.status), "environment": result.environment.rawValue])
        logger.info(
            "console test notification sent",
            metadata: ["herald.tenant": "\(tenant.id)", "herald.status": "\(result.status)", "herald.apns-id": "\(result.notificationID)"])
        return try await tenantPage(
            session, id: id,
            sendResult: TenantPage.SendResult(
                status: result.status, reason: result.reason?.wireValue, apnsID: result.notificationID.rawValue,
                environment: result.environment.rawValue, attempts: result.attempts))
    }

    /// The API's JSON for the form's fields (so the API's own rules check them).
    static func testNotificationJSON(_ form: ConsoleForm) throws(ConsoleError) -> [UInt8] {
        var object: [String: Any] = [
            "device_token": try form.required("device_token"),
            "aps": ["alert": ["title": try form.text("title") ?? "Herald test", "body": try form.text("body") ?? ""]],
        ]
        if let topic = try form.text("topic") { object["topic"] = topic }
        if let environment = try form.text("environment") { object["environment"] = environment }
        do {
            return Array(try JSONSerialization.data(withJSONObject: object))
        } catch {
            throw ConsoleError.badRequest("the test notification could not be encoded")
        }
    }

    // MARK: POST /console/tenants/{id}/credentials

    /// Puts a new credential in place through ``ReloadCoordinator/uploadCredentials(tenant:_:revoke:)``,
    /// what `PUT /admin/tenants/{id}/credentials` calls: validated in full, rolled back when it fails.
    private func rotate(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let upload: CredentialUpload
        do throws(ConsoleError) {
            upload = try Self.credentialUpload(form, kind: tenant.auth.kind)
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        let revoke = form.flag("revoke")
        do throws(ReloadError) {
            try await reloader.uploadCredentials(tenant: tenant.id, upload, revoke: revoke)
        } catch {
            let field = tenant.auth.kind == .token ? (error.message.hasPrefix("key_id") ? "key_id" : "key_file") : "certificate_file"
            return try await tenantPage(
                session, id: id, error: ConsoleError(status: .unprocessableContent, message: "\(field): \(error.message)", field: field))
        }
        await audit.record(.credentialUpload, tenant: tenant.id.rawValue, details: AuditTrail.details(upload, revoke: revoke))
        logger.notice(
            "tenant credential replaced through the console", metadata: ["herald.tenant": "\(tenant.id)", "herald.revoke": "\(revoke)"])
        return try await tenantPage(
            session, id: id, notice: revoke ? "The credential was replaced; the old one's connections were closed." : "The credential was replaced.")
    }

    /// The upload a rotation form holds: a `.p8` key (with its key ID) for token tenants; a PEM
    /// chain with its key, or a PKCS#12 bundle, for certificate tenants.
    static func credentialUpload(_ form: ConsoleForm, kind: AuthKind) throws(ConsoleError) -> CredentialUpload {
        switch kind {
        case .token:
            guard let key = form.file("key_file") else { throw ConsoleError.field("key_file", "is required: choose the new .p8 key") }
            let keyID = try form.text("key_id")
            if let keyID, !(keyID.utf8.count == 10 && keyID.utf8.allSatisfy { ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) }) {
                throw ConsoleError.field("key_id", "must be 10 characters, A-Z and 0-9")
            }
            let replaces = try form.text("replaces")
            return .tokenKey(pem: key, keyID: keyID, replacing: replaces)
        case .certificate:
            guard let bytes = form.file("certificate_file") else {
                throw ConsoleError.field("certificate_file", "is required: choose a PEM or .p12 file")
            }
            return bytes.starts(with: Array("-----BEGIN".utf8)) || bytes.starts(with: [0xEF, 0xBB, 0xBF])
                ? .certificatePEM(bytes) : .pkcs12(bytes)
        }
    }
}

/// A single notification through the API's own path: the JSON of `POST /v1/notifications`,
/// decoded and checked by ``NotificationDecoding``, sent by the router.
enum TestNotification {
    static func send(_ body: [UInt8], tenant: TenantID, router: Herald.Router) async throws(ConsoleError) -> PushResult {
        let notification: HeraldCore.Notification
        let environment: APNsEnvironment?
        do throws(APIError) {
            let root: JSONNode
            do {
                root = try StrictJSONParser.parse(body)
            } catch {
                throw APIError.malformedJSON(error)
            }
            let reader = try JSONObjectReader(root, path: "", allowed: NotificationDecoding.notificationFields)
            let token = try NotificationDecoding.deviceToken(reader)
            environment = try NotificationDecoding.environment(reader)
            notification = try NotificationDecoding.template(reader, body: body).notification(for: token)
        } catch {
            throw ConsoleError(
                status: .unprocessableContent, message: error.field.map { "\($0) \(error.message)" } ?? error.message, field: error.field)
        }
        do {
            return try await router.send(tenant: tenant, notification: notification, environment: environment)
        } catch let error as PushError {
            throw ConsoleError(status: .unprocessableContent, message: error.description, field: nil)
        } catch {
            throw ConsoleError(status: .serviceUnavailable, message: "the notification could not be sent", field: nil)
        }
    }
}
