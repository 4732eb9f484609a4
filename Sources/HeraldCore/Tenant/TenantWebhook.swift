import Foundation

/// Where Herald tells a tenant about events: a URL that receives signed JSON POSTs.
///
/// Every event about the tenant goes here: `device_token.invalid` (the `feedback` plugin),
/// `credential.expiring` (the credential health monitor), `job.finished` and `job.cancelled`
/// (batch jobs). Each POST is signed with HMAC-SHA256 under ``secret`` and retried with backoff
/// on failures and 5xx/429 answers. A tenant file sets it in its `webhook:` section:
///
/// ```yaml
/// webhook:
///   url: https://hooks.acme.example/herald
///   secret: env:ACME_WEBHOOK_SECRET     # or file:secrets/webhook.key (relative to the tenant file)
///   attempts: 5
///   timeout_ms: 5000
///   backoff_ms: 500
///   allow_private_addresses: false
/// ```
public struct TenantWebhook: Sendable, Hashable {
    /// Where the tenant file set it.
    public enum Origin: String, Sendable, Hashable {
        /// The top-level `webhook:` section.
        case section = "webhook"
        /// The `feedback` plugin's `webhook`, `secret` and `webhook_*` options (deprecated).
        case feedbackOptions = "plugins[feedback].options"
    }

    /// The `feedback` plugin's options that set the tenant's webhook when its file has no
    /// `webhook:` section (deprecated): `webhook` is the URL, the others are the section's keys
    /// with a `webhook_` prefix (`secret` as it is).
    public static let feedbackOptionKeys = [
        "webhook", "secret", "webhook_attempts", "webhook_timeout_ms", "webhook_backoff_ms",
        "webhook_allow_private_addresses",
    ]

    /// Attempts per event, the first included.
    public static let attemptsRange = 1...20
    /// How long one attempt may take, in milliseconds.
    public static let timeoutMillisecondsRange = 100...120_000
    /// The wait before the second attempt, in milliseconds (each later wait doubles, up to 60 s).
    public static let backoffMillisecondsRange = 1...60_000
    /// The shortest signing secret accepted, in bytes.
    public static let minimumSecretBytes = 16

    /// An `http://` or `https://` URL with a host.
    public var url: String
    /// The key that signs every POST (HMAC-SHA256). Prints only where it came from.
    public var secret: Secret
    /// The secret's reference as the tenant file writes it (`env:NAME` or `file:PATH`): never the
    /// secret itself.
    public var secretReference: String
    public var attempts: Int = 5
    public var timeout: Duration = .seconds(5)
    public var initialBackoff: Duration = .milliseconds(500)
    /// The URL may reach loopback, link-local and private addresses.
    public var allowPrivateAddresses = false
    public var origin: Origin = .section

    public init(url: String, secret: Secret, secretReference: String) {
        self.url = url
        self.secret = secret
        self.secretReference = secretReference
    }

    /// ``timeout`` in milliseconds, as `webhook.timeout_ms` writes it.
    public var timeoutMilliseconds: Int64 { Self.milliseconds(timeout) }
    /// ``initialBackoff`` in milliseconds, as `webhook.backoff_ms` writes it.
    public var backoffMilliseconds: Int64 { Self.milliseconds(initialBackoff) }

    private static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }

    /// True for an `http://` or `https://` URL with a host: the rule `webhook.url` follows.
    public static func isValidURL(_ text: String) -> Bool {
        guard let parsed = URL(string: text), let scheme = parsed.scheme?.lowercased(),
            scheme == "https" || scheme == "http",
            let host = parsed.host, !host.isEmpty
        else { return false }
        return true
    }
}
