import Foundation
import HeraldCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A faithful local APNs: HTTP/2 over TLS 1.2+ (ALPN `h2`), provider tokens and client
/// certificates, every status and reason of Apple's table, stream limits, GOAWAY, fault
/// injection, and a record of everything it received.
///
/// ```swift
/// let sandbox = try await APNsSandbox.start(configuration)
/// // point a client at https://127.0.0.1:\(sandbox.port), trusting sandbox.trustRootsPEM
/// let answered = sandbox.requests.filter(\.processed)
/// try await sandbox.shutdown()
/// ```
public final class APNsSandbox: Sendable {
    private let serverChannel: any Channel
    private let channelsServerChannel: any Channel
    private let core: SandboxCore
    private let flushTask: Mutex<RepeatedTask?>
    private let isShutDown = Atomic<Bool>(false)
    /// An event loop group the sandbox made for itself (and shuts down with itself).
    private let ownedGroup: Mutex<MultiThreadedEventLoopGroup?> = Mutex(nil)

    /// The port the sandbox listens on (the one picked when the configuration said 0).
    public let port: Int
    /// The port of its channel management service (broadcast channels).
    public let channelsPort: Int
    /// The host the sandbox listens on.
    public let host: String
    /// The CA certificate (PEM) that signed the server certificate: what clients trust.
    public let trustRootsPEM: String

    private init(
        serverChannel: any Channel, channelsServerChannel: any Channel, core: SandboxCore, port: Int, channelsPort: Int,
        host: String, trustRootsPEM: String
    ) {
        self.serverChannel = serverChannel
        self.channelsServerChannel = channelsServerChannel
        self.core = core
        self.port = port
        self.channelsPort = channelsPort
        self.host = host
        self.trustRootsPEM = trustRootsPEM
        self.flushTask = Mutex(nil)
    }

