import Foundation
import Herald
import HeraldAPNs
import HeraldConfig
import HeraldCore
import Hummingbird

// The admin routes: the tenants with their health, and reloads.
extension APIContext {
    // MARK: GET /admin/tenants

    func adminTenants() -> Response {
        let tenants = router.tenantIDs.compactMap { router.runtime(for: $0)?.configuration }
        let circuits = Dictionary(grouping: router.circuits.statuses(now: router.configuration.clock.now), by: \.key.tenant)
        return JSONResponse.make(
            .object([
                ("tenants", .array(tenants.map { tenantJSON($0, circuits: circuits[$0.id] ?? []) })),
                (
                    "failures",
                    .array(
                        loadFailures.map { failure in
                            .object([
                                ("file", .string(failure.file)), ("tenant", .optional(failure.tenant?.rawValue)),
                                ("message", .string(failure.message)),
                            ])
                        })
                ),
            ]))
    }

    private func tenantJSON(_ tenant: TenantConfiguration, circuits: [DeliveryCircuits.Status]) -> JSONValue {
        let health = self.health.health(of: tenant.id)
        let credential = health?.credential
        var auth: [(String, JSONValue)] = [
            ("kind", .string(tenant.auth.kind.rawValue)), ("team_id", .string(tenant.teamID)),
        ]
        switch tenant.auth {
        case .token(let token):
            auth.append(("key_id", .string(token.keyID)))
        case .certificate:
            auth.append(("certificate_subject", .optional(credential?.certificateSubject)))
            auth.append(("not_after", .optional(credential?.notAfter)))
            if let notAfter = credential?.notAfter {
                auth.append(
                    (
                        "expires_in_days",
                        .count(Int(notAfter.timeIntervalSince(router.configuration.clock.date) / 86_400))
                    ))
            }
        }
        var environments: [(String, JSONValue)] = []
        for environment in APNsEnvironment.allCases {
            environments.append((environment.rawValue, .optional(tenant.endpoints.endpoint(for: environment)?.url)))
        }
        return .object([
            ("id", .string(tenant.id.rawValue)),
            ("file", .string(tenant.sourceFile)),
            ("auth", .object(auth)),
            ("topics", .array(tenant.topics.map(JSONValue.string))),
            ("endpoints", .object(environments)),
            ("default_environment", .string(tenant.endpoints.defaultEnvironment.rawValue)),
            ("plugins", .array(tenant.plugins.map { .string($0.name) })),
            ("api_keys", .array(tenant.apiKeys.map { .string($0.name) })),
            (
                "pool",
                .object([
                    ("state", .string(health?.poolState ?? "idle")),
                    ("connections_per_endpoint", .count(tenant.pool.connections)),
                    ("in_flight", .count(health?.inFlight ?? 0)),
                    ("answered", .count(health?.answered ?? 0)),
                    ("errors", .count(health?.errors ?? 0)),
                    ("last_answer_at", .optional(health?.lastAnswerAt)),
                ])
            ),
            (
                "last_error",
                health?.lastError.map { message in
                    .object([("message", .string(message)), ("at", .optional(health?.lastErrorAt))])
                } ?? .null
            ),
            ("reload", reloadJSON(tenant.id)),
            ("delivery", deliveryJSON(tenant.delivery, circuits: circuits)),
        ])
    }

    /// The tenant's delivery policy and its circuit per endpoint (endpoints it never sent to, or
    /// whose sends all succeeded, are closed and not listed).
    private func deliveryJSON(_ policy: DeliveryPolicy, circuits: [DeliveryCircuits.Status]) -> JSONValue {
        .object([
            ("guarantee", .string(policy.guarantee.rawValue)),
            ("max_retry_duration_seconds", .double(policy.maxRetryDuration.secondsValue)),
            (
                "circuits",
                .array(
                    circuits.map { status in
                        .object([
                            ("endpoint", .string(status.key.endpoint)), ("state", .string(status.state)),
                            ("failures", .count(status.failures)), ("openings", .count(status.openings)),
                            ("probe_in_seconds", status.probeIn.map { .double($0.secondsValue) } ?? .null),
                        ])
                    })
            ),
        ])
    }

