#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A child process (the built `herald`, for the tests that run it), spawned with `posix_spawn`.
///
/// Not Foundation's `Process`: on Linux its `run()` copies each `/proc/self/fd` entry's whole
/// 256-byte `d_name` out of glibc's `readdir` buffer to find the descriptors to close, and
/// crashes now and then when an entry sits at the end of that buffer before an unmapped page (a
/// test process holds many descriptors). Here the child closes every descriptor above 2 with
/// glibc's `posix_spawn_file_actions_addclosefrom_np`, looked up at run time; where glibc lacks
/// it, the open descriptors are read from `/proc/self/fd` by name pointer, never copied whole.
public final class ChildProcess: Sendable {
    public let pid: pid_t
    /// The child leads a process group of its own: ``signal(_:)`` reaches the processes it
    /// forked too.
    public let leadsGroup: Bool
    /// The `waitpid` status once the child has been reaped.
    private let reaped = Mutex<Int32?>(nil)

    private init(pid: pid_t, leadsGroup: Bool) {
        self.pid = pid
        self.leadsGroup = leadsGroup
    }

    /// Where a child's standard output or error goes.
    public enum Output: Sendable {
        /// This descriptor (a file the caller opened), duplicated onto the child's.
        case descriptor(Int32)
        /// `/dev/null`.
        case discard
    }

    /// Spawns `executable` with `arguments` (the program's name is added as `argv[0]`) and
    /// exactly `environment`, in `directory` when given; `ownGroup`: in a process group of its
    /// own (a daemon that forks workers, all stopped together).
    public static func spawn(
        _ executable: String, arguments: [String], environment: [String: String], directory: String? = nil,
        standardOutput: Output = .discard, standardError: Output = .discard, ownGroup: Bool = false
    ) throws -> ChildProcess {
        var attributes = posix_spawnattr_t()
        try check(posix_spawnattr_init(&attributes), "posix_spawnattr_init")
        defer { posix_spawnattr_destroy(&attributes) }
        if ownGroup {
            try check(posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP)), "setflags")
            try check(posix_spawnattr_setpgroup(&attributes, 0), "setpgroup")
        }
        var actions = posix_spawn_file_actions_t()
        try check(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init")
        defer { posix_spawn_file_actions_destroy(&actions) }

        try check(posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0), "stdin")
        for (target, output) in [(Int32(1), standardOutput), (Int32(2), standardError)] {
            switch output {
            case .descriptor(let fd): try check(posix_spawn_file_actions_adddup2(&actions, fd, target), "dup2")
            case .discard: try check(posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0), "/dev/null")
            }
        }
        if let directory {
            guard let chdir = SpawnExtensions.addChdir else { throw ChildProcessError("posix_spawn cannot change directory here") }
            try check(directory.withCString { chdir(&actions, $0) }, "chdir \(directory)")
        }
        if let closeFrom = SpawnExtensions.addCloseFrom {
            try check(closeFrom(&actions, 3), "closefrom")
        } else {
            for fd in openDescriptors() where fd > 2 {
                try check(posix_spawn_file_actions_addclose(&actions, fd), "close \(fd)")
            }
        }

        let argv = CStrings([executable] + arguments)
        let envp = CStrings(environment.map { "\($0.key)=\($0.value)" })
        var pid: pid_t = 0
        let spawned = argv.withPointers { argvPointers in
            envp.withPointers { envPointers in
                posix_spawn(&pid, executable, &actions, &attributes, argvPointers, envPointers)
            }
        }
        try check(spawned, "posix_spawn \(executable)")
        return ChildProcess(pid: pid, leadsGroup: ownGroup)
    }

    /// True until the child has exited (it is reaped then).
    public var isRunning: Bool {
        reaped.withLock { status in
            guard status == nil else { return false }
            var value: Int32 = 0
            let result = waitpid(pid, &value, WNOHANG)
            if result == pid { status = value }
            return result == 0
        }
    }

    /// Sends `signal` (SIGTERM by default) unless the child has been reaped; to its whole
    /// group when it leads one.
    public func signal(_ signal: Int32 = SIGTERM) {
        reaped.withLock { status in
            if status == nil { _ = kill(leadsGroup ? -pid : pid, signal) }
        }
    }

    /// Blocks until the child exits; its exit status (or 128 + the signal that ended it).
    @discardableResult
    public func waitUntilExit() -> Int32 {
        while true {
            if let status = reaped.withLock({ $0 }) { return Self.exitStatus(status) }
            var value: Int32 = 0
            let result = waitpid(pid, &value, 0)
            if result == pid {
                reaped.withLock { status in if status == nil { status = value } }
            } else if result == -1, errno != EINTR {
                // Reaped meanwhile by ``isRunning`` on another thread.
                return reaped.withLock { Self.exitStatus($0 ?? 0) }
            }
        }
    }

    /// Waits without blocking a thread until the child exits; its exit status (or 128 + the
    /// signal that ended it).
    public func exit() async -> Int32 {
        while isRunning {
            try? await Task.sleep(for: .milliseconds(10))
        }
        return reaped.withLock { Self.exitStatus($0 ?? 0) }
    }

    private static func exitStatus(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    private static func check(_ result: Int32, _ what: String) throws {
        guard result == 0 else { throw ChildProcessError("\(what): \(String(cString: strerror(result)))") }
    }

    /// The descriptors open in this process, from `/proc/self/fd` (each entry's name read
    /// through its pointer, up to its terminating NUL).
    private static func openDescriptors() -> [Int32] {
        guard let directory = opendir("/proc/self/fd") else { return Array(3..<1024) }
        defer { closedir(directory) }
        var descriptors: [Int32] = []
        let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name) ?? 19
        while let entry = readdir(directory) {
            let name = String(cString: (UnsafeRawPointer(entry) + nameOffset).assumingMemoryBound(to: CChar.self))
            if let fd = Int32(name), fd != dirfd(directory) { descriptors.append(fd) }
        }
        return descriptors
    }
}

public struct ChildProcessError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// glibc's spawn extensions, which Swift's Glibc module does not declare.
private enum SpawnExtensions {
    typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    typealias Chdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    static let addCloseFrom: CloseFrom? = symbol("posix_spawn_file_actions_addclosefrom_np")
    static let addChdir: Chdir? = symbol("posix_spawn_file_actions_addchdir_np")

    private static func symbol<T>(_ name: String) -> T? {
        guard let handle = dlopen(nil, RTLD_NOW), let address = dlsym(handle, name) else { return nil }
        return unsafeBitCast(address, to: T.self)
    }
}

/// NUL-terminated copies of strings, freed when this goes away, and the NULL-ended array of
/// pointers to them that `posix_spawn` takes.
private final class CStrings {
    private let pointers: [UnsafeMutablePointer<CChar>?]

    init(_ strings: [String]) {
        pointers = strings.map { strdup($0) } + [nil]
    }

    func withPointers<R>(_ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    deinit {
        for pointer in pointers { free(pointer) }
    }
}
