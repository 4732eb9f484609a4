import Foundation
import HeraldCore
import Yams

/// Reads one tenant file into a `TenantConfiguration`, collecting every error on the way.
///
/// The keys each section allows are listed here, once; unknown keys are errors.
struct TenantFileParser {
    enum Keys {
        static let root = ["id", "team_id", "auth", "topics", "endpoints", "pool", "plugins", "api_keys", "delivery", "webhook", "proxy"]
        static let auth = ["token", "certificate"]
        static let token = ["key_id", "key_file", "key", "environment", "topics"]
        static let certificate = ["cert_file", "key_file", "key", "pkcs12_file", "passphrase"]
        static let endpoints = ["production", "development", "default", "ca_file", "channels_production", "channels_development"]
        static let pool = ["connections", "max_queued", "request_timeout", "idle_timeout", "ping_interval", "open_next_at", "max_streams"]
        static let plugin = ["name", "options"]
        static let apiKey = ["name", "sha256"]
        static let delivery = [
            "guarantee", "max_retry_duration", "initial_backoff", "max_backoff", "jitter", "circuit_failure_threshold",
            "circuit_probe_interval", "circuit_max_probe_interval",
        ]
        static let webhook = ["url", "secret", "attempts", "timeout_ms", "backoff_ms", "allow_private_addresses"]
    }

    /// The tenant file's path, as shown in errors and used to resolve relative paths.
    let file: String
    let baseDirectory: String
    let reader: SourceReader
    let diagnostics: YAMLDiagnostics

    init(file: String, environment: [String: String]) {
        self.file = file
        self.baseDirectory = SourceReader.directory(of: file)
        self.reader = SourceReader(environment: environment)
        self.diagnostics = YAMLDiagnostics(file: file)
    }

    /// The outcome for one file: the configuration, or the errors.
    struct Outcome {
        var tenant: TenantConfiguration?
        /// The tenant ID, when the file gave a valid one (also for failed files, for duplicate checks).
        var tenantID: TenantID?
        /// Where the ID came from: the `id` value, or nil when it came from the file name.
        var idLocation: SourceLocation?
        var errors: [ConfigError]
        var locations: [String: SourceLocation]
        /// Problems that do not stop the file from loading.
        var warnings: [ConfigError] = []
    }

