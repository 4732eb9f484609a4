import ArgumentParser
import AsyncHTTPClient
import Foundation
import HeraldConfig
import NIOCore
import NIOHTTP1

// `herald tenants create|show|update|delete|add-key|remove-key`: the tenant lifecycle through a
// running `herald serve`'s admin API (the same code path as the console and any other client).

/// Where the admin API is and the token it takes.
struct AdminAPIOptions: ParsableArguments {
    @Option(name: .long, help: "The server's base URL (default: the listen address of the server configuration).")
    var server: String?

    @Option(name: .customLong("config"), help: "The server configuration file, for its listen address and admin token variable.")
    var configFile: String?

    /// The base URL and the admin token (from the variable `api.admin_token_env` names).
    func resolve() throws(TenantsUsageError) -> (base: String, token: String) {
        let settings: ServerConfiguration
        do {
            settings = try ServerConfiguration.load(file: configFile ?? ServerConfiguration.defaultFile, required: configFile != nil)
        } catch {
            throw TenantsUsageError(message: error.description)
        }
        let variable = settings.api.adminTokenVariable
        guard let token = ProcessInfo.processInfo.environment[variable], !token.isEmpty else {
            throw TenantsUsageError(message: "set \(variable) to the server's admin token")
        }
        let host = settings.listen.host == "0.0.0.0" ? "127.0.0.1" : settings.listen.host
        var base = server ?? "http://\(host.contains(":") ? "[\(host)]" : host):\(settings.listen.port)"
        while base.hasSuffix("/") { base.removeLast() }
        return (base, token)
    }

    /// Calls the admin API; prints the answer's JSON (or error) and fails on a non-2xx answer.
    func call(_ method: HTTPMethod, _ path: String, body: [String: Any]? = nil, command: String) async throws {
        let (base, token) = try resolve()
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        }
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
            bytes = try await response.body.collect(upTo: 16 * 1024 * 1024)
        } catch {
            FileHandle.standardError.write(Data("herald \(command): \(base) cannot be reached: \(error)\n".utf8))
            throw ExitStatus.invalid
        }
        let text = String(buffer: bytes)
        if (200..<300).contains(Int(response.status.code)) {
            if !text.isEmpty { print(text, terminator: text.hasSuffix("\n") ? "" : "\n") }
            return
        }
        FileHandle.standardError.write(Data("herald \(command): \(response.status.code) \(text)".utf8))
        throw ExitStatus.rejected
    }
}

