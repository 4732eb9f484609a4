import Foundation
import HeraldCore

/// Where a secret (a key, a passphrase, a PKCS#12 bundle) is read from, as written in a tenant file.
///
/// - `env:NAME`: the value of environment variable `NAME`.
/// - `file:PATH`, or a plain path where the field takes a path: the file's bytes; a relative path is
///   relative to the directory of the file that names it.
///
/// Secrets are never written into tenant files themselves.
public enum SecretReference: Sendable, Hashable, CustomStringConvertible {
    case environment(String)
    case file(String)

    /// Parses a reference. `plainIsPath` decides what a value with neither prefix means: a path
    /// (`key_file`) or an error (`passphrase`, `key`).
    static func parse(_ text: String, plainIsPath: Bool) -> Result<SecretReference, ReferenceProblem> {
        if text.hasPrefix("env:") {
            let name = String(text.dropFirst(4))
            guard Self.isValidEnvironmentName(name) else { return .failure(.badEnvironmentName) }
            return .success(.environment(name))
        }
        if text.hasPrefix("file:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { return .failure(.emptyPath) }
            return .success(.file(path))
        }
        return plainIsPath ? .success(.file(text)) : .failure(.notAReference)
    }

    enum ReferenceProblem: Error {
        case badEnvironmentName
        case emptyPath
        /// A bare value where only `env:`/`file:` are allowed (it might be the secret itself,
        /// so it is never repeated in the message).
        case notAReference
    }

    static func isValidEnvironmentName(_ name: String) -> Bool {
        guard let first = name.utf8.first else { return false }
        func letter(_ b: UInt8) -> Bool {
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b)
                || b == UInt8(ascii: "_")
        }
        return letter(first)
            && name.utf8.allSatisfy { letter($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    public var description: String {
        switch self {
        case .environment(let name): return "env:\(name)"
        case .file(let path): return "file:\(path)"
        }
    }
}

/// Reads files and environment variables for the loaders, with messages that never contain the
/// content.
struct SourceReader: Sendable {
    let environment: [String: String]

    /// `path` resolved against `baseDirectory` (the tenant file's directory) unless absolute.
    static func resolve(_ path: String, against baseDirectory: String) -> String {
        if path.hasPrefix("/") || baseDirectory.isEmpty || baseDirectory == "." { return path }
        return baseDirectory.hasSuffix("/") ? baseDirectory + path : baseDirectory + "/" + path
    }

    /// The directory part of a file path ("" for a bare file name).
    static func directory(of file: String) -> String {
        guard let slash = file.lastIndex(of: "/") else { return "" }
        if slash == file.startIndex { return "/" }
        return String(file[..<slash])
    }

    /// The bytes of a file, or a message saying why they could not be read.
    static func readFile(_ path: String) -> Result<[UInt8], ReadProblem> {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            return .failure(ReadProblem("file not found: \(path)"))
        }
        guard !isDirectory.boolValue else { return .failure(ReadProblem("\(path) is a directory, not a file")) }
        guard FileManager.default.isReadableFile(atPath: path) else {
            return .failure(ReadProblem("file cannot be read (permission denied): \(path)"))
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            return .failure(ReadProblem("file cannot be read: \(path)"))
        }
        return .success(Array(data))
    }

    /// Loads a secret. `trimNewline` removes one trailing line break (passphrase files).
    func load(_ reference: SecretReference, baseDirectory: String, trimNewline: Bool) -> Result<Secret, ReadProblem> {
        switch reference {
        case .environment(let name):
            guard let value = environment[name] else {
                return .failure(ReadProblem("environment variable \(name) is not set"))
            }
            guard !value.isEmpty else { return .failure(ReadProblem("environment variable \(name) is empty")) }
            return .success(Secret(bytes: Array(value.utf8), origin: "env \(name)"))
        case .file(let path):
            let resolved = Self.resolve(path, against: baseDirectory)
            switch Self.readFile(resolved) {
            case .failure(let problem): return .failure(problem)
            case .success(var bytes):
                if trimNewline {
                    if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
                    if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
                }
                guard !bytes.isEmpty else { return .failure(ReadProblem("file is empty: \(resolved)")) }
                return .success(Secret(bytes: bytes, origin: "file \(resolved)"))
            }
        }
    }

    struct ReadProblem: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }
}

/// Cheap checks that a file holds the kind of PEM it should, before the credential code parses it.
enum PEMCheck {
    static func hasCertificate(_ bytes: [UInt8]) -> Bool {
        contains(bytes, "-----BEGIN CERTIFICATE-----")
    }

    static func hasPrivateKey(_ bytes: [UInt8]) -> Bool {
        // PKCS#8 (`PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`), SEC1 (`EC PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`).
        contains(bytes, "-----BEGIN ") && contains(bytes, "PRIVATE KEY-----")
    }

    static func isPEM(_ bytes: [UInt8]) -> Bool { contains(bytes, "-----BEGIN ") }

    private static func contains(_ bytes: [UInt8], _ marker: String) -> Bool {
        let needle = Array(marker.utf8)
        guard bytes.count >= needle.count else { return false }
        var i = 0
        while i + needle.count <= bytes.count {
            if bytes[i] == needle[0], Array(bytes[i..<(i + needle.count)]) == needle { return true }
            i += 1
        }
        return false
    }
}
