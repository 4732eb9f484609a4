import AsyncHTTPClient
import Foundation
import HeraldCore
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Posts plugin webhooks (http and https) with AsyncHTTPClient, as a hostile receiver cannot
/// turn them against the network Herald runs in:
///
/// - redirects are not followed: a 3xx answer is returned as it is (a refusal, not retried);
/// - unless the request allows it (`webhook_allow_private_addresses` in the tenant file), a
///   host that resolves to a loopback, link-local, private, unspecified or multicast address is
///   refused before any connection. The resolved address is checked, and the connection goes
///   to that very address (TLS still verifies the URL's host name), so a DNS answer that
///   changes between the check and the connection cannot slip past it.
///
/// With a ``proxy`` (`webhooks.proxy` in `config/herald.yaml`) the posts leave through it: HTTP
/// (an `https` target in a `CONNECT` tunnel) or SOCKS5. The target's address is still checked
/// as above before anything is sent; the proxy then reaches the target by its name.
public final class HTTPWebhookSender: WebhookSender {
    /// The sender `RouterConfiguration` uses by default.
    public static let shared = HTTPWebhookSender()

    /// The most of an answer's body read (then dropped): receivers cannot make Herald buffer more.
    static let maxAnswerBytes = 64 * 1024

    /// The outbound proxy of every post; nil: directly.
    public let proxy: EgressProxy?

    public init(proxy: EgressProxy? = nil) {
        self.proxy = proxy
    }

    public func post(_ request: WebhookRequest) async throws -> Int {
        guard let url = URL(string: request.url), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            var host = url.host, !host.isEmpty
        else {
            throw WebhookError("the webhook URL is not an http:// or https:// URL", retryable: false)
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = url.port ?? (scheme == "https" ? 443 : 80)
        let address = try await WebhookAddressPolicy.resolve(host: host, port: port, allowPrivate: request.allowPrivateAddresses)

        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        if let proxy, proxy.applies(to: host) {
            configuration.proxy = Self.clientProxy(proxy)
        } else {
            // Connect to the address that was checked, not to whatever the name resolves to next.
            configuration.dnsOverride = [host: address]
        }
        let timeout = TimeAmount.nanoseconds(max(100_000_000, Self.nanoseconds(request.timeout)))
        configuration.timeout = HTTPClient.Configuration.Timeout(connect: timeout, read: timeout)
        configuration.connectionPool = HTTPClient.Configuration.ConnectionPool(idleTimeout: .seconds(1))
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        do {
            var outgoing = HTTPClientRequest(url: request.url)
            outgoing.method = .POST
            for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
            outgoing.body = .bytes(ByteBuffer(bytes: request.body))
            let response = try await client.execute(outgoing, timeout: timeout)
            _ = try? await response.body.collect(upTo: Self.maxAnswerBytes)
            try? await client.shutdown()
            return Int(response.status.code)
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// AsyncHTTPClient's form of the proxy.
    static func clientProxy(_ proxy: EgressProxy) -> HTTPClient.Configuration.Proxy {
        switch proxy.scheme {
        case .http:
            guard let user = proxy.username, let password = proxy.password else {
                return .server(host: proxy.host, port: proxy.port)
            }
            return .server(host: proxy.host, port: proxy.port, authorization: .basic(username: user, password: password.text))
        case .socks5:
            return .socksServer(host: proxy.host, port: proxy.port)
        }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let parts = duration.components
        let (seconds, overflow) = parts.seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? Int64.max : seconds + parts.attoseconds / 1_000_000_000
    }
}

/// A webhook that could not be posted.
public struct WebhookError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    /// False when trying again cannot help (a refused address, a bad URL).
    public var retryable: Bool

    public init(_ message: String, retryable: Bool = true) {
        self.message = message
        self.retryable = retryable
    }

    public var description: String { message }
}

/// Which addresses a webhook may reach.
public enum WebhookAddressPolicy {
    /// Why `address` (4 or 16 bytes) is refused without the tenant's allowance, or nil.
    public static func restriction(of address: [UInt8]) -> String? {
        if address.count == 16 {
            // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible forms are judged as IPv4.
            if address[0..<10].allSatisfy({ $0 == 0 }), address[10] == 0xff, address[11] == 0xff {
                return restriction(of: Array(address[12..<16]))
            }
            if address[0..<15].allSatisfy({ $0 == 0 }) {
                return address[15] == 1 ? "loopback" : (address[15] == 0 ? "unspecified" : "reserved")
            }
            if address[0] == 0xfe, address[1] & 0xc0 == 0x80 { return "link-local" }
            if address[0] & 0xfe == 0xfc { return "private (unique local)" }
            if address[0] == 0xff { return "multicast" }
            if address[0] == 0xfe, address[1] & 0xc0 == 0xc0 { return "private (site-local)" }
            // NAT64 of a restricted IPv4 address (64:ff9b::/96).
            if address[0] == 0x00, address[1] == 0x64, address[2] == 0xff, address[3] == 0x9b,
                address[4..<12].allSatisfy({ $0 == 0 })
            {
                return restriction(of: Array(address[12..<16]))
            }
            return nil
        }
        guard address.count == 4 else { return "not an IP address" }
        switch (address[0], address[1]) {
        case (0, _): return "unspecified"
        case (10, _): return "private"
        case (127, _): return "loopback"
        case (169, 254): return "link-local"
        case (172, 16...31): return "private"
        case (192, 168): return "private"
        case (100, 64...127): return "private (carrier-grade NAT)"
        case (224...239, _): return "multicast"
        case (240...255, _): return "reserved"
        default: return nil
        }
    }

    /// Resolves `host` and returns the address to connect to: the first one, once every address
    /// the name resolves to passed the check (one bad address refuses the name).
    /// - Throws: ``WebhookError`` (not retryable) for a refused address; a retryable one when
    ///   the name does not resolve.
    static func resolve(host: String, port: Int, allowPrivate: Bool) async throws -> String {
        let addresses = try await NIOThreadPool.singleton.runIfActive { try lookup(host) }
        guard let first = addresses.first else {
            throw WebhookError("the webhook host \(host) did not resolve")
        }
        if !allowPrivate {
            for (bytes, text) in addresses {
                if let reason = restriction(of: bytes) {
                    throw WebhookError(
                        "the webhook host \(host) resolves to \(text), a \(reason) address; the tenant file must allow it "
                            + "(webhook_allow_private_addresses: true)", retryable: false)
                }
            }
        }
        return first.1
    }

    /// getaddrinfo: every address of the name (or the literal itself), as bytes and text.
    private static func lookup(_ host: String) throws -> [([UInt8], String)] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
            hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let list else {
            throw WebhookError("the webhook host \(host) did not resolve (\(String(cString: gai_strerror(status))))")
        }
        defer { freeaddrinfo(list) }
        var results: [([UInt8], String)] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ai_next }
            guard let socketAddress = entry.pointee.ai_addr else { continue }
            var bytes: [UInt8]
            switch entry.pointee.ai_family {
            case AF_INET:
                bytes = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                    withUnsafeBytes(of: pointer.pointee.sin_addr) { Array($0) }
                }
            case AF_INET6:
                bytes = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                    withUnsafeBytes(of: pointer.pointee.sin6_addr) { Array($0) }
                }
            default: continue
            }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            let family = entry.pointee.ai_family
            let converted = bytes.withUnsafeBytes { raw in
                inet_ntop(family, raw.baseAddress, &text, socklen_t(text.count)) != nil
            }
            guard converted else { continue }
            results.append((bytes, String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)))
        }
        return results
    }
}
