import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A plain blocking TCP connection to 127.0.0.1, for tests that must misbehave below HTTP:
/// half-sent heads, bodies that stop, sockets that only sit there.
final class RawSocket: Sendable {
    private let descriptor: Int32

    /// Connects to 127.0.0.1:`port`; reads give up after `readTimeout` seconds.
    init(port: Int, readTimeout: Int = 60) throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw HarnessError("socket() failed") }
        var timeout = timeval(tv_sec: readTimeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw HarnessError("connect() to 127.0.0.1:\(port) failed")
        }
        descriptor = fd
    }

    deinit { close(descriptor) }

    /// Ends the connection from this side (the descriptor stays until deinit).
    func hangUp() {
        #if canImport(Glibc)
        shutdown(descriptor, Int32(SHUT_RDWR))
        #else
        shutdown(descriptor, SHUT_RDWR)
        #endif
    }

    func write(_ text: String) throws {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw HarnessError("send() failed") }
            offset += written
        }
    }

    /// Reads until the server closes the connection; nil when the read timeout passed first.
    /// Returns what arrived before the close.
    func readUntilClosed() -> [UInt8]? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count == 0 { return received }
            if count < 0 { return errno == ECONNRESET ? received : nil }
            received += buffer[0..<count]
        }
    }

    /// Reads what has arrived (waiting for at least one byte); empty when the server closed or
    /// the read timed out.
    func readSome() -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count > 0 ? Array(buffer[0..<count]) : []
    }

    /// ``readSome()`` on a thread of its own.
    func received() async -> [UInt8] {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.readSome()) }.start()
        }
    }

    /// ``readUntilClosed()`` on a thread of its own, so that the wait blocks no task executor.
    func closed() async -> [UInt8]? {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.readUntilClosed()) }.start()
        }
    }
}
