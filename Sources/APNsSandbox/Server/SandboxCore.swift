import Foundation
import HeraldCore
import Logging
import NIOCore
import Synchronization

/// The state all connections of one sandbox share. Hot paths read atomics; the rest is guarded.
final class SandboxCore: Sendable {
    let tokenLifetime: TimeInterval
    let tokenUpdateMinimumInterval: TimeInterval
    let tokenUpdateScope: SandboxTokenUpdateScope
    let dropStreamLimitAfterRejection: Bool
    let deviceRequestsPerSecond: Int?
    let clock: any WallClock
    let recordPayloads: Bool
    /// The environment it stands for (development answers carry `apns-unique-id`).
    let environment: APNsEnvironment
    let maximumHeaderListSize: Int
    let verifier: SandboxTokenVerifier
    /// The allowed topics, team ID and key ID of each token key, by the verifier's key index.
    let keyTopics: [Set<String>]
    let teamIDs: [String]
    let keyIDs: [String]
    /// The environment each key is restricted to (nil: both), by key index.
    let keyEnvironments: [APNsEnvironment?]
    let devices: [String: SandboxDevice.State]
    let recorder: SandboxRecorder
    let logger: Logger
    /// The channel management service's channels.
    let channels: SandboxChannels
    /// Bundle IDs whose broadcasts and channel calls are `FeatureNotEnabled`.
    let broadcastDisabledTopics: Set<String>

    private let maxStreams: Atomic<Int>
    private let faultsState: Mutex<SandboxFaults>
    private let faultsVersionCounter = Atomic<Int>(0)
    private let keyTracker = Mutex(TokenUpdateTracker())
    private let strictTracker = Mutex(StrictTokenTracker())
    private let deviceRates = Mutex<[String: (second: Int64, count: Int)]>([:])
    private let connections = Mutex<[Int: ConnectionRef]>([:])
    private let connectionCounter = Atomic<Int>(0)
    /// Answers on all connections, for faults counted in the sandbox scope.
    private let answerCounter = Atomic<Int>(0)

    struct ConnectionRef: Sendable {
        let channel: any Channel
        let handler: NIOLoopBound<SandboxConnectionHandler>
    }

    init(configuration: SandboxConfiguration, recorder: SandboxRecorder, channels: SandboxChannels, logger: Logger) {
        self.channels = channels
        self.broadcastDisabledTopics = configuration.broadcastDisabledTopics
        self.tokenLifetime = configuration.tokenLifetime
        self.tokenUpdateMinimumInterval = configuration.tokenUpdateMinimumInterval
        self.tokenUpdateScope = configuration.tokenUpdateScope
        self.dropStreamLimitAfterRejection = configuration.dropStreamLimitAfterRejection
        self.deviceRequestsPerSecond = configuration.deviceRequestsPerSecond
        self.clock = configuration.clock
        self.recordPayloads = configuration.recordPayloads
        self.environment = configuration.environment
        self.maximumHeaderListSize = configuration.maximumHeaderListSize
        self.verifier = SandboxTokenVerifier(keys: configuration.tokenKeys)
        self.keyTopics = configuration.tokenKeys.map { Set($0.topics) }
        self.teamIDs = configuration.tokenKeys.map(\.teamID)
        self.keyIDs = configuration.tokenKeys.map(\.keyID)
        self.keyEnvironments = configuration.tokenKeys.map(\.environment)
        var devices: [String: SandboxDevice.State] = [:]
        for device in configuration.devices { devices[device.token] = device.state }
        self.devices = devices
        self.recorder = recorder
        self.logger = logger
        self.maxStreams = Atomic(max(1, configuration.maxConcurrentStreams))
        self.faultsState = Mutex(configuration.faults)
    }

    // MARK: Limits and faults

    var maxConcurrentStreams: Int { maxStreams.load(ordering: .relaxed) }

    func setMaxConcurrentStreams(_ n: Int) {
        maxStreams.store(max(1, n), ordering: .relaxed)
    }

    var faultsVersion: Int { faultsVersionCounter.load(ordering: .acquiring) }

    var faults: SandboxFaults { faultsState.withLock { $0 } }

    func setFaults(_ faults: SandboxFaults) {
        faultsState.withLock { $0 = faults }
        faultsVersionCounter.wrappingAdd(1, ordering: .releasing)
    }

    /// Counts one answer for the sandbox-scoped faults; returns the count so far.
    func countAnswer() -> Int {
        answerCounter.wrappingAdd(1, ordering: .relaxed).newValue
    }

    // MARK: Tokens and devices

    /// Key-scoped token update check (``SandboxTokenUpdateScope/key``).
    func observeTokenForKey(keyIndex: Int, issuedAt: Int64, now: Date) -> Bool {
        keyTracker.withLock {
            $0.observe(keyIndex: keyIndex, issuedAt: issuedAt, now: now, minimumInterval: tokenUpdateMinimumInterval)
        }
    }

    /// Strict token update check (``SandboxTokenUpdateScope/strict``): `jwt` is the whole token.
    func observeTokenStrictly(keyIndex: Int, jwt: Substring, issuedAt: Int64, now: Date) -> Bool {
        strictTracker.withLock {
            $0.observe(
                keyIndex: keyIndex, token: jwt, issuedAt: issuedAt, now: now,
                minimumInterval: tokenUpdateMinimumInterval, lifetime: tokenLifetime)
        }
    }

    /// False when `token` got more than ``SandboxConfiguration/deviceRequestsPerSecond`` requests
    /// in the current second.
    func admitDeviceRequest(_ token: String, now: Date) -> Bool {
        guard let limit = deviceRequestsPerSecond else { return true }
        let second = Int64(now.timeIntervalSince1970.rounded(.down))
        return deviceRates.withLock { rates in
            if rates.count > 100_000 { rates.removeAll(keepingCapacity: true) }
            var entry = rates[token] ?? (second, 0)
            if entry.second != second { entry = (second, 0) }
            entry.count += 1
            rates[token] = entry
            return entry.count <= limit
        }
    }

    // MARK: Connections

    func nextConnectionID() -> Int { connectionCounter.wrappingAdd(1, ordering: .relaxed).newValue }

    func register(_ id: Int, _ ref: ConnectionRef) {
        connections.withLock { $0[id] = ref }
        recorder.connectionOpened()
    }

    func unregister(_ id: Int) {
        _ = connections.withLock { $0.removeValue(forKey: id) }
    }

    var openConnections: [ConnectionRef] { connections.withLock { Array($0.values) } }
    var activeConnectionCount: Int { connections.withLock { $0.count } }
    var totalConnectionCount: Int { connectionCounter.load(ordering: .relaxed) }
}
