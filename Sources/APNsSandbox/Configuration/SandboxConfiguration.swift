import Crypto
import Foundation
import HeraldCore

/// Everything an ``APNsSandbox`` needs to start: where to listen, which keys and certificates it
/// trusts, which devices it knows, its limits, its faults and where it records.
///
/// ```swift
/// let ca = try SandboxCertificateAuthority.generate()
/// var config = SandboxConfiguration(certificateAuthority: ca)
/// config.tokenKeys = [SandboxTokenKey(teamID: "TEAM000001", keyID: "KEY0000001",
///                                     publicKey: key.publicKey, topics: ["com.acme.app"])]
/// let sandbox = try await APNsSandbox.start(config)
/// ```
public struct SandboxConfiguration: Sendable {
    /// The address to bind. Only loopback makes sense for a sandbox.
    public var host: String = "127.0.0.1"
    /// The port to bind; 0 picks a free one (read it back from ``APNsSandbox/port``).
    public var port: Int = 0
    /// The APNs environment it stands for. In `development` every answer carries an
    /// `apns-unique-id` (Apple's key to its delivery log), as APNs' development servers do.
    public var environment: APNsEnvironment = .development
    /// Signs the server certificate (issued at start for localhost, 127.0.0.1 and ::1) and is
    /// the CA that client certificates must chain to.
    public var certificateAuthority: SandboxCertificateAuthority
    /// The provider token signing keys the sandbox accepts.
    public var tokenKeys: [SandboxTokenKey] = []
    /// SETTINGS_MAX_CONCURRENT_STREAMS once a token connection has shown a valid token, and from
    /// the start on certificate connections.
    public var maxConcurrentStreams: Int = 1000
    /// A key's token may change at most this often (seconds); faster is `TooManyProviderTokenUpdates`.
    public var tokenUpdateMinimumInterval: TimeInterval = 1200
    /// Where token changes are counted: per key across the whole sandbox, or per key per connection.
    public var tokenUpdateScope: SandboxTokenUpdateScope = .key
    /// A token whose `iat` is older than this (seconds) is `ExpiredProviderToken`.
    public var tokenLifetime: TimeInterval = 3600
    /// Reported APNs behaviour: after a rejected request the connection drops back to one
    /// concurrent stream, and returns to ``maxConcurrentStreams`` after the next success.
    public var dropStreamLimitAfterRejection: Bool = false
    /// More than this many requests to one device token within one second is `TooManyRequests`;
    /// nil for no limit.
    public var deviceRequestsPerSecond: Int? = nil
    /// Devices the sandbox knows; any other well-formed token is accepted.
    public var devices: [SandboxDevice] = []
    /// Deterministic fault injection.
    public var faults: SandboxFaults = SandboxFaults()
    /// Wall-clock time, for token ages and 410 timestamps.
    public var clock: any WallClock = SystemWallClock()
    /// Keep every request in memory (``APNsSandbox/requests``).
    public var recordInMemory: Bool = true
    /// At most this many requests are kept in memory; later ones are only counted.
    public var maximumRecordedRequests: Int = 1_000_000
    /// Keep each request's payload bytes in its record (tests); off by default.
    public var recordPayloads: Bool = false
    /// Append each request as one JSON line to this file.
    public var recordFile: URL? = nil
    /// Largest header list (bytes, as HPACK counts them) a request may carry; larger is a
    /// connection error.
    public var maximumHeaderListSize: Int = 16_384
    /// The port of the channel management service (broadcast channels: `/1/apps/…`), on the
    /// same host, with the same CA and authentication; 0 picks a free one (read it back from
    /// ``APNsSandbox/channelsPort``).
    public var channelsPort: Int = 0
    /// The most channels one app may have (APNs: 10,000 per app and environment); one more is
    /// `CannotCreateChannelConfig`.
    public var channelsPerApp: Int = 10_000
    /// Bundle IDs whose broadcast capability is off: their broadcasts and channel calls are
    /// `FeatureNotEnabled`.
    public var broadcastDisabledTopics: Set<String> = []
    /// A directory where the sandbox keeps what must outlive a restart (its channels, in
    /// `channels.json`); nil keeps them in memory only.
    public var stateDirectory: URL? = nil

