import Foundation
import HeraldConfig
import HeraldCore
import Testing

/// The tenant's webhook: the `webhook:` section, and the `feedback` plugin's deprecated options
/// that set it too (still read, with a deprecation warning).
@Suite("The webhook: section of tenant files")
struct WebhookSectionTests {
    static let secret = "webhook-secret-of-32-bytes-at-least"
    static let environment = ["ACME_HOOK": secret, "SHORT_HOOK": "too-short"]

    /// The token tenant (lines 1-7) followed by `body` from line 8.
    static func file(_ fixture: TenantFixture, _ body: String) throws -> String {
        try fixture.write("acme.yaml", TenantFixture.tokenTenant + body)
    }

    @Test func everyKeyIsReadAndTheSecretNeverPrints() throws {
        let fixture = try TenantFixture()
        try FileManager.default.createDirectory(atPath: fixture.path("secrets"), withIntermediateDirectories: true)
        try fixture.write("secrets/hook", Self.secret + "\n\n")
        let tenant = try TenantLoader(environment: [:]).parseTenant(
            yaml: TenantFixture.tokenTenant + """
                webhook:
                  url: https://hooks.acme.example/herald
                  secret: file:secrets/hook
                  attempts: 8
                  timeout_ms: 10000
                  backoff_ms: 1000
                  allow_private_addresses: true

                """, file: fixture.path("acme.yaml"))
        let webhook = try #require(tenant.webhook)
        #expect(webhook.url == "https://hooks.acme.example/herald")
        // Relative to the tenant file; every trailing line break dropped.
        #expect(webhook.secret.bytes == Array(Self.secret.utf8))
        #expect(webhook.secret.origin == "file " + fixture.path("secrets/hook"))
        #expect(webhook.secretReference == "file:secrets/hook")
        #expect(webhook.attempts == 8)
        #expect(webhook.timeout == .milliseconds(10_000))
        #expect(webhook.initialBackoff == .milliseconds(1_000))
        #expect(webhook.allowPrivateAddresses)
        #expect(webhook.origin == .section)
        #expect(!"\(tenant)".contains(Self.secret))
        #expect(!"\(webhook)".contains(Self.secret))
    }

