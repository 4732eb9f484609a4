import Foundation
import HeraldCore
import Synchronization

/// Loads tenant files: one YAML file per tenant in a directory (`tenants/` by default).
///
/// ```swift
/// let load = try TenantLoader().loadDirectory("tenants")
/// for failure in load.failures { print(failure) }   // file:line:column: field: message
/// let tenants = load.tenants                         // every valid tenant, even when others failed
/// ```
///
/// Every error names the file, line, column and field. Unknown keys are errors that list the
/// valid keys. One broken file is reported and the other tenants still load. Two files with the
/// same tenant ID both fail (neither is served, since either could be the intended one).
/// Secrets are read from files or `env:` references and never appear in messages.
public struct TenantLoader: Sendable {
    /// The environment `env:NAME` references read from.
    public var environment: [String: String]

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// The tenant files of a directory: `*.yaml` and `*.yml`, not hidden, not in subdirectories,
    /// sorted by name. Paths are `directory/name`, as errors show them.
    public static func tenantFiles(in directory: String) throws(ConfigFileError) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) else {
            throw ConfigFileError(path: directory, message: "tenants directory not found")
        }
        guard isDirectory.boolValue else {
            throw ConfigFileError(path: directory, message: "is a file, not a tenants directory")
        }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw ConfigFileError(path: directory, message: "tenants directory cannot be read")
        }
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        return
            names
            .filter { !$0.hasPrefix(".") && ($0.hasSuffix(".yaml") || $0.hasSuffix(".yml")) }
            .sorted()
            .map { prefix + $0 }
            .filter { path in
                var isDir: ObjCBool = false
                return FileManager.default.fileExists(atPath: path, isDirectory: &isDir) && !isDir.boolValue
            }
    }

    /// Loads every tenant file of a directory. Throws only when the directory itself is unusable;
    /// problems in tenant files are in the result's `failures`.
    public func loadDirectory(_ directory: String) throws(ConfigFileError) -> TenantDirectoryLoad {
        loadFiles(try Self.tenantFiles(in: directory))
    }

    /// Loads the given tenant files as one set (duplicate IDs among them are errors).
    public func loadFiles(_ files: [String]) -> TenantDirectoryLoad {
        let outcomes = Array(zip(files, parseFiles(files))).map { (file: $0.0, outcome: $0.1) }

        // Duplicate IDs: every file that claims an ID another file also claims fails.
        var filesByID: [TenantID: [String]] = [:]
        for (file, outcome) in outcomes {
            if let id = outcome.tenantID { filesByID[id, default: []].append(file) }
        }
        var tenants: [TenantConfiguration] = []
        var failures: [TenantLoadFailure] = []
        var locations: [TenantID: [String: SourceLocation]] = [:]
        var warnings: [ConfigError] = []
        for (file, outcome) in outcomes {
            warnings += outcome.warnings
            var errors = outcome.errors
            if let id = outcome.tenantID, let claimants = filesByID[id], claimants.count > 1 {
                let others = claimants.filter { $0 != file }
                let how = outcome.idLocation == nil ? " (from the file name)" : ""
                errors.append(
                    ConfigError(
                        location: outcome.idLocation ?? SourceLocation(file: file, line: 1, column: 1), field: "id",
                        message: "duplicate tenant id '\(id)'\(how): also used by \(others.joined(separator: ", "))"))
            }
            if errors.isEmpty, let tenant = outcome.tenant {
                tenants.append(tenant)
                locations[tenant.id] = outcome.locations
            } else {
                failures.append(TenantLoadFailure(file: file, tenantID: outcome.tenantID, errors: errors))
            }
        }
        return TenantDirectoryLoad(tenants: tenants, failures: failures, fieldLocations: locations, warnings: warnings)
    }

    /// Parses the files on all cores (a thousand files are mostly YAML parsing); the outcomes
    /// come back in the files' order, so the result does not depend on scheduling. Each worker
    /// takes the next file not yet taken: a core slowed by other work takes fewer, instead of
    /// leaving the last of a fixed share to finish alone.
    private func parseFiles(_ files: [String]) -> [TenantFileParser.Outcome] {
        guard files.count > 8 else { return files.map(parseFile) }
        let results = Mutex<[TenantFileParser.Outcome?]>(Array(repeating: nil, count: files.count))
        let next = Atomic<Int>(0)
        let workers = min(ProcessInfo.processInfo.activeProcessorCount, files.count)
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            while true {
                let index = next.add(1, ordering: .relaxed).oldValue
                guard index < files.count else { return }
                let outcome = parseFile(files[index])
                results.withLock { $0[index] = outcome }
            }
        }
        return results.withLock { $0.map { $0! } }
    }

    /// Loads one tenant file (e.g. to reload a tenant). Checking its ID against the other loaded
    /// tenants is the caller's job.
    public func loadTenant(file: String) throws(TenantLoadFailure) -> TenantConfiguration {
        let outcome = parseFile(file)
        guard outcome.errors.isEmpty, let tenant = outcome.tenant else {
            throw TenantLoadFailure(file: file, tenantID: outcome.tenantID, errors: outcome.errors)
        }
        return tenant
    }

    /// Parses tenant YAML given as text. `file` names it in errors, gives the default ID, and
    /// relative paths in it are resolved against its directory.
    public func parseTenant(yaml: String, file: String) throws(TenantLoadFailure) -> TenantConfiguration {
        let outcome = TenantFileParser(file: file, environment: environment).parse(yaml: yaml)
        guard outcome.errors.isEmpty, let tenant = outcome.tenant else {
            throw TenantLoadFailure(file: file, tenantID: outcome.tenantID, errors: outcome.errors)
        }
        return tenant
    }

    private func parseFile(_ file: String) -> TenantFileParser.Outcome {
        let parser = TenantFileParser(file: file, environment: environment)
        let start = SourceLocation(file: file, line: 1, column: 1)
        let bytes: [UInt8]
        switch SourceReader.readFile(file) {
        case .success(let read): bytes = read
        case .failure(let problem):
            return .init(
                tenant: nil, tenantID: nil, idLocation: nil,
                errors: [ConfigError(location: start, field: "", message: problem.message)], locations: [:])
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .init(
                tenant: nil, tenantID: nil, idLocation: nil,
                errors: [ConfigError(location: start, field: "", message: "the file is not UTF-8 text")], locations: [:]
            )
        }
        return parser.parse(yaml: text)
    }
}

