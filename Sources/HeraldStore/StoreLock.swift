import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An exclusive lock on a store, held for as long as the value lives: `flock` on the file
/// `<database>.lock` beside the database. Two `herald serve` processes on one database would
/// claim and send the same items; the second one refuses to start instead.
///
/// The kernel drops the lock when the process ends, however it ends (kill -9 too), so a stale
/// lock file never blocks a restart. The file holds the holder's pid, for the error message.
/// A server that stops gives it up at once (``release()``), not whenever the last reference to
/// it goes: a server started again in the same process must not find its own old lock.
public final class StoreLock: Sendable {
    /// The lock file's path.
    public let path: String
    /// The locked descriptor; nil once released.
    private let descriptor: Mutex<Int32?>

    /// Takes the lock of the database at `databasePath`, or throws at once if another process
    /// (or another ``StoreLock`` in this one) holds it.
    public init(databasePath: String) throws(StoreError) {
        let path = databasePath + ".lock"
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw StoreError.cannotOpen("cannot open the store's lock file \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = Self.holder(descriptor)
            close(descriptor)
            if code == EWOULDBLOCK {
                throw StoreError.locked(
                    "the store \(databasePath) is in use by another herald process\(holder.map { " (pid \($0))" } ?? "") "
                        + "(lock file \(path)); stop it first, or give this server its own storage_path")
            }
            throw StoreError.cannotOpen("cannot lock \(path): \(String(cString: strerror(code)))")
        }
        let pid = Array("\(getpid())\n".utf8)
        if ftruncate(descriptor, 0) == 0 {
            _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        }
        self.path = path
        self.descriptor = Mutex(descriptor)
    }

    /// Gives the lock up now (again: nothing). The lock is undone before the descriptor is
    /// closed: a process being spawned at that moment holds a copy of the descriptor until its
    /// `exec`, and closing alone would leave the lock held through that copy. The file stays, as
    /// removing it would race with a process that has just opened it.
    public func release() {
        let held = descriptor.withLock { descriptor -> Int32? in
            defer { descriptor = nil }
            return descriptor
        }
        if let held {
            _ = flock(held, LOCK_UN)
            close(held)
        }
    }

    deinit {
        release()
    }

    /// The pid written in the lock file by its holder, if it reads as one.
    private static func holder(_ descriptor: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer.prefix(count), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return Int32(text)
    }
}