    @Test func theDefaultsAreTheFeedbackPluginsAndNoSectionMeansNoWebhook() throws {
        let fixture = try TenantFixture()
        let loader = TenantLoader(environment: Self.environment)
        #expect(try loader.parseTenant(yaml: TenantFixture.tokenTenant, file: fixture.path("acme.yaml")).webhook == nil)
        let webhook = try #require(
            try loader.parseTenant(
                yaml: TenantFixture.tokenTenant
                    + "webhook: {url: 'http://hooks.acme.example', secret: 'env:ACME_HOOK'}\n",
                file: fixture.path("acme.yaml")
            ).webhook)
        #expect(webhook.attempts == 5)
        #expect(webhook.timeout == .seconds(5))
        #expect(webhook.initialBackoff == .milliseconds(500))
        #expect(!webhook.allowPrivateAddresses)
        #expect(webhook.secret.origin == "env ACME_HOOK")
    }

    @Test(arguments: [
        ("webhook:\n  secret: env:ACME_HOOK\n", 9, "webhook.url", "is required"),
        ("webhook:\n  url: https://hooks.acme.example\n", 9, "webhook.secret", "is required"),
        ("webhook: https://hooks.acme.example\n", 8, "webhook", "must be a mapping"),
        (
            "webhook:\n  url: ftp://hooks.acme.example\n  secret: env:ACME_HOOK\n", 9, "webhook.url",
            "must be an http:// or https:// URL"
        ),
        (
            "webhook:\n  url: https://\n  secret: env:ACME_HOOK\n", 9, "webhook.url",
            "must be an http:// or https:// URL"
        ),
        ("webhook:\n  url: [a]\n  secret: env:ACME_HOOK\n", 9, "webhook.url", "must be a string"),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: a-literal-secret-value\n", 10, "webhook.secret",
            "must be a reference, env:NAME or file:PATH"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:MISSING_HOOK\n", 10, "webhook.secret",
            "environment variable MISSING_HOOK is not set"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: file:secrets/none\n", 10, "webhook.secret",
            "file not found"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:SHORT_HOOK\n", 10, "webhook.secret",
            "the secret from env SHORT_HOOK is shorter than 16 bytes"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  attempts: 0\n", 11,
            "webhook.attempts",
            "must be from 1 to 20, not 0"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  attempts: 21\n", 11,
            "webhook.attempts",
            "must be from 1 to 20, not 21"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  timeout_ms: 99\n", 11,
            "webhook.timeout_ms",
            "must be from 100 to 120000, not 99"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  timeout_ms: 5s\n", 11,
            "webhook.timeout_ms",
            "must be a whole number from 100 to 120000"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  backoff_ms: 60001\n", 11,
            "webhook.backoff_ms",
            "must be from 1 to 60000, not 60001"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  allow_private_addresses: yes please\n",
            11,
            "webhook.allow_private_addresses", "must be true or false"
        ),
        (
            "webhook:\n  url: https://hooks.acme.example\n  secret: env:ACME_HOOK\n  retries: 3\n", 11,
            "webhook.retries",
            "unknown key; valid keys: url, secret, attempts, timeout_ms, backoff_ms, allow_private_addresses"
        ),
    ])
    func badValuesNameTheLineAndField(_ body: String, _ line: Int, _ field: String, _ fragment: String) throws {
        let fixture = try TenantFixture()
        let file = try Self.file(fixture, body)
        let failure = try #require(TenantLoader(environment: Self.environment).failure(of: file), "accepted: \(body)")
        let error = try #require(
            failure.errors.first { $0.field == field && $0.message.contains(fragment) },
            "no error for \(field) with '\(fragment)': \(failure.errors)")
        #expect(error.location.file == file)
        #expect(error.location.line == line, "\(error)")
        #expect(!failure.description.contains(Self.secret))
        #expect(
            !failure.description.contains("a-literal-secret-value"), "a value that may be the secret is never repeated")
    }

    // MARK: The feedback plugin's options (deprecated)

    static let legacy = """
        plugins:
          - metrics
          - name: feedback
            options:
              refuse: []
              webhook: https://hooks.acme.example/old
              secret: env:ACME_HOOK
              webhook_attempts: 3
              webhook_timeout_ms: 2000
              webhook_backoff_ms: 100
              webhook_allow_private_addresses: true

        """

    @Test func theFeedbackPluginsOptionsStillSetTheWebhookWithADeprecationWarning() throws {
        let fixture = try TenantFixture()
        let file = try Self.file(fixture, Self.legacy)
        // Its key file at 0600: the only warning left is the deprecation.
        try FileManager.default.setAttributes(
            [.posixPermissions: 0o600], ofItemAtPath: fixture.path("keys/AuthKey_ABC123DEFG.p8"))
        let load = TenantLoader(environment: Self.environment).loadFiles([file])
        #expect(load.failures.isEmpty, "\(load.failures)")
        let tenant = try #require(load.tenants.first)
        let webhook = try #require(tenant.webhook)
        #expect(webhook.url == "https://hooks.acme.example/old")
        #expect(webhook.secret.bytes == Array(Self.secret.utf8))
        #expect(webhook.secretReference == "env:ACME_HOOK")
        #expect(webhook.attempts == 3)
        #expect(webhook.timeout == .milliseconds(2_000))
        #expect(webhook.initialBackoff == .milliseconds(100))
        #expect(webhook.allowPrivateAddresses)
        #expect(webhook.origin == .feedbackOptions)
        // The plugin keeps its options as written.
        #expect(tenant.plugins.map(\.name) == ["metrics", "feedback"])

        #expect(load.warnings.count == 1, "\(load.warnings)")
        let warning = try #require(load.warnings.first)
        #expect(warning.location.file == file)
        #expect(warning.location.line == 13, "at the webhook option: \(warning)")
        #expect(warning.field == "plugins[1].options.webhook")
        #expect(warning.message.contains("deprecated"))
        #expect(warning.message.contains("webhook: section"))
        #expect(warning.description.hasPrefix("\(file):13:"))
    }

    @Test func theSectionAloneCarriesNoWarning() throws {
        let fixture = try TenantFixture()
        let file = try Self.file(fixture, "webhook: {url: 'https://hooks.acme.example', secret: 'env:ACME_HOOK'}\n")
        try FileManager.default.setAttributes(
            [.posixPermissions: 0o600], ofItemAtPath: fixture.path("keys/AuthKey_ABC123DEFG.p8"))
        let load = TenantLoader(environment: Self.environment).loadFiles([file])
        #expect(load.failures.isEmpty)
        #expect(load.warnings.isEmpty, "\(load.warnings)")
    }

    @Test func bothPlacesSetIsAnErrorNamingBoth() throws {
        let fixture = try TenantFixture()
        let file = try Self.file(
            fixture, Self.legacy + "webhook:\n  url: https://hooks.acme.example/new\n  secret: env:ACME_HOOK\n")
        let failure = try #require(TenantLoader(environment: Self.environment).failure(of: file))
        let error = try #require(failure.errors.first { $0.field == "webhook" }, "\(failure.errors)")
        #expect(error.location.line == 19, "at the section: \(error)")
        #expect(error.message.contains("plugins[1].options.webhook (line 13)"), "\(error)")
        #expect(error.message.contains("set the webhook in one place"))
    }

    @Test(arguments: [
        ("      secret: env:ACME_HOOK\n", 12, "plugins[0].options.secret", "only means something with 'webhook'"),
        ("      webhook: https://hooks.acme.example\n", 11, "plugins[0].options.secret", "is required with 'webhook'"),
        (
            "      webhook: https://hooks.acme.example\n      secret: hunter2hunter2hunter2\n", 13,
            "plugins[0].options.secret", "must be a reference"
        ),
        (
            "      webhook: mailto:someone\n      secret: env:ACME_HOOK\n", 12, "plugins[0].options.webhook",
            "must be an http:// or https:// URL"
        ),
        (
            "      webhook: https://hooks.acme.example\n      secret: env:ACME_HOOK\n      webhook_attempts: 50\n", 14,
            "plugins[0].options.webhook_attempts", "must be from 1 to 20, not 50"
        ),
    ])
    func badFeedbackOptionsNameTheLineAndField(_ options: String, _ line: Int, _ field: String, _ fragment: String)
        throws
    {
        let fixture = try TenantFixture()
        let file = try Self.file(fixture, "plugins:\n  - name: feedback\n    options:\n      refuse: []\n" + options)
        let failure = try #require(
            TenantLoader(environment: Self.environment).failure(of: file), "accepted: \(options)")
        let error = try #require(
            failure.errors.first { $0.field == field && $0.message.contains(fragment) },
            "no error for \(field) with '\(fragment)': \(failure.errors)")
        #expect(error.location.line == line, "\(error)")
        #expect(!failure.description.contains("hunter2"))
    }
}