    public init(certificateAuthority: SandboxCertificateAuthority) {
        self.certificateAuthority = certificateAuthority
    }
}

/// Where ``SandboxConfiguration/tokenUpdateMinimumInterval`` is enforced.
public enum SandboxTokenUpdateScope: String, Sendable, Hashable, Codable {
    /// A key's token may change at most once per interval, whatever connection carries it.
    case key
    /// Counted per connection: a new process (new connection) may bring a new token.
    case connection
    /// Per key across all connections, and any token other than one already accepted for the key
    /// counts as an update: an older `iat` not seen before, or the same `iat` signed again (a
    /// second instance that signed its own token in the same second). What a fleet of gateways
    /// sharing one provider token must pass.
    case strict
}

/// A provider token signing key (an Apple `.p8` key's public half) and the topics it may push to.
public struct SandboxTokenKey: Sendable {
    public var teamID: String
    public var keyID: String
    public var publicKey: P256.Signing.PublicKey
    /// Topics (bundle IDs, with their push-type suffixes) this team may push to.
    public var topics: [String]
    /// The environment Apple restricted the key to; a token it signed sent to the other
    /// environment's sandbox is 403 `BadEnvironmentKeyInToken`. Nil: both.
    public var environment: APNsEnvironment?

    public init(
        teamID: String, keyID: String, publicKey: P256.Signing.PublicKey, topics: [String], environment: APNsEnvironment? = nil
    ) {
        self.teamID = teamID
        self.keyID = keyID
        self.publicKey = publicKey
        self.topics = topics
        self.environment = environment
    }
}

/// A device the sandbox knows about.
public struct SandboxDevice: Sendable, Hashable {
    public enum State: Sendable, Hashable {
        /// Unregistered since `since`: requests get 410 `Unregistered` with this timestamp.
        case unregistered(since: Date)
        /// Expired since `since` (a Live Activity's push token after the activity ended):
        /// requests get 410 `ExpiredToken` with this timestamp.
        case expired(since: Date)
        /// Registered for this topic only; other topics get `DeviceTokenNotForTopic`.
        case boundToTopic(String)
    }

    /// The lowercase hex device token.
    public var token: String
    public var state: State

    public init(token: String, state: State) {
        self.token = token.lowercased()
        self.state = state
    }

    public static func unregistered(_ token: String, since: Date) -> SandboxDevice {
        SandboxDevice(token: token, state: .unregistered(since: since))
    }

    public static func expired(_ token: String, since: Date) -> SandboxDevice {
        SandboxDevice(token: token, state: .expired(since: since))
    }

    public static func bound(_ token: String, topic: String) -> SandboxDevice {
        SandboxDevice(token: token, state: .boundToTopic(topic))
    }
}