    /// The tenant's reload state: when its runtime was installed, and the last reload's error
    /// (the tenant keeps running on the configuration it had).
    private func reloadJSON(_ tenant: TenantID) -> JSONValue {
        guard let status = reloader.status(of: tenant) else { return .null }
        return .object([
            ("loaded_at", .optional(status.loadedAt)),
            ("last_reload_at", .optional(status.lastReloadAt)),
            ("swaps", .count(status.swaps)),
            (
                "last_error",
                status.lastError.map { message in
                    .object([
                        ("message", .string(message)), ("at", .optional(status.lastErrorAt)),
                        ("consecutive_failures", .count(status.consecutiveFailures)),
                    ])
                } ?? .null
            ),
        ])
    }

    // MARK: POST /admin/reload

    /// Reads the tenants directory again (``ReloadCoordinator/reloadAll(revoke:trigger:)``): new
    /// and changed tenants are validated in full and swapped in (the old runtime drains, or with
    /// `{"revoke": true}` has its connections closed at once), removed files remove their tenant,
    /// unchanged tenants keep their runtime and connections. A file that fails keeps the tenant's
    /// current runtime and is reported.
    func adminReloadAll(_ request: Request) async throws -> Response {
        let revoke = try await revokeFlag(request)
        do throws(ReloadError) {
            return JSONResponse.make(reportJSON(try await reloader.reloadAll(revoke: revoke, trigger: .api)))
        } catch {
            throw Self.apiError(error)
        }
    }

    // MARK: POST /admin/tenants/{id}/reload

    /// Reads one tenant's file again and applies it to that tenant. A file that fails keeps the
    /// current runtime (422). `{"revoke": true}`: the tenant's credential changed because the old
    /// one was revoked; its connections are closed at once and unanswered sends resent once.
    func adminReload(_ request: Request, tenant raw: String) async throws -> Response {
        guard let id = try? TenantID(raw) else { throw APIError.notFound("tenant") }
        let revoke = try await revokeFlag(request)
        do throws(ReloadError) {
            return JSONResponse.make(reportJSON(try await reloader.reload(tenant: id, revoke: revoke, trigger: .api)))
        } catch {
            throw Self.apiError(error)
        }
    }

    // MARK: PUT /admin/tenants/{id}/credentials

    /// The members of the credential upload body.
    static let uploadMembers = ["kind", "key_id", "pem", "pkcs12_base64", "revoke"]