    func parse(yaml: String) -> Outcome {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml, Node.composeResolver, .default, .utf8)
        } catch {
            diagnostics.syntaxError(error)
            return outcome(nil, id: fileNameID(), idLocation: nil)
        }
        guard let root, !root.isNull else {
            diagnostics.error(
                at: SourceLocation(file: file, line: 1, column: 1), "",
                "the file is empty; a tenant needs at least team_id, auth and topics")
            return outcome(nil, id: fileNameID(), idLocation: nil)
        }
        guard let mapping = CheckedMapping(root, path: .root, allowedKeys: Keys.root, diagnostics: diagnostics) else {
            return outcome(nil, id: fileNameID(), idLocation: nil)
        }

        let (id, idLocation) = parseID(mapping)
        let teamID = mapping.require("team_id").flatMap {
            appleIdentifier($0, FieldPath(text: "team_id"), what: "team ID")
        }
        let auth = mapping.require("auth", hint: " (token: or certificate:)").flatMap(parseAuth)
        let topics = mapping.require("topics").flatMap(parseTopics)
        let endpoints = mapping["endpoints"].map(parseEndpoints) ?? defaultEndpoints()
        let pool = mapping["pool"].map(parsePool) ?? PoolConfiguration()
        let plugins = mapping["plugins"].map(parsePlugins) ?? []
        let apiKeys = mapping["api_keys"].map(parseAPIKeys) ?? []
        let delivery = mapping["delivery"].map(parseDelivery) ?? DeliveryPolicy()
        let webhook = webhook(mapping)
        let proxy = mapping["proxy"].map {
            ProxyParsing.parse(
                $0, path: FieldPath(text: "proxy"), allowNone: true, reader: reader, baseDirectory: baseDirectory,
                diagnostics: diagnostics)
        }

        guard !diagnostics.hasErrors, let id, let teamID, let auth, let topics, let endpoints, let pool,
            let plugins, let apiKeys, let delivery, let webhook
        else {
            return outcome(nil, id: id, idLocation: idLocation)
        }
        let tenant = TenantConfiguration(
            id: id, teamID: teamID, auth: auth, topics: topics, endpoints: endpoints, pool: pool,
            plugins: plugins, apiKeys: apiKeys, delivery: delivery, webhook: webhook.webhook, proxy: proxy ?? nil,
            sourceFile: file)
        return outcome(tenant, id: id, idLocation: idLocation)
    }

    /// The tenant's webhook: the `webhook:` section, or else the `feedback` plugin's deprecated
    /// webhook options; nil when it is set in both places or does not parse (reported).
    private func webhook(_ mapping: CheckedMapping) -> WebhookOutcome? {
        let section = mapping["webhook"].map(parseWebhook) ?? .absent
        let options = mapping["plugins"].map(parseFeedbackWebhook) ?? .absent
        switch (section, options) {
        case (.invalid, _), (_, .invalid):
            return nil
        case (.valid, .valid):
            let option = diagnostics.locations.first { $0.key.hasPrefix("plugins[") && $0.key.hasSuffix(".options.webhook") }
            let place = option.map { "\($0.key) (line \($0.value.line))" } ?? "the feedback plugin's options"
            diagnostics.error(
                at: mapping.keyNode("webhook"), "webhook",
                "the webhook is set both here and in \(place); set the webhook in one place: keep this section and "
                    + "remove webhook, secret and webhook_* from the feedback plugin's options")
            return nil
        case (.valid, .absent):
            return section
        case (.absent, _):
            return options
        }
    }

    private func outcome(_ tenant: TenantConfiguration?, id: TenantID?, idLocation: SourceLocation?) -> Outcome {
        Outcome(
            tenant: tenant, tenantID: id, idLocation: idLocation, errors: diagnostics.sortedErrors,
            locations: diagnostics.locations, warnings: diagnostics.warnings)
    }

    // MARK: id, team_id, topics

    /// The tenant ID: the `id` key, or else the file name without its extension.
    private func parseID(_ mapping: CheckedMapping) -> (TenantID?, SourceLocation?) {
        if let node = mapping["id"] {
            guard let text = diagnostics.string(node, FieldPath(text: "id")) else { return (nil, nil) }
            do {
                return (try TenantID(text), diagnostics.location(node))
            } catch {
                diagnostics.error(at: node, "id", "'\(text)' is not a valid tenant id: \(Self.tenantIDRule)")
                return (nil, nil)
            }
        }
        let name = Self.fileStem(file)
        do {
            return (try TenantID(name), nil)
        } catch {
            diagnostics.error(
                at: mapping.node, "id",
                "is not set and the file name '\(name)' is not a valid tenant id (\(Self.tenantIDRule)); add an id: key or rename the file"
            )
            return (nil, nil)
        }
    }

    static let tenantIDRule = "lowercase letters, digits and hyphens, starting with a letter or digit, at most 64"

    private func fileNameID() -> TenantID? { try? TenantID(Self.fileStem(file)) }

    /// `tenants/acme.yaml` → `acme`.
    static func fileStem(_ file: String) -> String {
        var name = file.split(separator: "/").last.map(String.init) ?? file
        for ext in [".yaml", ".yml"] where name.hasSuffix(ext) {
            name.removeLast(ext.count)
            break
        }
        return name
    }

    /// A 10-character Apple identifier (team ID, key ID): A-Z and 0-9.
    func appleIdentifier(_ node: Node, _ path: FieldPath, what: String) -> String? {
        guard let text = diagnostics.string(node, path) else { return nil }
        let valid =
            text.utf8.count == 10
            && text.utf8.allSatisfy {
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
            }
        guard valid else {
            var message = "must be exactly 10 characters (A-Z, 0-9)"
            if text.utf8.count != 10 {
                message += "; this \(what) has \(text.count)"
            } else if text.uppercased() != text {
                message += "; use uppercase letters"
            }
            diagnostics.error(at: node, path.text, message)
            return nil
        }
        return text
    }

    private func parseTopics(_ node: Node) -> [String]? {
        let path = FieldPath(text: "topics")
        guard let items = diagnostics.sequence(node, path, of: "topics (bundle IDs)") else { return nil }
        guard !items.isEmpty else {
            diagnostics.error(at: node, path.text, "must list at least one topic (the app's bundle ID)")
            return nil
        }
        var topics: [String] = []
        var firstIndex: [String: Int] = [:]
        var ok = true
        for (i, item) in items.enumerated() {
            guard let topic = diagnostics.string(item, path.index(i)) else {
                ok = false
                continue
            }
            do {
                try HeraldCore.Notification.validateTopic(topic)
            } catch {
                diagnostics.error(at: item, path.index(i).text, "'\(topic)' is not a valid topic: \(error.message)")
                ok = false
                continue
            }
            if let earlier = firstIndex[topic] {
                diagnostics.error(
                    at: item, path.index(i).text, "duplicate topic '\(topic)' (already topics[\(earlier)])")
                ok = false
                continue
            }
            firstIndex[topic] = i
            topics.append(topic)
        }
        return ok ? topics : nil
    }
}