/// Deterministic fault injection. With the same seed and the same requests on a connection,
/// the same requests fail.
public struct SandboxFaults: Sendable, Hashable {
    /// Seeds the per-connection random generator (mixed with the connection's number).
    public var seed: UInt64 = 0
    /// Fraction (0...1) of otherwise successful requests answered 500 `InternalServerError`.
    public var fraction500: Double = 0
    /// Fraction (0...1) of otherwise successful requests answered 503 `ServiceUnavailable`.
    public var fraction503: Double = 0
    /// Added before every response (seconds).
    public var addedLatency: TimeInterval = 0
    /// After this many answered requests on a connection, send GOAWAY (with
    /// ``goawayReason`` as JSON) naming the last answered stream, refuse later streams and
    /// close once the rest are answered.
    public var goawayAfter: Int? = nil
    /// The reason in the GOAWAY sent by ``goawayAfter``.
    public var goawayReason: APNsReason = .shutdown
    /// After this many answered requests on a connection, close it abruptly (no GOAWAY):
    /// requests still in flight are never answered.
    public var dropAfter: Int? = nil
    /// Windows of wall-clock time in which every request is answered 503 `ServiceUnavailable`
    /// (an APNs outage), whatever it holds.
    public var outages: [SandboxOutage] = []
    /// What ``goawayAfter`` and ``dropAfter`` count: each connection's answers (the default), or
    /// the sandbox's answers on all its connections together, the fault firing at every multiple
    /// (GOAWAY after every `goawayAfter`-th answer, a drop after every `dropAfter`-th, on the
    /// connection that gave it; a drop wins when both fall on one answer). The sandbox scope
    /// lets one long run meet both faults in turn, which per-connection counts cannot (a
    /// connection ended by the first never reaches the second).
    public var scope: SandboxFaultScope = .connection
    /// With every 429 and 503 answer, a `retry-after` header of this many seconds. Apple documents
    /// none; HTTP servers in front of an endpoint send one: for testing a provider's handling.
    public var retryAfter: Int? = nil
    /// The apns-id (or apns-request-id) every answer carries. APNs echoes the request's; the
    /// other forms are for testing how a provider reads an answer it cannot trust.
    public var answeredID: SandboxAnsweredID = .echo

    public init(
        seed: UInt64 = 0, fraction500: Double = 0, fraction503: Double = 0, addedLatency: TimeInterval = 0,
        goawayAfter: Int? = nil, goawayReason: APNsReason = .shutdown, dropAfter: Int? = nil,
        outages: [SandboxOutage] = [], scope: SandboxFaultScope = .connection, retryAfter: Int? = nil,
        answeredID: SandboxAnsweredID = .echo
    ) {
        self.seed = seed
        self.fraction500 = fraction500
        self.fraction503 = fraction503
        self.addedLatency = addedLatency
        self.goawayAfter = goawayAfter
        self.goawayReason = goawayReason
        self.dropAfter = dropAfter
        self.outages = outages
        self.scope = scope
        self.retryAfter = retryAfter
        self.answeredID = answeredID
    }

    /// No faults at all.
    public static let none = SandboxFaults()

    /// The answer every request gets at `now` because of an outage window, or nil.
    public func outageReason(at now: Date) -> APNsReason? {
        for outage in outages where outage.contains(now) { return .serviceUnavailable }
        return nil
    }
}

/// The apns-id an answer carries (``SandboxFaults/answeredID``).
public enum SandboxAnsweredID: String, Sendable, Hashable, CaseIterable {
    /// The request's, or a new one when it sent none (what APNs does).
    case echo
    /// The request's in upper case (the same UUID).
    case uppercase
    /// A new UUID, not the request's.
    case other
    /// Text that is not a UUID.
    case malformed
}

/// What the count-based faults (``SandboxFaults/goawayAfter``, ``SandboxFaults/dropAfter``) count.
public enum SandboxFaultScope: String, Sendable, Hashable, CaseIterable {
    /// Each connection's answers, from its first.
    case connection
    /// The sandbox's answers on all its connections together; the fault fires at every multiple.
    case sandbox
}

/// An outage window: from `start` for `duration` seconds, every request is answered 503
/// `ServiceUnavailable`.
///
/// ```swift
/// faults.outages = [SandboxOutage(start: Date().addingTimeInterval(5), duration: 20)]
/// ```
public struct SandboxOutage: Sendable, Hashable {
    public var start: Date
    /// Seconds.
    public var duration: TimeInterval

    public init(start: Date, duration: TimeInterval) {
        self.start = start
        self.duration = duration
    }

    public var end: Date { start.addingTimeInterval(duration) }

    /// True from `start` (included) to `end` (excluded).
    public func contains(_ date: Date) -> Bool { date >= start && date < end }
}
