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
        return JSONResponse.make(
            .object([
                ("tenants", .array(tenants.map(tenantJSON))),
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

    private func tenantJSON(_ tenant: TenantConfiguration) -> JSONValue {
        let health = self.health.health(of: tenant.id)
        let credential = health?.credential
        var auth: [(String, JSONValue)] = [("kind", .string(tenant.auth.kind.rawValue)), ("team_id", .string(tenant.teamID))]
        switch tenant.auth {
        case .token(let token):
            auth.append(("key_id", .string(token.keyID)))
        case .certificate:
            auth.append(("certificate_subject", .optional(credential?.certificateSubject)))
            auth.append(("not_after", .optional(credential?.notAfter)))
            if let notAfter = credential?.notAfter {
                auth.append(("expires_in_days", .count(Int(notAfter.timeIntervalSince(router.configuration.clock.date) / 86_400))))
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
        ])
    }

    // MARK: POST /admin/reload

    /// Reads the tenants directory again: new and changed tenants get a new runtime (the old one
    /// drains), removed files remove their tenant, unchanged tenants keep theirs. A file that
    /// fails keeps the tenant's current runtime and is reported.
    func adminReloadAll() async throws -> Response {
        try await reloads.withLock {
            let load: TenantDirectoryLoad
            do {
                load = try TenantLoader(environment: router.configuration.environment).loadDirectory(settings.tenantsDirectory)
            } catch {
                throw APIError(status: .unprocessableContent, code: "reload_failed", message: "\(error)")
            }
            var loaded: [String] = []
            var unchanged: [String] = []
            var failures = load.failures.map {
                TenantFailure(file: $0.file, tenant: $0.tenantID, message: $0.description)
            }
            for tenant in load.tenants {
                if let current = router.runtime(for: tenant.id), current.configuration == tenant {
                    unchanged.append(tenant.id.rawValue)
                    continue
                }
                do {
                    try await router.replace(tenant: tenant)
                    loaded.append(tenant.id.rawValue)
                } catch {
                    failures.append(TenantFailure(file: tenant.sourceFile, tenant: tenant.id, message: "\(error)"))
                }
            }
            // Tenants whose file is gone (not merely broken) are removed.
            let present = Set(load.tenants.map(\.id)).union(load.failures.compactMap(\.tenantID))
            let failedFiles = Set(load.failures.map(\.file))
            var removed: [String] = []
            for id in router.tenantIDs where !present.contains(id) {
                if let file = router.runtime(for: id)?.configuration.sourceFile, failedFiles.contains(file) { continue }
                await router.remove(tenant: id)
                removed.append(id.rawValue)
            }
            loadFailures = failures
            rebuildKeyIndex()
            runner.rescan()
            logger.notice(
                "tenants reloaded",
                metadata: [
                    "herald.loaded": "\(loaded.count)", "herald.unchanged": "\(unchanged.count)", "herald.removed": "\(removed.count)",
                    "herald.failed": "\(failures.count)",
                ])
            return JSONResponse.make(
                .object([
                    ("reloaded", .array(loaded.map(JSONValue.string))),
                    ("unchanged", .array(unchanged.map(JSONValue.string))),
                    ("removed", .array(removed.map(JSONValue.string))),
                    (
                        "failures",
                        .array(
                            failures.map { failure in
                                .object([
                                    ("file", .string(failure.file)), ("tenant", .optional(failure.tenant?.rawValue)),
                                    ("message", .string(failure.message)),
                                ])
                            })
                    ),
                ]))
        }
    }

    // MARK: POST /admin/tenants/{id}/reload

    /// Reads one tenant's file again and replaces its runtime (even when unchanged: a new
    /// credential file under the same path is picked up). A file that fails keeps the current runtime.
    func adminReload(tenant raw: String) async throws -> Response {
        guard let id = try? TenantID(raw) else { throw APIError.notFound("tenant") }
        return try await reloads.withLock {
            let loader = TenantLoader(environment: router.configuration.environment)
            var file = router.runtime(for: id)?.configuration.sourceFile
            if file == nil {
                // Not loaded (its file failed before, or it is new): find its file in the directory.
                let load = try? loader.loadDirectory(settings.tenantsDirectory)
                file =
                    load?.tenants.first(where: { $0.id == id })?.sourceFile
                    ?? load?.failures.first(where: { $0.tenantID == id })?.file
            }
            guard let file else { throw APIError.notFound("tenant") }
            let tenant: TenantConfiguration
            do {
                tenant = try loader.loadTenant(file: file)
            } catch {
                throw APIError(status: .unprocessableContent, code: "reload_failed", message: "\(error)", field: nil)
            }
            guard tenant.id == id else {
                throw APIError(
                    status: .unprocessableContent, code: "reload_failed",
                    message: "\(file) now holds tenant '\(tenant.id)', not '\(id)'; use POST /admin/reload")
            }
            do {
                try await router.replace(tenant: tenant)
            } catch {
                throw APIError(status: .unprocessableContent, code: "reload_failed", message: "\(error)")
            }
            loadFailures.removeAll { $0.tenant == id || $0.file == file }
            rebuildKeyIndex()
            runner.rescan()
            logger.notice("tenant reloaded", metadata: ["herald.tenant": "\(id)"])
            return JSONResponse.make(.object([("tenant", .string(id.rawValue)), ("reloaded", .bool(true))]))
        }
    }
}
