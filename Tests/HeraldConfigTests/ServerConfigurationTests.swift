import Foundation
import HeraldConfig
import HeraldCore
import Testing

@Suite("Server configuration")
struct ServerConfigurationTests {
    @Test func defaultsWhenTheFileIsAbsent() throws {
        let configuration = try ServerConfiguration.load(file: "/nonexistent/config/herald.yaml")
        #expect(configuration.tenantsDirectory == "tenants")
        #expect(configuration.listen == ServerConfiguration.ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(configuration.storagePath == "data/herald.sqlite")
        #expect(configuration.logLevel == .info)
        #expect(configuration.sourceFile == nil)
    }

    @Test func aNamedFileMustExist() {
        #expect(throws: ConfigFailure.self) {
            try ServerConfiguration.load(file: "/nonexistent/config/herald.yaml", required: true)
        }
    }

    @Test func readsEveryKeyAndResolvesPathsAgainstTheConfigDirectorysParent() throws {
        let fixture = try TenantFixture()
        try FileManager.default.createDirectory(atPath: fixture.path("config"), withIntermediateDirectories: true)
        let file = try fixture.write(
            "config/herald.yaml",
            """
            tenants_dir: customers
            listen:
              host: 0.0.0.0
              port: 9443
            storage_path: /var/lib/herald/herald.sqlite
            log_level: debug

            """)
        let configuration = try ServerConfiguration.load(file: file)
        #expect(configuration.tenantsDirectory == fixture.directory + "/customers")
        #expect(configuration.storagePath == "/var/lib/herald/herald.sqlite")
        #expect(configuration.listen.description == "0.0.0.0:9443")
        #expect(configuration.logLevel == .debug)
        #expect(configuration.sourceFile == file)
    }

    @Test func relativeConfigPathGivesRelativeDirectories() throws {
        let configuration = try ServerConfiguration.parse(yaml: "log_level: warning\n", file: "config/herald.yaml")
        #expect(configuration.tenantsDirectory == "tenants")
        #expect(configuration.storagePath == "data/herald.sqlite")
        let nested = try ServerConfiguration.parse(yaml: "tenants_dir: t\n", file: "deploy/config/herald.yaml")
        #expect(nested.tenantsDirectory == "deploy/t")
        let empty = try ServerConfiguration.parse(yaml: "# defaults\n", file: "/srv/herald/config/herald.yaml")
        #expect(empty.tenantsDirectory == "/srv/herald/tenants")
    }

    @Test func jobsOnConnectionLoopIsOnUnlessTurnedOffAndMustBeABoolean() throws {
        #expect(try ServerConfiguration.parse(yaml: "# defaults\n", file: "config/herald.yaml").jobs.onConnectionLoop)
        let off = try ServerConfiguration.parse(yaml: "jobs:\n  on_connection_loop: false\n", file: "config/herald.yaml")
        #expect(off.jobs.onConnectionLoop == false)
        do {
            _ = try ServerConfiguration.parse(yaml: "jobs:\n  on_connection_loop: sometimes\n", file: "config/herald.yaml")
            Issue.record("expected an error for jobs.on_connection_loop")
        } catch {
            #expect("\(error)".contains("jobs.on_connection_loop") && "\(error)".contains("true or false"), "\(error)")
        }
    }

    @Test func passwordCostIsTwelveUnlessSetAndStaysInItsRange() throws {
        #expect(try ServerConfiguration.parse(yaml: "# defaults\n", file: "config/herald.yaml").api.passwordCost == 12)
        #expect(try ServerConfiguration.parse(yaml: "api:\n  password_cost: 14\n", file: "config/herald.yaml").api.passwordCost == 14)
        for bad in ["9", "17", "twelve"] {
            do {
                _ = try ServerConfiguration.parse(yaml: "api:\n  password_cost: \(bad)\n", file: "config/herald.yaml")
                Issue.record("expected an error for api.password_cost: \(bad)")
            } catch {
                #expect(
                    error.errors.map(\.description).first?.hasPrefix("config/herald.yaml:2:18: api.password_cost: must be") == true
                        && "\(error)".contains("from 10 to 16"), "\(error)")
            }
        }
    }

    @Test func unknownKeysAndBadValuesAreLocatedErrors() throws {
        let yaml = """
            tenant_dir: tenants
            listen:
              port: 70000
            log_level: verbose

            """
        do {
            _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml")
            Issue.record("expected errors")
        } catch {
            #expect(
                error.errors.map(\.description) == [
                    "config/herald.yaml:1:1: tenant_dir: unknown key (did you mean 'tenants_dir'?); valid keys: tenants_dir, listen, storage_path, storage, log_level, api, jobs, sandbox, reload, http, shutdown_timeout, proxy, webhooks",
                    "config/herald.yaml:3:9: listen.port: must be from 0 to 65535, not 70000",
                    "config/herald.yaml:4:12: log_level: must be one of trace, debug, info, notice, warning, error, critical, not 'verbose'",
                ])
        }
    }

    @Test func theCommittedConfigurationLoads() throws {
        let root = packageRoot()
        let configuration = try ServerConfiguration.load(file: root + "/config/herald.yaml", required: true)
        #expect(configuration.tenantsDirectory == root + "/tenants")
        #expect(configuration.sourceFile == root + "/config/herald.yaml")
    }
}

/// The package directory, found from this source file's path.
func packageRoot(file: String = #filePath) -> String {
    URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
}