    /// Puts a new key or certificate in place for a tenant (next to its file, mode 0600) and
    /// reloads the tenant; when it does not validate, the old files are restored and the tenant
    /// keeps running on its old credential (422). The uploaded material is never echoed.
    ///
    /// Body: `{"kind": "token", "key_id": "NEWKEY0001", "pem": "-----BEGIN PRIVATE KEY-----…"}`,
    /// `{"kind": "certificate", "pem": "<certificate chain PEM, then its private key PEM>"}` or
    /// `{"kind": "pkcs12", "pkcs12_base64": "…"}`, each with an optional `"revoke": true`.
    func adminUploadCredentials(_ request: Request, tenant raw: String) async throws -> Response {
        guard let id = try? TenantID(raw) else { throw APIError.notFound("tenant") }
        let limit = reloader.configuration.maximumUploadBytes * 2 + 4096
        let body = try await jsonBody(request, limit: limit)
        let reader = try JSONObjectReader(body.root, path: "", allowed: Self.uploadMembers)
        let kind = try reader.string("kind", required: true) ?? ""
        let revoke = try reader.bool("revoke") ?? false
        let upload: CredentialUpload
        switch kind {
        case "token":
            guard let pem = try reader.string("pem", required: true) else { throw APIError.missingField("pem") }
            guard !reader.has("pkcs12_base64") else {
                throw APIError.invalidField("pkcs12_base64", "is for kind pkcs12; a token key goes in pem")
            }
            upload = .tokenKey(pem: Array(pem.utf8), keyID: try reader.string("key_id"))
        case "certificate":
            guard let pem = try reader.string("pem", required: true) else { throw APIError.missingField("pem") }
            guard !reader.has("key_id"), !reader.has("pkcs12_base64") else {
                throw APIError.invalidField(
                    reader.has("key_id") ? "key_id" : "pkcs12_base64", "is not used with kind certificate")
            }
            upload = .certificatePEM(Array(pem.utf8))
        case "pkcs12":
            guard let text = try reader.string("pkcs12_base64", required: true) else {
                throw APIError.missingField("pkcs12_base64")
            }
            guard !reader.has("key_id"), !reader.has("pem") else {
                throw APIError.invalidField(reader.has("key_id") ? "key_id" : "pem", "is not used with kind pkcs12")
            }
            guard let bytes = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else {
                throw APIError.invalidField("pkcs12_base64", "must be base64")
            }
            upload = .pkcs12(Array(bytes))
        default:
            throw APIError.invalidField("kind", "must be token, certificate or pkcs12")
        }
        do throws(ReloadError) {
            let report = try await reloader.uploadCredentials(tenant: id, upload, revoke: revoke)
            logger.notice("tenant credential replaced through the admin API", metadata: ["herald.tenant": "\(id)"])
            return JSONResponse.make(reportJSON(report))
        } catch {
            var refusal = Self.apiError(error)
            if error.isUploadRejected || error.isValidationFailure {
                // Name the body member that brought what could not apply.
                refusal.field =
                    error.message.hasPrefix("key_id") ? "key_id" : (kind == "pkcs12" ? "pkcs12_base64" : "pem")
            }
            throw refusal
        }
    }

    // MARK: Helpers

    /// `{"revoke": true}` in an optional JSON body.
    private func revokeFlag(_ request: Request) async throws -> Bool {
        let bytes = try await body(request, limit: 4096)
        guard !bytes.isEmpty else { return false }
        guard let contentType = request.headers[.contentType], Self.isJSON(contentType) else {
            throw APIError.unsupportedMediaType(request.headers[.contentType])
        }
        let root: JSONNode
        do {
            root = try StrictJSONParser.parse(bytes)
        } catch {
            throw APIError.malformedJSON(error)
        }
        return try JSONObjectReader(root, path: "", allowed: ["revoke"]).bool("revoke") ?? false
    }

    private func reportJSON(_ report: ReloadReport) -> JSONValue {
        func ids(_ list: [TenantID]) -> JSONValue { .array(list.map { .string($0.rawValue) }) }
        return .object([
            // Every tenant that got a new runtime (added or changed).
            ("reloaded", ids(report.added + report.reloaded)),
            ("added", ids(report.added)),
            ("revoked", ids(report.revoked)),
            ("unchanged", ids(report.unchanged)),
            ("removed", ids(report.removed)),
            (
                "failures",
                .array(
                    report.failures.map { failure in
                        .object([
                            ("file", .string(failure.file)), ("tenant", .optional(failure.tenant?.rawValue)),
                            ("message", .string(failure.message)),
                        ])
                    })
            ),
        ])
    }

    static func apiError(_ error: ReloadError) -> APIError {
        if error.isUnknownTenant { return APIError.notFound("tenant") }
        if error.isCredentialUnchanged {
            return APIError(status: .conflict, code: "credential_unchanged", message: error.message)
        }
        if error.isUploadRejected {
            return APIError(status: .unprocessableContent, code: "upload_rejected", message: error.message)
        }
        if error.isDirectoryUnreadable {
            return APIError(status: .internalServerError, code: "reload_failed", message: error.message)
        }
        return APIError(status: .unprocessableContent, code: "reload_failed", message: error.message)
    }
}