    /// Starts a sandbox: issues its server certificate from the configured CA and binds.
    public static func start(
        _ configuration: SandboxConfiguration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "herald.sandbox")
    ) async throws -> APNsSandbox {
        let ca = configuration.certificateAuthority
        let server = try ca.issueServerCertificate()
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(server.certificatePEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(server.privateKeyPEM.utf8), format: .pem))
        )
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        tls.certificateVerification = .optionalVerification
        tls.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(ca.certificatePEM.utf8), format: .pem)])
        let sslContext = try NIOSSLContext(configuration: tls)

        let recorder = try SandboxRecorder(
            keepInMemory: configuration.recordInMemory, maximumKept: configuration.maximumRecordedRequests,
            file: configuration.recordFile)
        var channelsFile: URL? = nil
        if let directory = configuration.stateDirectory {
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            } catch {
                throw SandboxError.startup("cannot make the state directory \(directory.path): \(error)")
            }
            channelsFile = directory.appendingPathComponent("channels.json")
        }
        let channels = try SandboxChannels(limit: configuration.channelsPerApp, file: channelsFile, logger: logger)
        let core = SandboxCore(configuration: configuration, recorder: recorder, channels: channels, logger: logger)

        func listen(port: Int, service: SandboxService) async throws -> (any Channel, Int) {
            let channel: any Channel
            do {
                channel = try await ServerBootstrap(group: eventLoopGroup)
                    .serverChannelOption(.backlog, value: 256)
                    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                    .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                    .childChannelOption(.maxMessagesPerRead, value: 1)
                    .childChannelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            let pipeline = channel.pipeline.syncOperations
                            try pipeline.addHandler(NIOSSLServerHandler(context: sslContext))
                            try pipeline.addHandler(SandboxHandshakeHandler(core: core, service: service))
                        }
                    }
                    .bind(host: configuration.host, port: port)
                    .get()
            } catch {
                throw SandboxError.startup("cannot listen on \(configuration.host):\(port): \(error)")
            }
            guard let bound = channel.localAddress?.port else {
                try? await channel.close()
                throw SandboxError.startup("the listening socket has no port")
            }
            return (channel, bound)
        }
        let (channel, port) = try await listen(port: configuration.port, service: .devices)
        let channelsChannel: any Channel
        let channelsPort: Int
        do {
            (channelsChannel, channelsPort) = try await listen(port: configuration.channelsPort, service: .channels)
        } catch {
            try? await channel.close()
            throw error
        }
        let sandbox = APNsSandbox(
            serverChannel: channel, channelsServerChannel: channelsChannel, core: core, port: port,
            channelsPort: channelsPort, host: configuration.host, trustRootsPEM: ca.certificatePEM)
        if configuration.recordFile != nil {
            let task = channel.eventLoop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in
                recorder.flush()
            }
            sandbox.flushTask.withLock { $0 = task }
        }
        logger.info(
            "sandbox listening",
            metadata: [
                "herald.host": "\(configuration.host)", "herald.port": "\(port)", "herald.channels-port": "\(channelsPort)",
            ])
        return sandbox
    }

    /// Starts a sandbox on its own event loop group of `threads` threads, shut down with it.
    public static func start(
        _ configuration: SandboxConfiguration, threads: Int,
        logger: Logger = Logger(label: "herald.sandbox")
    ) async throws -> APNsSandbox {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, threads))
        do {
            let sandbox = try await start(configuration, eventLoopGroup: group, logger: logger)
            sandbox.ownedGroup.withLock { $0 = group }
            return sandbox
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    // MARK: What it saw

    /// Every request received, in order of arrival (up to ``SandboxConfiguration/maximumRecordedRequests``).
    public var requests: [SandboxRecordedRequest] { core.recorder.requests }

    /// The client's wire behaviour: PRIORITY frames, streams above the limit, HPACK encoding.
    public var audit: SandboxAudit { core.recorder.audit }

    /// Running totals (requests, answers by status and reason, GOAWAYs, drops, token checks).
    public var counters: SandboxCounters {
        var counters = core.recorder.counters
        counters.tokenVerifications = core.verifier.verificationCount
        return counters
    }

    /// Connections accepted since start (TLS handshake and ALPN `h2` done).
    public var connectionCount: Int { core.totalConnectionCount }

    /// Connections open now.
    public var activeConnections: Int { core.activeConnectionCount }

    /// Every channel of `bundleID` the channel management service holds, oldest first.
    public func channels(bundleID: String) -> [SandboxChannel] { core.channels.list(bundleID: bundleID) }

    /// Makes a channel as a provider's creation call would (for tests of channels made outside
    /// Herald); nil when the app is at its channel limit.
    @discardableResult
    public func createChannel(bundleID: String, storagePolicy: ChannelStoragePolicy) -> SandboxChannel? {
        core.channels.create(bundleID: bundleID, storagePolicy: storagePolicy.rawValue, now: core.clock.now)
    }

    /// Deletes a channel as a provider's deletion call would (for tests of channels deleted
    /// outside Herald); false when there was none.
    @discardableResult
    public func deleteChannel(bundleID: String, id: String) -> Bool {
        core.channels.delete(bundleID: bundleID, id: id)
    }

    /// Forgets the record, counters and audit (not the connections).
    public func resetRecord() { core.recorder.reset() }

    // MARK: Control

    /// Changes the fault injection for every connection (new and open ones).
    public func setFaults(_ faults: SandboxFaults) { core.setFaults(faults) }

    /// The current fault injection.
    public var faults: SandboxFaults { core.faults }

    /// Changes SETTINGS_MAX_CONCURRENT_STREAMS: open connections get a new SETTINGS frame at once
    /// (token connections only once they have shown a valid token).
    public func setMaxConcurrentStreams(_ n: Int) {
        core.setMaxConcurrentStreams(n)
        let limit = core.maxConcurrentStreams
        for ref in core.openConnections {
            let handler = ref.handler
            ref.channel.eventLoop.execute { handler.value.maxConcurrentStreamsChanged(limit) }
        }
    }

    /// Sends GOAWAY with `{"reason": …}` on every open connection: streams already opened are
    /// answered, later ones refused, then each connection closes.
    public func sendGoAwayToAll(reason: APNsReason = .shutdown) {
        for ref in core.openConnections {
            let handler = ref.handler
            ref.channel.eventLoop.execute { handler.value.goAwayForShutdown(reason: reason) }
        }
    }

    /// Stops listening, closes every connection and flushes the record file.
    public func shutdown() async throws {
        guard !isShutDown.exchange(true, ordering: .relaxed) else { return }
        flushTask.withLock { $0?.cancel() }
        try? await serverChannel.close()
        try? await channelsServerChannel.close()
        for ref in core.openConnections {
            try? await ref.channel.close()
        }
        core.recorder.close()
        if let group = ownedGroup.withLock({ $0 }) {
            try await group.shutdownGracefully()
        }
    }
}
