import Foundation
import HeraldConfig
import HeraldCore
import Testing

/// `storage:` in `config/herald.yaml`: the SQLite file by default, PostgreSQL when
/// `storage.postgres` is set, with the password only by reference.
@Suite("Server configuration: storage")
struct StorageConfigurationTests {
    let file = "/srv/herald/config/herald.yaml"

    @Test func sqliteIsTheDefault() throws {
        let configuration = try ServerConfiguration.parse(yaml: "log_level: info\n", file: file, environment: [:])
        #expect(configuration.storage == .sqlite)
        #expect(configuration.storagePath == "/srv/herald/data/herald.sqlite")
    }

    @Test func postgresWithThePasswordFromTheEnvironment() throws {
        let yaml = """
            storage:
              postgres:
                url: postgres://herald@db.internal:6432/heraldb
                password: env:HERALD_PG_PASSWORD
                pool_size: 25
                schema: herald_eu
                tls: true
                call_timeout: 2500ms

            """
        let configuration = try ServerConfiguration.parse(
            yaml: yaml, file: file, environment: ["HERALD_PG_PASSWORD": "s3cret"])
        guard case .postgres(let settings) = configuration.storage else {
            Issue.record("expected PostgreSQL")
            return
        }
        #expect(settings.host == "db.internal" && settings.port == 6432)
        #expect(settings.username == "herald" && settings.database == "heraldb")
        #expect(settings.password?.text == "s3cret" && settings.passwordReference == .environment("HERALD_PG_PASSWORD"))
        #expect(settings.poolSize == 25 && settings.schema == "herald_eu" && settings.tls)
        #expect(settings.callTimeout == 2.5)
        #expect(settings.displayName == "postgres db.internal:6432/heraldb")
        #expect(!"\(configuration)".contains("s3cret"), "the password never shows in a description")
    }

    @Test func postgresWithThePasswordFromAFileRelativeToTheBase() throws {
        let fixture = try TenantFixture()
        try FileManager.default.createDirectory(atPath: fixture.path("config"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: fixture.path("secrets"), withIntermediateDirectories: true)
        _ = try fixture.write("secrets/pg-password", "from-a-file\n")
        let file = try fixture.write(
            "config/herald.yaml",
            """
            storage:
              postgres:
                url: postgresql://herald@127.0.0.1/herald
                password: file:secrets/pg-password

            """)
        let configuration = try ServerConfiguration.load(file: file, environment: [:])
        guard case .postgres(let settings) = configuration.storage else {
            Issue.record("expected PostgreSQL")
            return
        }
        #expect(settings.password?.text == "from-a-file" && settings.port == 5432 && settings.poolSize == 10)
        #expect(settings.callTimeout == 30, "a store call waits 30 s at most unless set")
    }

    @Test func anInlinePasswordAndOtherMistakesAreLocatedErrorsThatNeverRepeatThePassword() throws {
        let yaml = """
            log_level: info
            storage:
              postgres:
                url: postgres://herald:hunter2@db/herald
                password: hunter2
                pool_size: 0
                schema: Bad-Name
                tls: yes please
                port: 5432
                call_timeout: 2h

            """
        do {
            _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml", environment: [:])
            Issue.record("expected errors")
        } catch {
            let messages = error.errors.map(\.description)
            #expect(!messages.joined().contains("hunter2"))
            #expect(messages.contains { $0.hasPrefix("config/herald.yaml:9:") && $0.contains("storage.postgres.port: unknown key") })
            #expect(
                messages.contains(
                    "config/herald.yaml:4:10: storage.postgres.url: must not hold the password: give it as storage.postgres.password: env:NAME or file:PATH"
                ), "\(messages)")
            #expect(
                messages.contains(
                    "config/herald.yaml:5:15: storage.postgres.password: must be env:NAME or file:PATH; a password is never written in this file"
                ), "\(messages)")
            #expect(messages.contains { $0.hasPrefix("config/herald.yaml:6:16: storage.postgres.pool_size:") })
            #expect(messages.contains { $0.hasPrefix("config/herald.yaml:7:13: storage.postgres.schema:") })
            #expect(messages.contains { $0.hasPrefix("config/herald.yaml:8:10: storage.postgres.tls:") })
            #expect(messages.contains("config/herald.yaml:10:19: storage.postgres.call_timeout: must be at most 1h"), "\(messages)")
        }
    }

    @Test func aMissingVariableOrURLIsALocatedError() throws {
        let yaml = """
            storage:
              postgres:
                password: env:HERALD_PG_PASSWORD

            """
        do {
            _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml", environment: [:])
            Issue.record("expected errors")
        } catch {
            #expect(error.errors.map(\.field) == ["storage.postgres.url"], "\(error.errors)")
        }
        let noVariable = """
            storage:
              postgres:
                url: postgres://herald@db/herald
                password: env:HERALD_PG_PASSWORD

            """
        do {
            _ = try ServerConfiguration.parse(yaml: noVariable, file: "config/herald.yaml", environment: [:])
            Issue.record("expected errors")
        } catch {
            #expect(
                error.errors.map(\.description) == [
                    "config/herald.yaml:4:15: storage.postgres.password: environment variable HERALD_PG_PASSWORD is not set"
                ])
        }
    }
}
