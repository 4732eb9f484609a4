import Foundation
import HeraldCore

/// How a connection authenticated.
public enum SandboxAuthKind: String, Sendable, Hashable, Codable {
    /// Provider tokens (`authorization: bearer <JWT>`).
    case token
    /// A client certificate presented in the TLS handshake.
    case certificate
}

/// Which of APNs' services a request went to.
public enum SandboxRequestKind: String, Sendable, Hashable, Codable {
    /// A notification to one device (`/3/device/…`).
    case device
    /// A broadcast on a channel (`/4/broadcasts/apps/…`).
    case broadcast
    /// A call to the channel management service (`/1/apps/…`, on its own port).
    case channelManagement = "channel-management"
}

/// One request the sandbox received, as it arrived and as it was answered.
///
/// `processed` tells whether the request was answered. A request that was cut off (its
/// connection dropped before the answer, refused by a GOAWAY, or reset by the client) has
/// `processed == false`, no `status` and was not delivered. Together with `apnsID` and
/// `deviceToken` this proves "nothing lost, nothing delivered twice".
public struct SandboxRecordedRequest: Sendable, Hashable, Codable {
    /// Arrival order across the whole sandbox (starts at 1).
    public var sequence: Int
    /// The connection's number (starts at 1, in order of acceptance).
    public var connectionID: Int
    /// The HTTP/2 stream ID on that connection.
    public var streamID: Int
    public var authKind: SandboxAuthKind
    /// The team of the provider token, or nil (certificate connections, bad tokens).
    public var teamID: String?
    /// The key ID of the provider token, or nil.
    public var keyID: String?
    /// The topic used: the `apns-topic` header, or a single-topic certificate's topic.
    public var topic: String?
    /// The device token from `:path` (lowercased), when the path had one.
    public var deviceToken: String?
    /// Which service it went to.
    public var kind: SandboxRequestKind = .device
    /// The `apns-channel-id` of a broadcast or channel call (the new channel's, for a creation
    /// answered 201).
    public var channelID: String? = nil
    /// The `apns-id` answered (`apns-request-id` for broadcasts and channel calls): the
    /// request's, or the one the sandbox made (or what ``SandboxFaults/answeredID`` put there).
    public var apnsID: String
    /// True when the request carried its own `apns-id`.
    public var apnsIDFromRequest: Bool
    /// The `apns-unique-id` answered (a development-environment sandbox only).
    public var uniqueID: String?
    public var method: String?
    public var path: String?
    public var pushType: String?
    public var priority: String?
    public var expiration: String?
    public var collapseID: String?
    public var payloadSize: Int
    /// SHA-256 of the payload (lowercase hex); empty when recording is off.
    public var payloadSHA256: String
    /// The payload bytes, when ``SandboxConfiguration/recordPayloads`` is on.
    public var payload: [UInt8]?
    /// The `:status` answered; nil when the request was cut off.
    public var status: Int?
    /// The reason answered (error responses only).
    public var reason: APNsReason?
    /// True when the sandbox answered the request; false when it was cut off.
    public var processed: Bool
    /// Why an unprocessed request was cut off: "connection-dropped", "goaway-refused",
    /// "client-reset", "connection-closed".
    public var cutOff: String?
    /// When the request's headers arrived (sandbox clock).
    public var receivedAt: Date

    public init(
        sequence: Int, connectionID: Int, streamID: Int, authKind: SandboxAuthKind, teamID: String? = nil,
        keyID: String? = nil, topic: String? = nil, deviceToken: String? = nil, apnsID: String,
        apnsIDFromRequest: Bool, method: String? = nil, path: String? = nil, pushType: String? = nil,
        priority: String? = nil, expiration: String? = nil, collapseID: String? = nil, payloadSize: Int = 0,
        payloadSHA256: String = "", payload: [UInt8]? = nil, status: Int? = nil, reason: APNsReason? = nil,
        processed: Bool, cutOff: String? = nil, receivedAt: Date, kind: SandboxRequestKind = .device,
        channelID: String? = nil
    ) {
        self.kind = kind
        self.channelID = channelID
        self.sequence = sequence
        self.connectionID = connectionID
        self.streamID = streamID
        self.authKind = authKind
        self.teamID = teamID
        self.keyID = keyID
        self.topic = topic
        self.deviceToken = deviceToken
        self.apnsID = apnsID
        self.apnsIDFromRequest = apnsIDFromRequest
        self.method = method
        self.path = path
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.payloadSize = payloadSize
        self.payloadSHA256 = payloadSHA256
        self.payload = payload
        self.status = status
        self.reason = reason
        self.processed = processed
        self.cutOff = cutOff
        self.receivedAt = receivedAt
    }

    /// True when the request was answered 200 (APNs accepted it for delivery).
    public var delivered: Bool { processed && status == 200 }
}

/// How the client behaved on the wire, against what Apple asks of providers.
public struct SandboxAudit: Sendable, Hashable, Codable {
    /// PRIORITY frames received (APNs ignores them; providers should not send them).
    public var priorityFrames: Int = 0
    /// HEADERS frames that carried priority information.
    public var headersWithPriority: Int = 0
    /// Streams opened above the advertised SETTINGS_MAX_CONCURRENT_STREAMS (each is a connection
    /// error, as swift-nio-http2 enforces it).
    public var streamsAboveLimit: Int = 0
    /// Every HPACK deviation counted.
    public var hpackViolationCount: Int = 0
    /// The first HPACK deviations (at most 100), described: `:path` or `authorization` indexed,
    /// or `apns-id` / `apns-expiration` / `apns-collapse-id` indexed again after their first use.
    public var hpackViolations: [String] = []

    public init() {}

    /// True when the client sent no PRIORITY, never exceeded the stream limit and encoded its
    /// headers as Apple asks.
    public var isClean: Bool {
        priorityFrames == 0 && headersWithPriority == 0 && streamsAboveLimit == 0 && hpackViolationCount == 0
    }

    static let violationListLimit = 100
}

/// Running totals.
public struct SandboxCounters: Sendable, Hashable, Codable {
    public var connections: Int = 0
    public var requests: Int = 0
    public var answered: Int = 0
    public var cutOff: Int = 0
    /// Answers by `:status`.
    public var byStatus: [Int: Int] = [:]
    /// Error answers by reason.
    public var byReason: [String: Int] = [:]
    /// Streams refused after a GOAWAY (never seen as requests).
    public var refusedStreams: Int = 0
    /// Streams reset because their header list was larger than the advertised maximum.
    public var oversizedHeaders: Int = 0
    /// GOAWAY frames the sandbox sent (faults, shutdown).
    public var goawaysSent: Int = 0
    /// Connections closed abruptly by the `dropAfter` fault.
    public var connectionsDropped: Int = 0
    /// Complete requests whose answer the `addedLatency` fault held back (counted on arrival, so
    /// a test knows a request has reached the sandbox before its answer is due).
    public var heldForLatency: Int = 0
    /// Distinct provider tokens whose signature was checked (each only once).
    public var tokenVerifications: Int = 0
    /// Requests not kept in memory because ``SandboxConfiguration/maximumRecordedRequests`` was reached.
    public var recordsNotKept: Int = 0

    public init() {}
}
