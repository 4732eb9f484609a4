import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes tenant files atomically: the bytes go to a hidden temporary file in the same
/// directory (created with the final permissions, so a key is never readable by others, not
/// even for a moment), are flushed to disk, and the temporary file is renamed over the target.
/// Readers (the loader, the watcher) see the old file or the new one, never half of one.
enum SecretFileWriter {
    /// A file as it was before an upload: its bytes and permissions, or absent.
    struct Backup: Sendable {
        var path: String
        var bytes: [UInt8]?
        var permissions: UInt16
    }

    struct WriteError: Error, CustomStringConvertible {
        var path: String
        var operation: String
        var code: Int32
        var description: String { "\(path): cannot \(operation) (\(String(cString: strerror(code))))" }
    }

    /// The file's current content and permissions (bytes nil when it does not exist).
    static func backup(_ path: String) -> Backup {
        guard let data = FileManager.default.contents(atPath: path) else {
            return Backup(path: path, bytes: nil, permissions: 0o600)
        }
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        let permissions = (attributes?[.posixPermissions] as? NSNumber)?.uint16Value ?? 0o600
        return Backup(path: path, bytes: Array(data), permissions: permissions)
    }

    /// Puts a backup back: rewrites the old bytes, or removes a file that did not exist.
    static func restore(_ backup: Backup) throws {
        if let bytes = backup.bytes {
            try write(bytes, to: backup.path, permissions: backup.permissions)
        } else if unlink(backup.path) != 0, errno != ENOENT {
            throw WriteError(path: backup.path, operation: "remove", code: errno)
        }
    }

    /// Writes `bytes` to `path` atomically with `permissions` (e.g. 0o600), creating the
    /// directory (0o700) when it is missing.
    static func write(_ bytes: [UInt8], to path: String, permissions: UInt16) throws {
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        if !FileManager.default.fileExists(atPath: directory) {
            do {
                try FileManager.default.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw WriteError(path: directory, operation: "create the directory", code: EACCES)
            }
        }
        let temporary = directory + "/." + url.lastPathComponent + ".herald-" + UUID().uuidString.prefix(8)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode_t(permissions))
        guard descriptor >= 0 else { throw WriteError(path: temporary, operation: "create", code: errno) }
        var failure: WriteError?
        // The umask may have narrowed the mode given to open; set it exactly.
        if fchmod(descriptor, mode_t(permissions)) != 0 {
            failure = WriteError(path: temporary, operation: "set permissions", code: errno)
        }
        var offset = 0
        while failure == nil, offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                systemWrite(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                failure = WriteError(path: temporary, operation: "write", code: errno)
            } else {
                offset += written
            }
        }
        if failure == nil, fsync(descriptor) != 0 {
            failure = WriteError(path: temporary, operation: "flush", code: errno)
        }
        close(descriptor)
        if failure == nil, rename(temporary, path) != 0 {
            failure = WriteError(path: path, operation: "replace", code: errno)
        }
        if let failure {
            unlink(temporary)
            throw failure
        }
    }

    private static func systemWrite(_ descriptor: Int32, _ pointer: UnsafeRawPointer, _ count: Int) -> Int {
        #if canImport(Glibc)
            Glibc.write(descriptor, pointer, count)
        #elseif canImport(Musl)
            Musl.write(descriptor, pointer, count)
        #else
            Darwin.write(descriptor, pointer, count)
        #endif
    }
}
