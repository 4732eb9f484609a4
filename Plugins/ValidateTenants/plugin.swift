import Foundation
import PackagePlugin

/// `swift package validate-tenants [DIR] [herald options]`: runs `herald tenants validate DIR`
/// (default: the package's `tenants/` directory) and fails when any tenant file is invalid.
///
/// A relative DIR is taken relative to the package directory. Everything after DIR (e.g.
/// `--config config/herald.yaml`) is passed on to `herald tenants validate`.
///
/// The `herald` tool is built through SwiftPM's plugin API rather than declared as a tool
/// dependency: SwiftPM cannot hand a plugin an executable target whose product has another name
/// (the target is `HeraldCLI`, the product `herald`; swiftlang/swift-package-manager#8831).
@main
struct ValidateTenants: CommandPlugin {
    func performCommand(context: PluginContext, arguments: [String]) async throws {
        let packageDirectory = context.package.directoryURL

        var rest = arguments
        var directory = packageDirectory.appending(path: "tenants").path
        if let first = rest.first, !first.hasPrefix("-") {
            rest.removeFirst()
            directory = first.hasPrefix("/") ? first : packageDirectory.appending(path: first).path
        }

        let herald = try buildHerald()
        let process = Process()
        process.executableURL = herald
        process.arguments = ["tenants", "validate", directory] + rest
        process.currentDirectoryURL = packageDirectory
        try process.run()
        process.waitUntilExit()

        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            let status = process.terminationStatus
            let what =
                status == 1
                ? "some tenant files are invalid (see above)" : "herald tenants validate failed with status \(status)"
            throw ValidateTenantsError(message: what)
        }
    }

    /// Builds the `herald` product (debug) and returns its executable.
    private func buildHerald() throws -> URL {
        let result = try packageManager.build(
            .product("herald"), parameters: PackageManager.BuildParameters(configuration: .debug, logging: .concise))
        guard result.succeeded else {
            Diagnostics.error("validate-tenants: building herald failed:\n\(result.logText)")
            throw ValidateTenantsError(message: "building herald failed")
        }
        guard let executable = result.builtArtifacts.first(where: { $0.kind == .executable }) else {
            throw ValidateTenantsError(message: "the build produced no herald executable")
        }
        return executable.url
    }
}

struct ValidateTenantsError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
