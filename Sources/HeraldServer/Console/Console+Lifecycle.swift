import Foundation
import Herald
import HeraldCore
import Hummingbird

/// What the console's onboarding, settings, API-key and delete forms need: the tenant lifecycle
/// service the admin API uses (`POST /admin/tenants`, `PATCH /admin/tenants/{id}`, `…/api-keys`,
/// `DELETE /admin/tenants/{id}`), so the console never has a code path of its own for these
/// changes. Refusals come back as ``ConsoleError``s naming the form field.
protocol ConsoleLifecycle: Sendable {
    func create(_ draft: TenantDraft) async throws(ConsoleError)
    /// `PATCH /admin/tenants/{id}`: sets top-level sections of the tenant file (`topics`,
    /// `endpoints`, `pool`, `plugins`, `webhook`), validated, written and swapped like a reload.
    /// `webhookSecret`: the webhook's new signing secret (written to a 0600 file), as the API's
    /// `webhook.secret_value`.
    func update(tenant: TenantID, sections: [(String, JSONValue?)], webhookSecret: [UInt8]?) async throws(ConsoleError)
    func addAPIKey(tenant: TenantID, name: String, sha256Hex: String) async throws(ConsoleError)
    func removeAPIKey(tenant: TenantID, name: String) async throws(ConsoleError)
    func delete(tenant: TenantID) async throws(ConsoleError)
}

extension Console {
    /// `POST /console/onboard`: the create form. The new tenant's first API key is shown once,
    /// on the answer page (only its SHA-256 is written).
    func onboard(_ session: ConsoleSessions.Session, form: ConsoleForm) async -> Response {
        var typed = OnboardPage.Form()
        typed.id = (try? form.text("id")) ?? ""
        typed.teamID = (try? form.text("team_id")) ?? ""
        typed.topics = (try? form.text("topics")) ?? ""
        typed.production = (try? form.text("production")) ?? ""
        typed.development = (try? form.text("development")) ?? ""
        typed.caFile = (try? form.text("ca_file")) ?? ""
        typed.plugins = (try? form.text("plugins")) ?? ""
        typed.keyID = (try? form.text("key_id")) ?? ""
        typed.apiKeyName = (try? form.text("api_key_name")) ?? "default"
        typed.webhookURL = (try? form.text("webhook_url")) ?? ""
        let key = APIKeys.generate()
        do throws(ConsoleError) {
            let draft = try Self.draft(form, apiKeySHA256: APIKeys.sha256Hex(of: key))
            try await lifecycle.create(draft)
            logger.notice("tenant created through the console", metadata: ["herald.tenant": "\(draft.id)"])
            return pages.render(
                "onboard",
                OnboardPage(
                    csrf: session.csrf, notice: "Tenant \(draft.id) was validated, written and loaded.",
                    created: .init(tenant: draft.id.rawValue, name: draft.apiKeyName, key: key)),
                status: .created)
        } catch {
            return pages.render("onboard", OnboardPage(csrf: session.csrf, error: error.message, form: typed), status: error.status)
        }
    }

    /// The draft an onboarding form describes; the lifecycle checks it again, in full.
    static func draft(_ form: ConsoleForm, apiKeySHA256: String) throws(ConsoleError) -> TenantDraft {
        let rawID = try form.required("id")
        let id: TenantID
        do {
            id = try TenantID(rawID)
        } catch {
            throw ConsoleError.field("id", "\(error)")
        }
        let credential = try ConsoleAdminRules.credential(form)
        let apiKeyName = try form.text("api_key_name") ?? "default"
        let topics = list(try form.required("topics"))
        var sections: [(String, JSONValue)] = [("topics", .array(topics.map(JSONValue.string)))]
        var endpoints: [(String, JSONValue)] = []
        for name in ["production", "development", "ca_file"] {
            if let value = try form.text(name) { endpoints.append((name, .string(value))) }
        }
        if try form.text("production") == nil, try form.text("development") != nil {
            endpoints.append(("default", .string("development")))
        }
        if !endpoints.isEmpty { sections.append(("endpoints", .object(endpoints))) }
        let plugins = list(try form.text("plugins") ?? "")
        if !plugins.isEmpty { sections.append(("plugins", .array(plugins.map { .object([("name", .string($0))]) }))) }
        let webhookSecret = try form.text("webhook_secret")
        if let url = try form.text("webhook_url") {
            guard webhookSecret != nil else {
                throw ConsoleError.field("webhook_secret", "is required with the webhook URL (at least 16 bytes; it signs every event)")
            }
            sections.append(("webhook", .object([("url", .string(url))])))
        } else if webhookSecret != nil {
            throw ConsoleError.field("webhook_url", "is required with a webhook secret")
        }
        return TenantDraft(
            id: id, teamID: try form.required("team_id"), sections: sections, credential: credential,
            apiKeyName: apiKeyName, apiKeySHA256: apiKeySHA256, webhookSecret: webhookSecret.map { Array($0.utf8) })
    }

