import Foundation
import HeraldCore

/// Resolves `env:NAME` (from the given environment) and `file:PATH` (relative to a directory,
/// normally the tenant file's) for plugin options. Messages name the reference, never the value.
public struct FileSecretResolver: SecretResolver {
    public var baseDirectory: String
    public var environment: [String: String]

    public init(baseDirectory: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.baseDirectory = baseDirectory
        self.environment = environment
    }

    public func resolve(_ reference: String) throws -> Secret {
        if reference.hasPrefix("env:") {
            let name = String(reference.dropFirst(4))
            guard !name.isEmpty else { throw SecretResolutionError("env: needs a variable name") }
            guard let value = environment[name], !value.isEmpty else {
                throw SecretResolutionError("environment variable \(name) is not set")
            }
            return Secret(bytes: Array(value.utf8), origin: "env \(name)")
        }
        if reference.hasPrefix("file:") {
            let path = String(reference.dropFirst(5))
            guard !path.isEmpty else { throw SecretResolutionError("file: needs a path") }
            let full = path.hasPrefix("/") ? path : (baseDirectory as NSString).appendingPathComponent(path)
            guard let data = FileManager.default.contents(atPath: full) else {
                throw SecretResolutionError("cannot read the file \(full)")
            }
            var bytes = Array(data)
            while let last = bytes.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { bytes.removeLast() }
            guard !bytes.isEmpty else { throw SecretResolutionError("the file \(full) is empty") }
            return Secret(bytes: bytes, origin: "file \(full)")
        }
        throw SecretResolutionError("a secret must be a reference: env:NAME or file:PATH")
    }
}

public struct SecretResolutionError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
