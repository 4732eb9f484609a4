import Foundation
import Synchronization

/// Directories a test process makes for itself under the system's temporary directory, removed
/// when the process exits (a kept failure's files are there until then; a process that is killed
/// leaves them behind).
public enum ScratchDirectories {
    private static let made = Mutex<[String]>([])
    private static let registered = Mutex(false)

    /// A new directory `<tmp>/<prefix>-<8 random hex digits>`, made now and removed at exit.
    public static func make(_ prefix: String) throws -> String {
        let path = NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        made.withLock { $0.append(path) }
        let first = registered.withLock { registered -> Bool in
            defer { registered = true }
            return !registered
        }
        if first { atexit { ScratchDirectories.removeAll() } }
        return path
    }

    private static func removeAll() {
        for path in made.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
    }
}