    /// Items separated by commas or line breaks, trimmed, empty ones dropped.
    static func list(_ text: String) -> [String] {
        text.split(whereSeparator: { $0 == "," || $0.isNewline }).map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            !$0.isEmpty
        }
    }

    /// `POST /console/tenants/{id}/settings`: the settings form. Only the sections that differ
    /// from what runs are sent; the lifecycle checks them as a reload checks a file.
    func edit(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let typed = Self.typedEdit(form)
        let changed: [String]
        do throws(ConsoleError) {
            let sections = try Self.editedSections(form, current: tenant)
            changed = sections.map(\.0)
            let webhookSecret = try form.text("webhook_secret").map { Array($0.utf8) }
            if !sections.isEmpty {
                try await lifecycle.update(tenant: tenant.id, sections: sections, webhookSecret: webhookSecret)
            }
        } catch {
            return try await tenantPage(session, id: id, error: error, typed: typed)
        }
        guard !changed.isEmpty else { return try await tenantPage(session, id: id, notice: "Nothing was changed.") }
        logger.notice(
            "tenant settings changed through the console",
            metadata: ["herald.tenant": "\(tenant.id)", "herald.sections": "\(changed.joined(separator: ","))"])
        return try await tenantPage(
            session, id: id, notice: "The \(changed.joined(separator: ", ")) settings were validated, written and applied.")
    }

    /// The settings form as it shows what runs.
    static func editForm(_ tenant: TenantConfiguration) -> TenantPage.Edit {
        TenantPage.Edit(
            topics: tenant.topics.joined(separator: "\n"), production: tenant.endpoints.production?.url ?? "",
            development: tenant.endpoints.development?.url ?? "",
            developmentIsDefault: tenant.endpoints.defaultEnvironment == .development,
            caFile: tenant.endpoints.trustRootsOrigin ?? "", connections: "\(tenant.pool.connections)",
            maxQueued: "\(tenant.pool.maxQueued)", plugins: tenant.plugins.map(\.name).joined(separator: ", "),
            webhookURL: tenant.webhook?.url ?? "", proxy: tenant.proxy?.shown ?? "")
    }

    /// What was typed into the settings form, to show it again with the refusal.
    static func typedEdit(_ form: ConsoleForm) -> TenantPage.Edit {
        func text(_ name: String) -> String { (try? form.text(name)) ?? "" }
        return TenantPage.Edit(
            topics: text("topics"), production: text("production"), development: text("development"),
            developmentIsDefault: text("default") == "development", caFile: text("ca_file"),
            connections: text("connections"), maxQueued: text("max_queued"), plugins: text("plugins"),
            webhookURL: text("webhook_url"), proxy: text("proxy"))
    }

    /// The tenant-file sections the settings form changes, in the file's own terms; empty when
    /// nothing differs from `current`. A plugin kept by name keeps its options; a new one has none.
    /// The webhook keeps its delivery settings and, when no new secret is typed, its secret; one
    /// the feedback plugin's options set moves to the `webhook` section when it changes.
    static func editedSections(_ form: ConsoleForm, current: TenantConfiguration) throws(ConsoleError) -> [(String, JSONValue?)] {
        var sections: [(String, JSONValue?)] = []
        let topics = list(try form.required("topics"))
        if topics != current.topics { sections.append(("topics", .array(topics.map(JSONValue.string)))) }

        let production = try form.text("production")
        let development = try form.text("development")
        let defaultEnvironment = try form.text("default") ?? current.endpoints.defaultEnvironment.rawValue
        let caFile = try form.text("ca_file")
        if production != current.endpoints.production?.url || development != current.endpoints.development?.url
            || defaultEnvironment != current.endpoints.defaultEnvironment.rawValue || caFile != current.endpoints.trustRootsOrigin
        {
            var endpoints: [(String, JSONValue)] = []
            if let production { endpoints.append(("production", .string(production))) }
            if let development { endpoints.append(("development", .string(development))) }
            endpoints.append(("default", .string(defaultEnvironment)))
            if let caFile { endpoints.append(("ca_file", .string(caFile))) }
            sections.append(("endpoints", .object(endpoints)))
        }

        let connections = try wholeNumber(form, "connections") ?? current.pool.connections
        let maxQueued = try wholeNumber(form, "max_queued") ?? current.pool.maxQueued
        if connections != current.pool.connections || maxQueued != current.pool.maxQueued {
            let pool = current.pool
            sections.append(
                (
                    "pool",
                    .object([
                        ("connections", .int(Int64(connections))), ("max_queued", .int(Int64(maxQueued))),
                        ("request_timeout", .double(pool.requestTimeout)), ("idle_timeout", .double(pool.idleTimeout)),
                        ("ping_interval", .double(pool.pingInterval)),
                    ])
                ))
        }

        let plugins = list(try form.text("plugins") ?? "")
        if plugins != current.plugins.map(\.name) {
            sections.append(
                (
                    "plugins",
                    .array(
                        plugins.map { name in
                            guard let kept = current.plugins.first(where: { $0.name == name }), kept.options != .null else {
                                return .object([("name", .string(name))])
                            }
                            return .object([("name", .string(name)), ("options", kept.options)])
                        })
                ))
        }

        // The proxy as a URL, `none` or `environment`; empty: the server's. Left as shown, it is
        // left alone (a proxy whose file gives credentials keeps them).
        let proxy = try form.text("proxy")
        if form.parts["proxy"] != nil, proxy != current.proxy?.shown {
            sections.append(("proxy", proxy.map(JSONValue.string)))
        }

        let webhookURL = try form.text("webhook_url")
        let webhookSecret = try form.text("webhook_secret")
        if webhookURL != current.webhook?.url || webhookSecret != nil {
            if let webhookURL {
                var members: [(String, JSONValue)] = [("url", .string(webhookURL))]
                if let kept = current.webhook {
                    if webhookSecret == nil, kept.origin == .feedbackOptions { members.append(("secret", .string(kept.secretReference))) }
                    members += Self.deliverySettings(of: kept)
                } else if webhookSecret == nil {
                    throw ConsoleError.field("webhook_secret", "is required with a new webhook (at least 16 bytes; it signs every event)")
                }
                sections.append(("webhook", .object(members)))
            } else {
                if webhookSecret != nil { throw ConsoleError.field("webhook_url", "is required with a webhook secret") }
                sections.append(("webhook", nil))
            }
            if current.webhook?.origin == .feedbackOptions {
                // The feedback plugin's webhook options go: the webhook is set in one place.
                let index = sections.firstIndex { $0.0 == "plugins" }
                let plugins =
                    index.flatMap { sections[$0].1 }
                    ?? .array(current.plugins.map { .object([("name", .string($0.name)), ("options", $0.options)]) })
                let stripped = Self.withoutWebhookOptions(plugins)
                if let index { sections[index].1 = stripped } else { sections.append(("plugins", stripped)) }
            }
        }
        return sections
    }

    /// A webhook's delivery settings that differ from the defaults, in the tenant file's terms.
    static func deliverySettings(of webhook: TenantWebhook) -> [(String, JSONValue)] {
        let defaults = TenantWebhook(url: webhook.url, secret: webhook.secret, secretReference: webhook.secretReference)
        var members: [(String, JSONValue)] = []
        if webhook.attempts != defaults.attempts { members.append(("attempts", .int(Int64(webhook.attempts)))) }
        if webhook.timeout != defaults.timeout { members.append(("timeout_ms", .int(webhook.timeoutMilliseconds))) }
        if webhook.initialBackoff != defaults.initialBackoff { members.append(("backoff_ms", .int(webhook.backoffMilliseconds))) }
        if webhook.allowPrivateAddresses { members.append(("allow_private_addresses", .bool(true))) }
        return members
    }

    /// A `plugins` section with the `feedback` plugin's webhook options taken out.
    static func withoutWebhookOptions(_ plugins: JSONValue) -> JSONValue {
        guard case .array(let entries) = plugins else { return plugins }
        return .array(
            entries.map { entry in
                guard case .object(let members) = entry, members.contains(where: { $0.0 == "name" && $0.1 == .string("feedback") })
                else { return entry }
                return .object(
                    members.map { member in
                        guard member.0 == "options", case .object(let options) = member.1 else { return member }
                        return ("options", .object(options.filter { !TenantWebhook.feedbackOptionKeys.contains($0.0) }))
                    })
            })
    }

    /// A whole-number field (at most 9 digits: the tenant file's own limits are checked later).
    static func wholeNumber(_ form: ConsoleForm, _ name: String) throws(ConsoleError) -> Int? {
        guard let text = try form.text(name) else { return nil }
        guard text.utf8.count <= 9, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let value = Int(text) else {
            throw ConsoleError.field(name, "must be a whole number")
        }
        return value
    }

    /// `POST /console/tenants/{id}/api-keys`: a new key, shown once.
    func createKey(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let key = APIKeys.generate()
        let name: String
        do throws(ConsoleError) {
            name = try form.required("name")
            try await lifecycle.addAPIKey(tenant: tenant.id, name: name, sha256Hex: APIKeys.sha256Hex(of: key))
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        logger.notice("API key added through the console", metadata: ["herald.tenant": "\(tenant.id)", "herald.key-name": "\(name)"])
        return try await tenantPage(session, id: id, newKey: TenantPage.NewKey(name: name, key: key))
    }

    /// `POST /console/tenants/{id}/api-keys/delete`: the key stops working at the swap.
    func revokeKey(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let name: String
        do throws(ConsoleError) {
            name = try form.required("name")
            try await lifecycle.removeAPIKey(tenant: tenant.id, name: name)
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        logger.notice("API key revoked through the console", metadata: ["herald.tenant": "\(tenant.id)", "herald.key-name": "\(name)"])
        return try await tenantPage(session, id: id, notice: "The API key \(name) was revoked.")
    }

    /// `POST /console/tenants/{id}/delete`, confirmed by typing the tenant's ID.
    func delete(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        do throws(ConsoleError) {
            guard try form.text("confirm") == tenant.id.rawValue else {
                throw ConsoleError.field("confirm", "must be the tenant's ID, \(tenant.id), to delete it")
            }
            try await lifecycle.delete(tenant: tenant.id)
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        logger.notice("tenant deleted through the console", metadata: ["herald.tenant": "\(tenant.id)"])
        return await tenantsPage(session, notice: "Tenant \(tenant.id) was deleted; its files were archived.")
    }
}

/// The admin API's own reading of what the lifecycle service takes as given (the credential's PEM
/// kinds, ``AdminLifecycleHandlers``), so a form is refused exactly where the same request to the
/// API would be, named by the form's field. Key names and topics are the lifecycle's own rules
/// (``TenantLifecycleRules``).
enum ConsoleAdminRules {
    /// The onboarding form's credential, as the API's `credential` object, read by the API's own
    /// ``AdminLifecycleHandlers/credential(_:)``.
    static func credential(_ form: ConsoleForm) throws(ConsoleError) -> NewTenantCredential {
        let kind = try form.text("kind") ?? "token"
        var object: [String: Any] = ["kind": kind]
        func pem(_ field: String, _ what: String) throws(ConsoleError) {
            guard let bytes = form.file(field) else { throw ConsoleError.field(field, "is required: choose the \(what)") }
            guard let text = String(validating: bytes, as: UTF8.self) else { throw ConsoleError.field(field, "is not a PEM file") }
            object["pem"] = text
        }
        switch kind {
        case "token":
            try pem("key_file", ".p8 key")
            object["key_id"] = try form.required("key_id")
        case "certificate":
            try pem("certificate_file", "PEM file")
        case "pkcs12":
            guard let bundle = form.file("pkcs12_file") else { throw ConsoleError.field("pkcs12_file", "is required: choose the .p12 file") }
            object["pkcs12_base64"] = Data(bundle).base64EncodedString()
            object["passphrase"] = try form.text("passphrase") ?? ""
        default:
            throw ConsoleError.field("kind", "must be token, certificate or pkcs12")
        }
        let fields = [
            "credential.pem": kind == "token" ? "key_file" : "certificate_file", "credential.key_id": "key_id",
            "credential.pkcs12_base64": "pkcs12_file", "credential.passphrase": "passphrase", "credential.kind": "kind",
        ]
        do throws(APIError) {
            let bytes: [UInt8]
            do {
                bytes = Array(try JSONSerialization.data(withJSONObject: object))
            } catch {
                throw APIError.invalidField("credential", "could not be encoded")
            }
            let root: JSONNode
            do {
                root = try StrictJSONParser.parse(bytes)
            } catch {
                throw APIError.malformedJSON(error)
            }
            return try AdminLifecycleHandlers.credential(
                JSONObjectReader(root, path: "credential", allowed: AdminLifecycleHandlers.credentialMembers))
        } catch {
            let field = error.field.map { fields[$0] ?? $0 }
            throw ConsoleError(
                status: .unprocessableContent, message: field.map { "\($0) \(error.message)" } ?? error.message, field: field)
        }
    }
}
