#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A real outbound proxy from Debian's packages, started by a test on a free loopback port:
/// `tinyproxy` (HTTP CONNECT, optionally with Basic authentication or limited to some ports)
/// or `danted` (dante-server, SOCKS5 without authentication). Its log tells which tunnels it
/// opened.
public final class LocalProxy: Sendable {
    public let port: Int
    public let logFile: String
    private let process: ChildProcess
    private let directory: String

    private init(port: Int, logFile: String, process: ChildProcess, directory: String) {
        self.port = port
        self.logFile = logFile
        self.process = process
        self.directory = directory
    }

    public static let tinyproxyPath = executable(["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"])
    public static let dantePath = executable(["/usr/sbin/danted", "/usr/bin/danted"])

    /// True where a test that needs a proxy must run even if the binary is missing (CI installs
    /// both): it then fails, it does not skip.
    public static var required: Bool { ProcessInfo.processInfo.environment["CI"] != nil }

    /// tinyproxy: CONNECT to any port unless `connectPorts` limits them (others get 403), with
    /// Basic authentication when `credentials` are given (others get 407).
    /// `port`: this one (a proxy started again where the last one was) rather than a free one.
    public static func tinyproxy(
        credentials: (user: String, password: String)? = nil, connectPorts: [Int] = [], port chosen: Int? = nil
    ) throws -> LocalProxy {
        guard let binary = tinyproxyPath else { throw LocalProxyError("tinyproxy is not installed (apt-get install tinyproxy)") }
        return try onAFreePort(chosen) { port in
            let directory = try temporaryDirectory("tinyproxy")
            var lines = [
                "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "LogFile \"\(directory)/proxy.log\"", "LogLevel Connect",
                "PidFile \"\(directory)/proxy.pid\"", "MaxClients 64", "Allow 127.0.0.1",
            ]
            lines += connectPorts.map { "ConnectPort \($0)" }
            if let credentials { lines.append("BasicAuth \(credentials.user) \(credentials.password)") }
            try (lines.joined(separator: "\n") + "\n").write(toFile: directory + "/proxy.conf", atomically: true, encoding: .utf8)
            let process = try ChildProcess.spawn(
                binary, arguments: ["-d", "-c", directory + "/proxy.conf"], environment: [:],
                standardOutput: .discard, standardError: .discard, ownGroup: true)
            return try started(port: port, logFile: directory + "/proxy.log", process: process, directory: directory)
        }
    }

    /// danted: SOCKS5 without authentication, from and to loopback.
    public static func dante() throws -> LocalProxy {
        guard let binary = dantePath else { throw LocalProxyError("danted is not installed (apt-get install dante-server)") }
        return try onAFreePort(nil) { port in
            let directory = try temporaryDirectory("dante")
            let unprivileged = getuid() == 0 ? "user.privileged: root\nuser.unprivileged: nobody\n" : ""
            let config = """
                logoutput: \(directory)/proxy.log
                internal: 127.0.0.1 port = \(port)
                external: 127.0.0.1
                socksmethod: none
                clientmethod: none
                \(unprivileged)client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
                socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect error }

                """
            try config.write(toFile: directory + "/proxy.conf", atomically: true, encoding: .utf8)
            let process = try ChildProcess.spawn(
                binary, arguments: ["-f", directory + "/proxy.conf", "-p", directory + "/proxy.pid"], environment: [:],
                standardOutput: .discard, standardError: .discard, ownGroup: true)
            return try started(port: port, logFile: directory + "/proxy.log", process: process, directory: directory)
        }
    }

    /// Starts a proxy on `chosen`, or on a free port. A free port is only free when it is
    /// picked: another test's listener may take it before the proxy binds it, and the proxy
    /// then exits at start. On a port of its own pick it tries again on another, three times.
    private static func onAFreePort(_ chosen: Int?, _ start: (Int) throws -> LocalProxy) throws -> LocalProxy {
        if let chosen { return try start(chosen) }
        var attempt = 1
        while true {
            do {
                return try start(try freePort())
            } catch let error as LocalProxyError where error.exitedAtStart && attempt < 3 {
                attempt += 1
            }
        }
    }

    /// The proxy's log so far.
    public var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    /// Stops the proxy at once (its tunnels drop; tinyproxy in the foreground does not end on
    /// SIGTERM) and removes its directory.
    public func stop() {
        process.signal(SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func started(port: Int, logFile: String, process: ChildProcess, directory: String) throws -> LocalProxy {
        let proxy = LocalProxy(port: port, logFile: logFile, process: process, directory: directory)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if accepts(port: port) { return proxy }
            guard process.isRunning else {
                let log = proxy.log
                proxy.stop()
                throw LocalProxyError("the proxy exited at start: \(log)", exitedAtStart: true)
            }
            usleep(20_000)
        }
        proxy.stop()
        throw LocalProxyError("the proxy did not listen on 127.0.0.1:\(port)")
    }

    private static func executable(_ candidates: [String]) -> String? {
        candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    private static func temporaryDirectory(_ name: String) throws -> String {
        let path = NSTemporaryDirectory() + "herald-\(name)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A loopback port nothing listens on now (the kernel's pick).
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LocalProxyError("socket: \(errno)") }
        defer { close(fd) }
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw LocalProxyError("bind: \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw LocalProxyError("getsockname: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A port of 127.0.0.1 that refuses every connection while the value lives: a socket bound to
    /// it and never listening, so that no other listener (another test's server) can take it.
    public final class ClosedPort: Sendable {
        public let port: Int
        private let descriptor: Int32

        public init() throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw LocalProxyError("socket: \(errno)") }
            var address = LocalProxy.loopback(port: 0)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            guard bound == 0, named == 0 else {
                close(fd)
                throw LocalProxyError("bind or getsockname: \(errno)")
            }
            descriptor = fd
            port = Int(UInt16(bigEndian: address.sin_port))
        }

        deinit { close(descriptor) }
    }

    private static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    fileprivate static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }
}

public struct LocalProxyError: Error, CustomStringConvertible {
    public var description: String
    /// The proxy ended before it listened (its port may have been taken).
    public var exitedAtStart = false
    init(_ description: String, exitedAtStart: Bool = false) {
        self.description = description
        self.exitedAtStart = exitedAtStart
    }
}
