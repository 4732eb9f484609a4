import Foundation
import HeraldConfig
import HeraldCore
import Testing

/// One broken tenant file and the exact error it must produce.
struct BrokenCase: Sendable, CustomTestStringConvertible {
    var name: String
    var fileName = "acme.yaml"
    var yaml: String
    var line: Int
    var column: Int
    var field: String
    var fragment: String
    /// Total errors the file produces (some mistakes also leave a required key missing).
    var errorCount = 1

    var testDescription: String { name }
}

let brokenCases: [BrokenCase] = [
    BrokenCase(
        name: "team_id too short",
        yaml: """
            id: acme
            team_id: ABCDE1234
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 2, column: 10, field: "team_id", fragment: "must be exactly 10 characters (A-Z, 0-9); this team ID has 9"),
    BrokenCase(
        name: "key_id in lowercase",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: abc123defg
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 5, column: 13, field: "auth.token.key_id",
        fragment: "must be exactly 10 characters (A-Z, 0-9); use uppercase letters"),
    BrokenCase(
        name: "unknown top-level key (typo)",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topcis: [com.acme.app]
            """,
        line: 7, column: 1, field: "topcis",
        fragment:
            "unknown key (did you mean 'topics'?); valid keys: id, team_id, auth, topics, endpoints, pool, plugins, api_keys, delivery",
        errorCount: 2),
    BrokenCase(
        name: "unknown key inside auth.token",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                keyfile: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 6, column: 5, field: "auth.token.keyfile",
        fragment: "unknown key (did you mean 'key_file'?); valid keys: key_id, key_file, key", errorCount: 2),
    BrokenCase(
        name: "team_id missing",
        yaml: """
            id: acme
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 1, column: 1, field: "team_id", fragment: "is required"),
    BrokenCase(
        name: "both token and certificate",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
              certificate:
                cert_file: certs/client.pem
                key_file: certs/client.key
            topics: [com.acme.app]
            """,
        line: 7, column: 3, field: "auth.certificate", fragment: "exactly one of token: and certificate:, not both"),
    BrokenCase(
        name: "key file does not exist",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/missing.p8
            topics: [com.acme.app]
            """,
        line: 6, column: 15, field: "auth.token.key_file", fragment: "file not found: "),
    BrokenCase(
        name: "key_file and key both given",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
                key: env:ACME_KEY
            topics: [com.acme.app]
            """,
        line: 7, column: 5, field: "auth.token.key",
        fragment: "either key_file: (a path) or key: (env:VAR or file:PATH), not both"),
    BrokenCase(
        name: "env reference to an unset variable",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key: env:HERALD_TEST_UNSET_VARIABLE
            topics: [com.acme.app]
            """,
        line: 6, column: 10, field: "auth.token.key",
        fragment: "environment variable HERALD_TEST_UNSET_VARIABLE is not set"),
    BrokenCase(
        name: "passphrase written in the file",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              certificate:
                cert_file: certs/client.pem
                key_file: certs/client.key
                passphrase: hunter2-literal
            topics: [com.acme.app]
            """,
        line: 7, column: 17, field: "auth.certificate.passphrase",
        fragment: "must be a reference, env:NAME or file:PATH; secrets are never written in the tenant file itself"),
    BrokenCase(
        name: "topics empty",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: []
            """,
        line: 7, column: 9, field: "topics", fragment: "must list at least one topic"),
    BrokenCase(
        name: "topic with a space",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app, "com acme"]
            """,
        line: 7, column: 24, field: "topics[1]",
        fragment: "'com acme' is not a valid topic: the topic may hold only letters, digits"),
    BrokenCase(
        name: "duplicate topic",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics:
              - com.acme.app
              - com.acme.app.voip
              - com.acme.app
            """,
        line: 10, column: 5, field: "topics[2]", fragment: "duplicate topic 'com.acme.app' (already topics[0])"),
    BrokenCase(
        name: "endpoint that is not https",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            endpoints:
              production: http://api.push.apple.com
            """,
        line: 9, column: 15, field: "endpoints.production",
        fragment: "'http://api.push.apple.com' is not an APNs endpoint URL; expected https://host[:port]"),
    BrokenCase(
        name: "default environment unknown",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            endpoints:
              default: staging
            """,
        line: 9, column: 12, field: "endpoints.default", fragment: "must be production or development, not 'staging'"),
    BrokenCase(
        name: "default environment switched off",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            endpoints:
              development: null
              default: development
            """,
        line: 10, column: 12, field: "endpoints.default",
        fragment: "names development, but endpoints.development is switched off"),
    BrokenCase(
        name: "pool.connections out of range",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            pool:
              connections: 0
            """,
        line: 9, column: 16, field: "pool.connections", fragment: "must be from 1 to 64, not 0"),
    BrokenCase(
        name: "pool.request_timeout not a duration",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            pool:
              request_timeout: soon
            """,
        line: 9, column: 20, field: "pool.request_timeout", fragment: "must be a duration of more than 0 seconds"),
    BrokenCase(
        name: "pool.open_next_at negative",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            pool:
              open_next_at: -1
            """,
        line: 9, column: 17, field: "pool.open_next_at", fragment: "must be from 0 to 10000, not -1"),
    BrokenCase(
        name: "pool.max_streams above Herald's ceiling",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            pool:
              max_streams: 1001
            """,
        line: 9, column: 16, field: "pool.max_streams", fragment: "must be from 1 to 1000, not 1001"),
    BrokenCase(
        name: "api key hash in uppercase",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            api_keys:
              - name: ci
                sha256: 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08
            """,
        line: 10, column: 13, field: "api_keys[0].sha256",
        fragment: "must be the SHA-256 of the API key as 64 lowercase hex digits"),
    BrokenCase(
        name: "plugin without a name",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            plugins:
              - options: {limit: 5}
            """,
        line: 9, column: 5, field: "plugins[0].name", fragment: "is required"),
    BrokenCase(
        name: "YAML syntax error (unclosed flow list)",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app
            """,
        line: 8, column: 1, field: "", fragment: "YAML syntax error: did not find expected ',' or ']'"),
    BrokenCase(
        name: "key written twice",
        yaml: """
            id: acme
            team_id: ABCDE12345
            team_id: ABCDE12346
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 2, column: 1, field: "team_id", fragment: "duplicate key 'team_id' in one mapping"),
    BrokenCase(
        name: "id with uppercase and underscore",
        yaml: """
            id: Acme_Corp
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 1, column: 5, field: "id", fragment: "'Acme_Corp' is not a valid tenant id"),
    BrokenCase(
        name: "no id and a file name that is not an id",
        fileName: "Acme Corp.yaml",
        yaml: """
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 1, column: 1, field: "id", fragment: "is not set and the file name 'Acme Corp' is not a valid tenant id"),
    BrokenCase(
        name: "key file that is not a PEM key",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: certs/not-a-cert.txt
            topics: [com.acme.app]
            """,
        line: 6, column: 15, field: "auth.token.key_file", fragment: "does not hold a PEM private key"),
    BrokenCase(
        name: "cert_file holding a key",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              certificate:
                cert_file: certs/client.key
                key_file: certs/client.key
            topics: [com.acme.app]
            """,
        line: 5, column: 16, field: "auth.certificate.cert_file", fragment: "does not hold a PEM certificate"),
    BrokenCase(
        name: "key_file together with pkcs12_file",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              certificate:
                pkcs12_file: certs/bundle.p12
                key_file: certs/client.key
                passphrase: env:HERALD_TEST_PASSPHRASE
            topics: [com.acme.app]
            """,
        line: 6, column: 5, field: "auth.certificate.key_file", fragment: "not used with pkcs12_file:"),
    BrokenCase(
        name: "empty file",
        yaml: "# nothing here yet\n",
        line: 1, column: 1, field: "", fragment: "the file is empty; a tenant needs at least team_id, auth and topics"),
    BrokenCase(
        name: "file is a list, not a mapping",
        yaml: """
            - id: acme
            - team_id: ABCDE12345
            """,
        line: 1, column: 1, field: "", fragment: "must be a mapping with the keys id, team_id, auth"),
    BrokenCase(
        name: "ca_file missing",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            endpoints:
              ca_file: ../nowhere/ca.pem
            """,
        line: 9, column: 12, field: "endpoints.ca_file", fragment: "file not found: "),
    BrokenCase(
        name: "auth without token or certificate",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth: {}
            topics: [com.acme.app]
            """,
        line: 3, column: 7, field: "auth",
        fragment: "must hold token: (a .p8 signing key) or certificate: (a client certificate)"),
    BrokenCase(
        name: "env: without a variable name",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key: "env:"
            topics: [com.acme.app]
            """,
        line: 6, column: 10, field: "auth.token.key", fragment: "env: must be followed by an environment variable name"),
    BrokenCase(
        name: "topics given as a string",
        yaml: """
            id: acme
            team_id: ABCDE12345
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: com.acme.app
            """,
        line: 7, column: 9, field: "topics", fragment: "must be a list of topics (bundle IDs), not a string"),
]

