import HeraldCore

/// One problem in a configuration file: where it is, which field, and which rule it breaks.
///
/// The description reads like a compiler diagnostic, so editors and terminals can jump to it:
///
/// ```text
/// tenants/acme.yaml:7:5: auth.token.key_id: must be exactly 10 characters (A-Z, 0-9)
/// ```
///
/// Messages name files, environment variable names and rules, never secret material (key bytes,
/// passphrases, the values of environment variables).
public struct ConfigError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The file, line and column of the offending node (the key for unknown keys, the enclosing
    /// mapping for missing keys, the value otherwise).
    public var location: SourceLocation
    /// The field's path in the file, e.g. `auth.token.key_id` or `topics[2]`; empty for problems
    /// with the document as a whole (YAML syntax, an empty file).
    public var field: String
    /// The rule that was broken.
    public var message: String

    public init(location: SourceLocation, field: String, message: String) {
        self.location = location
        self.field = field
        self.message = message
    }

    public var description: String {
        field.isEmpty ? "\(location): \(message)" : "\(location): \(field): \(message)"
    }
}

/// A tenant file that could not be loaded, with every problem found in it.
public struct TenantLoadFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The tenant file's path, as it appears in the errors.
    public var file: String
    /// The tenant's ID when the file named a valid one (or its name gave one), for messages.
    public var tenantID: TenantID?
    /// At least one error, in file order.
    public var errors: [ConfigError]

    public init(file: String, tenantID: TenantID? = nil, errors: [ConfigError]) {
        self.file = file
        self.tenantID = tenantID
        self.errors = errors
    }

    /// One error per line.
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}

/// A problem with a whole directory or configuration file that is not about one field: it does
/// not exist, cannot be read, or is not a directory.
public struct ConfigFileError: Error, Sendable, Hashable, CustomStringConvertible {
    public var path: String
    public var message: String

    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }

    public var description: String { "\(path): \(message)" }
}
