import Crypto
import Foundation
import HeraldCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a set of files looks like: per file its modification time, size and SHA-256. Two
/// fingerprints differ when a file was added, removed or changed (even when a rewrite kept the
/// size and the modification time, the hash tells).
///
/// A file whose status (device, inode, size, modification and change times, to the
/// nanosecond) is the one an earlier fingerprint saw keeps that fingerprint's hash without being
/// read again, when its change time was already two seconds old then: a write changes the change
/// time, which no tool can set back, and the two seconds cover file systems that keep coarser
/// times. A directory of 10,000 tenants is then read once a reload, not three times.
struct DirectoryFingerprint: Sendable, Hashable {
    struct Stamp: Sendable, Hashable {
        var modified: Date?
        var size: Int
        var sha256: [UInt8]
        /// The status the hash was taken with; nil: not to be reused.
        var status: FileStatus? = nil

        static func == (a: Stamp, b: Stamp) -> Bool {
            a.modified == b.modified && a.size == b.size && a.sha256 == b.sha256
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(modified)
            hasher.combine(size)
            hasher.combine(sha256)
        }
    }

    /// What `stat` says of a file, to tell that it was not written since.
    struct FileStatus: Sendable, Hashable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int64
        var changed: Int64
    }

    var files: [String: Stamp]

    /// The regular files of `directory` and of its subdirectories (two levels: `tenants/keys/x.p8`),
    /// hidden ones left out, plus `extraFiles` (a tenant's key or CA outside the directory).
    /// Files `earlier` stamped and nobody wrote since keep its stamps.
    /// (`now`: the wall clock in nanoseconds since 1970, which tells a settled change time.)
    static func take(
        directory: String, extraFiles: [String] = [], reusing earlier: DirectoryFingerprint? = nil,
        now: Int64 = wallNanoseconds()
    ) -> DirectoryFingerprint {
        var paths = Set(extraFiles)
        collect(directory, depth: 0, into: &paths)
        let list = Array(paths)
        // Stamped over the cores: each stamp is a realpath, a stat and, for a file not seen
        // settled before, a read and a hash (a directory of 10,000 tenants at start). Each
        // worker takes the next file not yet taken, so a slowed core does not hold up the end.
        let workers = max(1, min(ProcessInfo.processInfo.activeProcessorCount, list.count / 256))
        let stamps = Mutex([Stamp?](repeating: nil, count: list.count))
        let next = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            var mine: [(Int, Stamp)] = []
            while true {
                let index = next.add(1, ordering: .relaxed).oldValue
                guard index < list.count else { break }
                if let stamp = stamp(list[index], reusing: earlier?.files[list[index]], now: now) { mine.append((index, stamp)) }
            }
            stamps.withLock { stamps in
                for (index, stamp) in mine { stamps[index] = stamp }
            }
        }
        var files: [String: Stamp] = [:]
        files.reserveCapacity(list.count)
        stamps.withLock { stamps in
            for (index, stamp) in stamps.enumerated() {
                if let stamp { files[list[index]] = stamp }
            }
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
        guard let stream = opendir(directory) else { return }
        defer { closedir(stream) }
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        var subdirectories: [String] = []
        while let entry = readdir(stream) {
            let (name, type) = withUnsafeBytes(of: &entry.pointee.d_name) { raw in
                (String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self), entry.pointee.d_type)
            }
            guard !name.hasPrefix("."), !name.isEmpty else { continue }
            let path = prefix + name
            switch Int32(type) {
            case Int32(DT_REG):
                paths.insert(path)
            case Int32(DT_DIR):
                subdirectories.append(path)
            default:
                // A link (mounted secrets) or a file system that does not tell: as stat says.
                var info = stat()
                guard stat(path, &info) == 0 else { continue }
                if info.st_mode & S_IFMT == S_IFDIR {
                    subdirectories.append(path)
                } else if info.st_mode & S_IFMT == S_IFREG {
                    paths.insert(path)
                }
            }
        }
        if depth < 2 {
            for subdirectory in subdirectories { collect(subdirectory, depth: depth + 1, into: &paths) }
        }
    }

    /// Follows symbolic links (mounted secrets are often links to a hidden directory).
    static func stamp(_ path: String, reusing earlier: Stamp? = nil, now: Int64 = wallNanoseconds()) -> Stamp? {
        var info = stat()
        // `stat` follows the links as `realpath` would: a file with the status an earlier stamp
        // saw keeps that stamp, with one call and without resolving each part of its path.
        if let earlier, let seen = earlier.status, stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
            fileStatus(info) == seen
        {
            return earlier
        }
        // To be read: resolved first, so that the status and the contents are of one file even
        // when a link moves between the calls.
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        guard stat(resolved, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let status = fileStatus(info)
        if let earlier, earlier.status == status { return earlier }
        guard let data = FileManager.default.contents(atPath: String(cString: resolved)) else { return nil }
        // A file changed in the last two seconds is hashed again next time, whatever its status.
        let settled = now - status.changed > 2_000_000_000
        return Stamp(
            modified: Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9),
            size: data.count, sha256: Array(SHA256.hash(data: data)), status: settled ? status : nil)
    }

    static func wallNanoseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1e9) }

    private static func fileStatus(_ info: stat) -> FileStatus {
        FileStatus(
            device: UInt64(truncatingIfNeeded: info.st_dev), inode: UInt64(truncatingIfNeeded: info.st_ino),
            size: Int64(info.st_size), modified: nanoseconds(info.st_mtim), changed: nanoseconds(info.st_ctim))
    }

    private static func nanoseconds(_ time: timespec) -> Int64 {
        Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000).partialValue &+ Int64(time.tv_nsec)
    }
}