/// A tenant file whose `team_id` is written as `value`.
private func teamIDCase(_ name: String, _ value: String, _ fragment: String) -> BrokenCase {
    BrokenCase(
        name: name,
        yaml: """
            id: acme
            team_id: \(value)
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app]
            """,
        line: 2, column: 10, field: "team_id", fragment: fragment)
}

/// Null written two ways, and a null's text tagged as a string.
let nullTeamIDCases = [
    teamIDCase("team_id given as ~", "~", "must be a string, not empty"),
    teamIDCase("team_id given as Null", "Null", "must be a string, not empty"),
    teamIDCase(
        "team_id given as !!str ~ (a string, not null)", "!!str ~", "must be exactly 10 characters (A-Z, 0-9); this team ID has 1"),
]

@Suite("Broken tenant files")
struct BrokenTenantFileTests {
    @Test(arguments: brokenCases + nullTeamIDCases)
    func reportsTheExactError(_ broken: BrokenCase) throws {
        #expect(brokenCases.count >= 15)
        let fixture = try TenantFixture()
        let file = try fixture.write(broken.fileName, broken.yaml)
        let loader = TenantLoader(environment: ["HERALD_TEST_PASSPHRASE": "pass"])

        let failure = try #require(loader.failure(of: file), "\(broken.name) loaded but should have failed")
        #expect(failure.file == file)
        #expect(failure.errors.count == broken.errorCount, "errors: \(failure.errors)")
        let matching = failure.errors.filter { $0.field == broken.field && $0.message.contains(broken.fragment) }
        let error = try #require(
            matching.first, "no error for field '\(broken.field)' with '\(broken.fragment)'; got \(failure.errors)")
        #expect(error.location.file == file)
        #expect(error.location.line == broken.line, "\(error)")
        #expect(error.location.column == broken.column, "\(error)")
        let prefix = "\(file):\(broken.line):\(broken.column): " + (broken.field.isEmpty ? "" : "\(broken.field): ")
        #expect(error.description.hasPrefix(prefix), "\(error.description)")
    }

    @Test func unknownKeysListTheValidKeysEvenWithoutASuggestion() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write(
            "acme.yaml", TenantFixture.tokenTenant + "endpoints:\n  sandbox_url: https://localhost:2197\n")
        let failure = try #require(TenantLoader(environment: [:]).failure(of: file))
        #expect(
            failure.errors.map(\.description) == [
                "\(file):9:3: endpoints.sandbox_url: unknown key; valid keys: production, development, default, ca_file, channels_production, channels_development"
            ])
    }

    @Test func everyProblemInAFileIsReportedInFileOrder() throws {
        let fixture = try TenantFixture()
        let file = try fixture.write(
            "acme.yaml",
            """
            id: acme
            team_id: short
            auth:
              token:
                key_id: ABC123DEFG
                key_file: keys/AuthKey_ABC123DEFG.p8
            topics: [com.acme.app, com..acme]
            pool:
              connections: 65

            """)
        let failure = try #require(TenantLoader(environment: [:]).failure(of: file))
        #expect(failure.errors.map(\.field) == ["team_id", "topics[1]", "pool.connections"])
        #expect(failure.errors.map(\.location.line) == [2, 7, 9])
    }
}
