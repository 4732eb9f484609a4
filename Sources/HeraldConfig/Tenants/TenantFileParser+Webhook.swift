import HeraldCore
import Yams

extension TenantFileParser {
    // MARK: webhook

    /// The names a webhook's settings go by: the `webhook:` section's keys, or the `feedback`
    /// plugin's deprecated options that set the tenant's webhook too.
    struct WebhookKeys {
        var url: String
        var secret: String
        var attempts: String
        var timeout: String
        var backoff: String
        var allowPrivateAddresses: String

        var all: [String] { [url, secret, attempts, timeout, backoff, allowPrivateAddresses] }

        static let section = WebhookKeys(
            url: "url", secret: "secret", attempts: "attempts", timeout: "timeout_ms", backoff: "backoff_ms",
            allowPrivateAddresses: "allow_private_addresses")
        static let feedbackOptions = WebhookKeys(
            url: "webhook", secret: "secret", attempts: "webhook_attempts", timeout: "webhook_timeout_ms",
            backoff: "webhook_backoff_ms", allowPrivateAddresses: "webhook_allow_private_addresses")
    }

    /// A parsed webhook, or the reason there is none.
    enum WebhookOutcome {
        /// Not set.
        case absent
        /// Set, but with errors (reported).
        case invalid
        case valid(TenantWebhook)

        var webhook: TenantWebhook? {
            if case .valid(let webhook) = self { return webhook }
            return nil
        }
    }

    /// `webhook:` — where Herald tells the tenant about events (``TenantWebhook``): `url` and
    /// `secret` required, the delivery settings optional.
    func parseWebhook(_ node: Node) -> WebhookOutcome {
        let path = FieldPath(text: "webhook")
        guard let section = CheckedMapping(node, path: path, allowedKeys: Keys.webhook, diagnostics: diagnostics) else {
            return .invalid
        }
        let urlNode = section.require("url", hint: " (the http:// or https:// URL Herald POSTs the tenant's events to)")
        let secretNode = section.require("secret", hint: " (env:NAME or file:PATH: the key that signs every event)")
        return readWebhook(
            url: urlNode, secret: secretNode, value: { section[$0] }, keys: .section, path: path, origin: .section,
            complete: urlNode != nil && secretNode != nil)
    }

    /// The tenant's webhook as the `feedback` plugin's options set it (`webhook`, `secret`,
    /// `webhook_*`), read with the section's rules and a deprecation warning at the `webhook`
    /// option. `.absent` when no `feedback` entry sets one.
    func parseFeedbackWebhook(_ pluginsNode: Node) -> WebhookOutcome {
        guard case .sequence(let items) = pluginsNode else { return .absent }
        for (index, item) in items.enumerated() {
            guard case .mapping(let entry) = item, entry["name"]?.string == "feedback",
                let optionsNode = entry["options"], case .mapping(let options) = optionsNode
            else { continue }
            let path = FieldPath(text: "plugins").index(index).appending("options")
            func value(_ key: String) -> Node? {
                guard let node = options[key], !node.isNull else { return nil }
                return node
            }
            let keys = WebhookKeys.feedbackOptions
            guard let urlNode = value(keys.url) else {
                for key in keys.all.dropFirst() where value(key) != nil {
                    diagnostics.error(
                        at: Self.key(key, in: options), path.appending(key).text,
                        "only means something with 'webhook'; set the tenant's webhook in the webhook: section instead")
                }
                return keys.all.dropFirst().contains { value($0) != nil } ? .invalid : .absent
            }
            diagnostics.warning(
                at: Self.key(keys.url, in: options), path.appending(keys.url).text,
                "the feedback plugin's webhook options are deprecated: move webhook, secret and webhook_* to the "
                    + "top-level webhook: section (url, secret, attempts, timeout_ms, backoff_ms, allow_private_addresses)"
            )
            let secretNode = value(keys.secret)
            if secretNode == nil {
                diagnostics.error(
                    at: optionsNode, path.appending(keys.secret).text,
                    "is required with 'webhook' (env:NAME or file:PATH), to sign the webhook")
            }
            return readWebhook(
                url: urlNode, secret: secretNode, value: value, keys: keys, path: path, origin: .feedbackOptions,
                complete: secretNode != nil)
        }
        return .absent
    }

    /// The key node of `name` in a mapping (errors about a key point at it), or nil.
    static func key(_ name: String, in mapping: Node.Mapping) -> Node? {
        mapping.first { $0.key.string == name }?.key
    }

    /// Reads and checks a webhook's settings; `complete` is false when a required one is missing
    /// (reported already): the others are still checked, so one pass reports every problem.
    private func readWebhook(
        url urlNode: Node?, secret secretNode: Node?, value: (String) -> Node?, keys: WebhookKeys, path: FieldPath,
        origin: TenantWebhook.Origin, complete: Bool
    ) -> WebhookOutcome {
        var ok = complete

        var url: String?
        if let urlNode {
            let field = path.appending(keys.url)
            if let text = diagnostics.string(urlNode, field) {
                if TenantWebhook.isValidURL(text) {
                    url = text
                } else {
                    diagnostics.error(at: urlNode, field.text, "must be an http:// or https:// URL with a host")
                    ok = false
                }
            } else {
                ok = false
            }
        }

        var secret: (Secret, String)?
        if let secretNode {
            let field = path.appending(keys.secret)
            if let text = diagnostics.string(secretNode, field),
                let reference = reference(text, plainIsPath: false, at: secretNode, field),
                let loaded = loadSecret(reference, at: secretNode, field, trimNewline: false)
            {
                // Every trailing line break goes (a file written by `echo` or an editor).
                var bytes = loaded.bytes
                while let last = bytes.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") {
                    bytes.removeLast()
                }
                if bytes.count < TenantWebhook.minimumSecretBytes {
                    diagnostics.error(
                        at: secretNode, field.text,
                        "the secret from \(loaded.origin) is shorter than \(TenantWebhook.minimumSecretBytes) bytes")
                    ok = false
                } else {
                    secret = (Secret(bytes: bytes, origin: loaded.origin), reference.description)
                }
            } else {
                ok = false
            }
        }

        func integer(_ key: String, _ range: ClosedRange<Int>) -> Int? {
            guard let node = value(key) else { return nil }
            guard let number = diagnostics.integer(node, path.appending(key), in: range) else {
                ok = false
                return nil
            }
            return number
        }
        let attempts = integer(keys.attempts, TenantWebhook.attemptsRange)
        let timeout = integer(keys.timeout, TenantWebhook.timeoutMillisecondsRange)
        let backoff = integer(keys.backoff, TenantWebhook.backoffMillisecondsRange)
        var allowPrivateAddresses: Bool?
        if let node = value(keys.allowPrivateAddresses) {
            if case .scalar = node, node.tagName == .bool, let flag = node.bool {
                allowPrivateAddresses = flag
                diagnostics.record(path.appending(keys.allowPrivateAddresses).text, node)
            } else {
                diagnostics.error(
                    at: node, path.appending(keys.allowPrivateAddresses).text,
                    "must be true or false, not \(node.kindForMessages)")
                ok = false
            }
        }

        guard ok, let url, let secret else { return .invalid }
        var webhook = TenantWebhook(url: url, secret: secret.0, secretReference: secret.1)
        if let attempts { webhook.attempts = attempts }
        if let timeout { webhook.timeout = .milliseconds(timeout) }
        if let backoff { webhook.initialBackoff = .milliseconds(backoff) }
        if let allowPrivateAddresses { webhook.allowPrivateAddresses = allowPrivateAddresses }
        webhook.origin = origin
        return .valid(webhook)
    }
}