/// `herald tenants create`
struct TenantsCreateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Onboard a tenant with its credential through the admin API; prints its first API key (once).",
        discussion: """
            Exactly one credential: --key FILE with --key-id (token), --certificate FILE (the PEM chain followed by its \
            private key), or --pkcs12 FILE with --passphrase-env VARIABLE. A webhook: --webhook-url with its signing \
            secret, --webhook-secret env:NAME|file:PATH (a reference the server resolves) or --webhook-secret-env \
            VARIABLE (the secret itself, which the server writes to a 0600 file). The server validates everything \
            before it writes anything; a refusal names the field. Exit status: 0 created, 1 refused, 2 on usage errors.
            """)

    @OptionGroup var api: AdminAPIOptions
    @Option(name: .long, help: "The tenant ID (lowercase letters, digits, hyphens).") var id: String
    @Option(name: .customLong("team-id"), help: "The Apple Developer team ID.") var teamID: String
    @Option(name: .customLong("topic"), help: "A topic the tenant may push to (repeat for more).") var topics: [String] = []
    @Option(name: .long, help: "The .p8 token signing key file.") var key: String?
    @Option(name: .customLong("key-id"), help: "The token key's 10-character key ID.") var keyID: String?
    @Option(name: .long, help: "A PEM file: the client certificate chain, then its private key.") var certificate: String?
    @Option(name: .long, help: "A PKCS#12 bundle.") var pkcs12: String?
    @Option(name: .customLong("passphrase-env"), help: "The variable holding the PKCS#12 passphrase.") var passphraseVariable: String?
    @Option(name: .long, help: "The development endpoint URL.") var development: String?
    @Option(name: .long, help: "The production endpoint URL.") var production: String?
    @Option(name: .customLong("default-environment"), help: "production or development.") var defaultEnvironment: String?
    @Option(name: .customLong("ca-file"), help: "An extra trust root (PEM) for a non-Apple endpoint (a path on the server).")
    var caFile: String?
    @Option(name: .customLong("api-key-name"), help: "The first API key's name (default: default).") var apiKeyName: String?
    @OptionGroup var webhook: WebhookOptions
    @Option(
        name: .customLong("proxy"),
        help: "The tenant's outbound proxy: http://HOST:PORT, socks5://HOST:PORT, environment or none (default: the server's).")
    var proxy: String?

    func run() async throws {
        var body: [String: Any] = ["id": id, "team_id": teamID]
        if let webhook = try webhook.member(requireSecret: true) { body["webhook"] = webhook }
        if let proxy { body["proxy"] = proxy }
        if !topics.isEmpty { body["topics"] = topics }
        var endpoints: [String: Any] = [:]
        if let development { endpoints["development"] = development }
        if let production { endpoints["production"] = production }
        if let defaultEnvironment { endpoints["default"] = defaultEnvironment }
        if let caFile { endpoints["ca_file"] = caFile }
        if !endpoints.isEmpty { body["endpoints"] = endpoints }
        if let apiKeyName { body["api_key_name"] = apiKeyName }
        body["credential"] = try credential()
        try await api.call(.POST, "/admin/tenants", body: body, command: "tenants create")
    }

    private func credential() throws -> [String: Any] {
        let given = [key, certificate, pkcs12].compactMap { $0 }
        guard given.count == 1 else { throw ValidationError("give exactly one of --key, --certificate, --pkcs12") }
        if let key {
            guard let keyID else { throw ValidationError("--key needs --key-id") }
            return ["kind": "token", "key_id": keyID, "pem": try Self.text(key)]
        }
        if let certificate { return ["kind": "certificate", "pem": try Self.text(certificate)] }
        guard let pkcs12, let passphraseVariable else { throw ValidationError("--pkcs12 needs --passphrase-env") }
        guard let passphrase = ProcessInfo.processInfo.environment[passphraseVariable] else {
            throw ValidationError("\(passphraseVariable) is not set")
        }
        guard let bytes = FileManager.default.contents(atPath: pkcs12) else { throw ValidationError("\(pkcs12) cannot be read") }
        return ["kind": "pkcs12", "pkcs12_base64": bytes.base64EncodedString(), "passphrase": passphrase]
    }

    static func text(_ path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw ValidationError("\(path) cannot be read as text")
        }
        return text
    }
}

/// `herald tenants show ID`
struct TenantsShowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Show a running tenant with its health (JSON) through the admin API.")
    @OptionGroup var api: AdminAPIOptions
    @Argument(help: "The tenant ID.") var id: String

    func run() async throws {
        try await api.call(.GET, "/admin/tenants/\(TenantsPath.escape(id))", command: "tenants show")
    }
}

/// The webhook's flags of `herald tenants create` and `update`.
struct WebhookOptions: ParsableArguments {
    @Option(name: .customLong("webhook-url"), help: "The URL the tenant's events are POSTed to, signed.") var url: String?
    @Option(name: .customLong("webhook-secret"), help: "The webhook's signing secret as a reference: env:NAME or file:PATH (on the server).")
    var secretReference: String?
    @Option(
        name: .customLong("webhook-secret-env"),
        help: "The variable holding the webhook's signing secret (at least 16 bytes); the server writes it to a 0600 file.")
    var secretVariable: String?

    /// The `webhook` member these flags describe; nil when none is given. `requireSecret`: a new
    /// webhook needs its secret (an update keeps the current one).
    func member(requireSecret: Bool) throws -> [String: Any]? {
        guard url != nil || secretReference != nil || secretVariable != nil else { return nil }
        guard let url else { throw ValidationError("--webhook-secret and --webhook-secret-env need --webhook-url") }
        var member: [String: Any] = ["url": url]
        switch (secretReference, secretVariable) {
        case (let reference?, nil):
            member["secret"] = reference
        case (nil, let variable?):
            guard let value = ProcessInfo.processInfo.environment[variable], !value.isEmpty else {
                throw ValidationError("\(variable) is not set")
            }
            member["secret_value"] = value
        case (.some, .some):
            throw ValidationError("give --webhook-secret or --webhook-secret-env, not both")
        case (nil, nil):
            if requireSecret { throw ValidationError("--webhook-url needs --webhook-secret or --webhook-secret-env") }
        }
        return member
    }
}

