import ArgumentParser
import Foundation
import Herald
import HeraldAPNs
import HeraldConfig
import HeraldCore
import HeraldStore
import Logging

/// `herald tenants validate|list`: check and show the tenant files; `create|show|update|delete|
/// add-key|remove-key`: the tenant lifecycle through a running server's admin API.
struct TenantsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tenants",
        abstract: "Check and list the tenant files; onboard, change and remove tenants through the admin API.",
        subcommands: [
            TenantsValidateCommand.self, TenantsListCommand.self, TenantsCreateCommand.self, TenantsShowCommand.self,
            TenantsUpdateCommand.self, TenantsDeleteCommand.self, TenantsAddKeyCommand.self, TenantsRemoveKeyCommand.self,
        ]
    )
}

/// The options both subcommands share: which tenants to read.
struct TenantSourceOptions: ParsableArguments {
    @Argument(
        help: ArgumentHelp(
            "A tenants directory or one tenant file (default: tenants_dir of the server configuration, else tenants).",
            valueName: "dir"))
    var path: String?

    @Option(name: .customLong("config"), help: "The server configuration file, for its tenants_dir.")
    var configFile: String?

    /// The directory (or file) to read, or a usage message.
    func resolvedPath() throws(TenantsUsageError) -> String {
        if let path { return path }
        do {
            let server = try ServerConfiguration.load(
                file: configFile ?? ServerConfiguration.defaultFile, required: configFile != nil)
            return server.tenantsDirectory
        } catch {
            throw TenantsUsageError(message: error.description)
        }
    }

    /// Loads the tenants and builds each one's credential provider (which checks the keys and
    /// certificates). Tenants whose credentials fail move to the failures.
    func load() throws(TenantsUsageError) -> (path: String, report: TenantReport) {
        let path = try resolvedPath()
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw TenantsUsageError(message: "\(path): no such tenants directory or tenant file")
        }
        let loader = TenantLoader()
        let load: TenantDirectoryLoad
        if isDirectory.boolValue {
            do {
                load = try loader.loadDirectory(path)
            } catch {
                throw TenantsUsageError(message: error.description)
            }
        } else {
            load = loader.loadFiles([path])
        }
        let storeDirectory = NSTemporaryDirectory() + "herald-validate-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: storeDirectory) }
        return (path, TenantReport(load: load, clock: SystemWallClock(), plugins: Self.pluginCheck(storeDirectory: storeDirectory)))
    }

    /// Builds each tenant's plugins from their options, as a reload does (``Router/makeRuntime(for:)``
    /// on a router over a store in `storeDirectory`, which the caller removes; no connection is
    /// opened). Nil, said on standard error, when that store cannot be made: the plugins are then
    /// not checked.
    static func pluginCheck(storeDirectory: String) -> ((TenantConfiguration) -> (field: String, message: String)?)? {
        let store: SQLitePushStore
        do {
            store = try SQLitePushStore(directory: storeDirectory)
        } catch {
            printError("herald tenants: plugins not checked: no scratch store in \(storeDirectory) (\(error))")
            return nil
        }
        var logger = Logger(label: "herald.validate")
        logger.logLevel = .critical
        let router = Router(
            configuration: RouterConfiguration(store: store, transports: APNsTransportProvider(), logger: logger))
        return { tenant in
            do {
                _ = try router.makeRuntime(for: tenant)
                return nil
            } catch let error as PluginConfigurationError {
                return (error.field, "plugin '\(error.plugin)': \(error.message)")
            } catch {
                // The credential check before this one reports credential problems.
                return nil
            }
        }
    }
}

struct TenantsUsageError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// `herald tenants validate [DIR]`
struct TenantsValidateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check every tenant file: fields, keys and certificates.",
        discussion: """
            Prints each tenant with its auth kind, key ID or certificate subject and expiry, topics and \
            endpoints, or its errors as file:line:column: field: message.
            Exit status: 0 when every tenant is valid, 1 when any is invalid (or there is none), 2 on usage errors.
            """
    )

    @OptionGroup var source: TenantSourceOptions

    func run() async throws {
        let (path, report): (String, TenantReport)
        do {
            (path, report) = try source.load()
        } catch {
            printError("herald tenants validate: \(error)")
            throw ExitStatus.invalid
        }
        print(report.validationText(source: path), terminator: "")
        if !report.allValid { throw ExitCode(1) }
    }
}

/// `herald tenants list [DIR] [--json]`
struct TenantsListCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the tenants: ID, auth, topics, default environment, file.",
        discussion: """
            Invalid tenant files are listed as invalid (with their errors in --json). Exit status: 0 when the \
            tenants could be listed (even if some are invalid), 2 on usage errors.
            """
    )

    @OptionGroup var source: TenantSourceOptions

    @Flag(name: .long, help: "Print a JSON array, one object per tenant file.")
    var json = false

    func run() async throws {
        let report: TenantReport
        do {
            report = try source.load().report
        } catch {
            printError("herald tenants list: \(error)")
            throw ExitStatus.invalid
        }
        if json {
            print(try report.jsonText())
        } else {
            print(report.tableText(), terminator: "")
        }
    }
}

private func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}
