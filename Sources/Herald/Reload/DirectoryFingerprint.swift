import Crypto
import Foundation
import HeraldCore

/// What a set of files looks like: per file its modification time, size and SHA-256. Two
/// fingerprints differ when a file was added, removed or changed (even when a rewrite kept the
/// size and the modification time, the hash tells).
struct DirectoryFingerprint: Sendable, Hashable {
    struct Stamp: Sendable, Hashable {
        var modified: Date?
        var size: Int
        var sha256: [UInt8]
    }

    var files: [String: Stamp]

    /// The regular files of `directory` and of its subdirectories (two levels: `tenants/keys/x.p8`),
    /// hidden ones left out, plus `extraFiles` (a tenant's key or CA outside the directory).
    static func take(directory: String, extraFiles: [String] = []) -> DirectoryFingerprint {
        var paths = Set(extraFiles)
        collect(directory, depth: 0, into: &paths)
        var files: [String: Stamp] = [:]
        for path in paths {
            if let stamp = stamp(path) { files[path] = stamp }
        }
        return DirectoryFingerprint(files: files)
    }

    /// This fingerprint for the files `take(directory:extraFiles:)` would look at now: stamps
    /// already taken are kept (a change since then still shows), extra files not seen yet (a CA
    /// outside the directory that a reloaded tenant now reads) are stamped now, files not
    /// looked at any more are dropped. New files in the directory stay unstamped, so they show.
    func covering(directory: String, extraFiles: [String]) -> DirectoryFingerprint {
        var inDirectory = Set<String>()
        Self.collect(directory, depth: 0, into: &inDirectory)
        var files: [String: Stamp] = [:]
        for path in inDirectory.union(extraFiles) {
            if let known = self.files[path] {
                files[path] = known
            } else if !inDirectory.contains(path), let stamp = Self.stamp(path) {
                files[path] = stamp
            }
        }
        return DirectoryFingerprint(files: files)
    }

    /// The files a tenant's configuration was read from besides its YAML: key, certificate,
    /// PKCS#12 bundle, CA file and the webhook's secret.
    static func referencedFiles(of tenant: TenantConfiguration) -> [String] {
        var paths: [String] = []
        func add(secretOrigin origin: String) {
            if origin.hasPrefix("file ") { paths.append(String(origin.dropFirst(5))) }
        }
        switch tenant.auth {
        case .token(let token):
            add(secretOrigin: token.privateKey.origin)
        case .certificate(let certificate):
            switch certificate.identity {
            case .pem(_, let key):
                paths.append(certificate.origin)
                add(secretOrigin: key.origin)
            case .pkcs12(let bundle):
                add(secretOrigin: bundle.origin)
                paths.append(certificate.origin)
            }
            if let passphrase = certificate.passphrase { add(secretOrigin: passphrase.origin) }
        }
        if let webhook = tenant.webhook { add(secretOrigin: webhook.secret.origin) }
        if let ca = tenant.endpoints.trustRootsOrigin {
            paths.append(ca.hasPrefix("file ") ? String(ca.dropFirst(5)) : ca)
        }
        return paths.filter { !$0.hasPrefix("env ") }
    }

    static func collect(_ directory: String, depth: Int, into paths: inout Set<String>) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        for name in names where !name.hasPrefix(".") {
            let path = prefix + name
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
            if isDirectory.boolValue {
                if depth < 2 { collect(path, depth: depth + 1, into: &paths) }
            } else {
                paths.insert(path)
            }
        }
    }

    /// Follows symbolic links (mounted secrets are often links to a hidden directory).
    static func stamp(_ path: String) -> Stamp? {
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: resolved),
            (attributes[.type] as? FileAttributeType) == .typeRegular,
            let data = FileManager.default.contents(atPath: resolved)
        else { return nil }
        return Stamp(
            modified: attributes[.modificationDate] as? Date, size: data.count, sha256: Array(SHA256.hash(data: data)))
    }
}