/// The result of loading a tenants directory: the tenants that loaded and the files that did not.
public struct TenantDirectoryLoad: Sendable {
    /// Every valid tenant, in file-name order.
    public var tenants: [TenantConfiguration]
    /// Every file that failed, with all its errors, in file-name order.
    public var failures: [TenantLoadFailure]
    /// For each loaded tenant: field path (`auth.token.key_file`) → where it was written.
    public var fieldLocations: [TenantID: [String: SourceLocation]]
    /// Problems that did not stop a file from loading (a key file that group or others can
    /// read), in file-name order: shown by `herald tenants validate` and logged at load.
    public var warnings: [ConfigError]

    public init(
        tenants: [TenantConfiguration], failures: [TenantLoadFailure],
        fieldLocations: [TenantID: [String: SourceLocation]] = [:], warnings: [ConfigError] = []
    ) {
        self.tenants = tenants
        self.failures = failures
        self.fieldLocations = fieldLocations
        self.warnings = warnings
    }

    /// True when every file loaded.
    public var isValid: Bool { failures.isEmpty }

    /// Where `field` (or its nearest recorded parent) was written in a loaded tenant's file; the
    /// file's start when nothing closer is known. For reporting later checks (e.g. a key that
    /// does not parse) at the right line.
    public func location(of field: String, in tenant: TenantConfiguration) -> SourceLocation {
        let known = fieldLocations[tenant.id] ?? [:]
        var path = field
        while !path.isEmpty {
            if let location = known[path] { return location }
            if let cut = path.lastIndex(where: { $0 == "." || $0 == "[" }) {
                path = String(path[..<cut])
            } else {
                break
            }
        }
        return SourceLocation(file: tenant.sourceFile, line: 1, column: 1)
    }

    /// Moves tenants that fail a later check into `failures`. `problem` returns nil for a good
    /// tenant, or the field (e.g. `auth.token.key_file`) and the message; the error is reported at
    /// the field's location. Used for checks HeraldConfig cannot do itself, such as building each
    /// tenant's credential provider.
    public func checking(
        _ problem: (TenantConfiguration) -> (field: String, message: String)?
    ) -> TenantDirectoryLoad {
        var result = TenantDirectoryLoad(tenants: [], failures: failures, fieldLocations: [:])
        for tenant in tenants {
            if let (field, message) = problem(tenant) {
                result.failures.append(
                    TenantLoadFailure(
                        file: tenant.sourceFile, tenantID: tenant.id,
                        errors: [ConfigError(location: location(of: field, in: tenant), field: field, message: message)]
                    ))
            } else {
                result.tenants.append(tenant)
                result.fieldLocations[tenant.id] = fieldLocations[tenant.id]
            }
        }
        result.failures.sort { $0.file < $1.file }
        return result
    }
}