/// `herald tenants update ID --topic … | --pool-connections N | --webhook-url URL | --settings FILE`
struct TenantsUpdateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Change a tenant's topics, endpoints, pool, plugins, webhook or proxy through the admin API (validated, then swapped).",
        discussion: """
            --webhook-url sets the webhook (its other settings back to their defaults); without --webhook-secret or \
            --webhook-secret-env it keeps the current secret. --remove-webhook takes the webhook out. --proxy sets the \
            tenant's outbound proxy (a proxy with credentials: --settings with its username and password reference); \
            --remove-proxy goes back to the server's.
            """)
    @OptionGroup var api: AdminAPIOptions
    @Argument(help: "The tenant ID.") var id: String
    @Option(name: .customLong("topic"), help: "The topics (repeat; replaces the list).") var topics: [String] = []
    @Option(name: .customLong("pool-connections"), help: "Connections per endpoint.") var connections: Int?
    @OptionGroup var webhook: WebhookOptions
    @Flag(name: .customLong("remove-webhook"), help: "Take the webhook out: the tenant is told about no event.") var removeWebhook = false
    @Option(
        name: .customLong("proxy"), help: "The tenant's outbound proxy: http://HOST:PORT, socks5://HOST:PORT, environment or none.")
    var proxy: String?
    @Flag(name: .customLong("remove-proxy"), help: "Take the tenant's proxy out: the server's applies.") var removeProxy = false
    @Option(
        name: .customLong("settings"),
        help: "A JSON file with any of topics, endpoints, pool, plugins, webhook, as PATCH /admin/tenants/{id} takes (at most 64 KiB).")
    var settings: String?

    func run() async throws {
        var body: [String: Any] = [:]
        if let settings {
            guard let data = FileManager.default.contents(atPath: settings) else { throw ValidationError("\(settings) cannot be read") }
            guard data.count <= 64 * 1024 else { throw ValidationError("\(settings) is larger than 64 KiB") }
            guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
                throw ValidationError("\(settings) is not a JSON object")
            }
            body = object
        }
        if !topics.isEmpty { body["topics"] = topics }
        if let connections {
            var pool = body["pool"] as? [String: Any] ?? [:]
            pool["connections"] = connections
            body["pool"] = pool
        }
        if let webhook = try webhook.member(requireSecret: false) {
            guard !removeWebhook else { throw ValidationError("give --webhook-url or --remove-webhook, not both") }
            body["webhook"] = webhook
        } else if removeWebhook {
            body["webhook"] = NSNull()
        }
        if let proxy {
            guard !removeProxy else { throw ValidationError("give --proxy or --remove-proxy, not both") }
            body["proxy"] = proxy
        } else if removeProxy {
            body["proxy"] = NSNull()
        }
        guard !body.isEmpty else {
            throw ValidationError("give --topic, --pool-connections, --webhook-url, --remove-webhook, --proxy, --remove-proxy or --settings")
        }
        try await api.call(.PATCH, "/admin/tenants/\(TenantsPath.escape(id))", body: body, command: "tenants update")
    }
}

/// `herald tenants delete ID`
struct TenantsDeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Take a tenant out through the admin API; its files move to the archive.")
    @OptionGroup var api: AdminAPIOptions
    @Argument(help: "The tenant ID.") var id: String

    func run() async throws {
        try await api.call(.DELETE, "/admin/tenants/\(TenantsPath.escape(id))", command: "tenants delete")
    }
}

/// `herald tenants add-key ID NAME`
struct TenantsAddKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-key", abstract: "A new API key for a tenant through the admin API (printed once).")
    @OptionGroup var api: AdminAPIOptions
    @Argument(help: "The tenant ID.") var id: String
    @Argument(help: "The key's name.") var name: String

    func run() async throws {
        try await api.call(.POST, "/admin/tenants/\(TenantsPath.escape(id))/api-keys", body: ["name": name], command: "tenants add-key")
    }
}

/// `herald tenants remove-key ID NAME`
struct TenantsRemoveKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove-key", abstract: "Revoke one of a tenant's API keys through the admin API.")
    @OptionGroup var api: AdminAPIOptions
    @Argument(help: "The tenant ID.") var id: String
    @Argument(help: "The key's name.") var name: String

    func run() async throws {
        try await api.call(
            .DELETE, "/admin/tenants/\(TenantsPath.escape(id))/api-keys/\(TenantsPath.escape(name))", command: "tenants remove-key")
    }
}

enum TenantsPath {
    static func escape(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._"))) ?? segment
    }
}
