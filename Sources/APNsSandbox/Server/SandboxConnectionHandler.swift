import Crypto
import Foundation
import HTTP2Engine
import HeraldCore
import Logging
import NIOCore

/// The service a sandbox listener offers.
enum SandboxService: Sendable {
    /// Notifications to devices and broadcasts (`/3/device/…`, `/4/broadcasts/apps/…`).
    case devices
    /// Channel management (`/1/apps/…`).
    case channels
}

/// Answers the requests of one HTTP/2 connection on the connection's event loop. It sits after
/// the HTTP/2 engine (an nghttp2 server session, ``HTTP2EngineHandler``) as its delegate: the
/// engine's events arrive after nghttp2 returned, and answers, SETTINGS, resets and GOAWAY go
/// back through the engine. No per-stream channels or tasks: the sandbox must never be the
/// bottleneck.
final class SandboxConnectionHandler: ChannelInboundHandler, HTTP2EngineDelegate {
    typealias InboundIn = NIOAny

    enum Auth {
        case token
        case certificate(topics: [String])

        var kind: SandboxAuthKind {
            switch self {
            case .token: return .token
            case .certificate: return .certificate
            }
        }
    }

    /// One open request. A class: the dictionary holds a reference, frames mutate it in place.
    private final class Stream {
        let head: SandboxRequestHead
        let sequence: Int
        let receivedAt: Date
        var body: ByteBuffer?
        var bodySize: Int = 0
        var endStreamReceived: Bool
        /// Evaluated, the answer waits for the added latency.
        var awaitingResponse = false

        init(head: SandboxRequestHead, sequence: Int, receivedAt: Date, endStreamReceived: Bool) {
            self.head = head
            self.sequence = sequence
            self.receivedAt = receivedAt
            self.endStreamReceived = endStreamReceived
        }
    }

    /// What the sandbox answers to one request, and what it learned on the way.
    private struct Outcome {
        var status: Int = 200
        var reason: APNsReason? = nil
        var timestamp: Date? = nil
        var teamID: String? = nil
        var keyID: String? = nil
        var topic: String? = nil
        var deviceToken: String? = nil
        var pushType: PushType? = nil
        /// Which service the request went to.
        var kind: SandboxRequestKind = .device
        /// The channel a broadcast or channel call named (or created).
        var channelID: String? = nil
        /// A successful channel call's answer body.
        var body: [UInt8]? = nil

        mutating func reject(_ reason: APNsReason, timestamp: Date? = nil) {
            self.status = reason.status ?? 400
            self.reason = reason
            self.timestamp = timestamp
        }
    }

    private let core: SandboxCore
    let connectionID: Int
    private let auth: Auth
    /// The service this connection's listener offers: device notifications and broadcasts,
    /// or channel management.
    private let service: SandboxService
    private var context: ChannelHandlerContext?
    private var engine: HTTP2EngineHandler?
    private let auditor: SandboxWireAuditor
    private var streams: [Int32: Stream] = [:]

    private var tokenAccepted = false
    /// The limit was raised for streams opened before the client knew it (``acceptUnannouncedBurst(limit:)``).
    private var burstAccepted = false
    private var burstEnded = false
    private var advertisedLimit: Int
    private var processedCount = 0
    private var highestStreamID: Int32 = 0
    /// Set once the sandbox sent GOAWAY: streams above it are refused.
    private var goawayLastStreamID: Int32? = nil
    private var closeWhenIdle = false
    private var closed = false
    private var dropped = false

    private var faults: SandboxFaults
    private var faultsVersion: Int
    private var random: SplitMix64

    private var lastToken: String? = nil
    private var lastTokenVerdict: VerifiedToken? = nil
    /// The whole `authorization` value that carried `lastToken` (a repeat skips the prefix parse).
    private var lastAuthorization: String? = nil
    /// Per-connection memory of pure checks a provider repeats request after request: the last
    /// `:path` that named a valid device (and its token), the last push type and topic found to
    /// agree. Compared by value, so a different request is always checked in full.
    private var lastDevicePath: (path: String, token: String)? = nil
    private var lastAgreement: (pushType: PushType, topic: String)? = nil
    private var connectionTracker = TokenUpdateTracker()

    /// The connection-level inbound window the sandbox keeps open for its client (nghttp2 sends
    /// WINDOW_UPDATE as the client's data is consumed).
    static let connectionWindowTarget: Int32 = 1 << 20
    /// The most body bytes one stream may carry before the engine ends the connection; the
    /// sandbox answers PayloadTooLarge long before (at 4 or 5 KB).
    static let maximumBodySize = 1 << 20

    /// The engine for a connection whose first MAX_CONCURRENT_STREAMS is `initialLimit`.
    static func makeEngine(core: SandboxCore, initialLimit: Int) -> HTTP2EngineHandler {
        HTTP2EngineHandler(
            configuration: .init(
                mode: .server,
                initialSettings: [
                    .maxConcurrentStreams(UInt32(clamping: initialLimit)),
                    .maxHeaderListSize(UInt32(clamping: core.maximumHeaderListSize)),
                    .initialWindowSize(65_535),
                ],
                connectionWindowSize: connectionWindowTarget,
                maxHeaderListSize: core.maximumHeaderListSize,
                maxBodySize: maximumBodySize,
                // The sandbox reads every header APNs cares about itself (a missing :method is
                // 405, a missing :path BadPath): nghttp2's HTTP checks would answer first.
                validatesHTTPMessaging: false))
    }

    init(
        core: SandboxCore, connectionID: Int, auth: Auth, service: SandboxService, initialLimit: Int,
        engine: HTTP2EngineHandler, auditor: SandboxWireAuditor
    ) {
        self.core = core
        self.connectionID = connectionID
        self.auth = auth
        self.service = service
        self.engine = engine
        self.auditor = auditor
        auditor.sentStreamLimit(initialLimit)
        self.advertisedLimit = initialLimit
        self.faultsVersion = core.faultsVersion
        self.faults = core.faults
        self.random = SplitMix64(seed: Self.mix(seed: faults.seed, connectionID: connectionID))
    }

    private static func mix(seed: UInt64, connectionID: Int) -> UInt64 {
        seed ^ (UInt64(truncatingIfNeeded: connectionID) &* 0xD1B5_4A32_D192_ED03)
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        engine = nil
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        let cause = dropped ? "connection-dropped" : "connection-closed"
        for (streamID, stream) in streams.sorted(by: { $0.key < $1.key }) {
            recordCutOff(streamID: streamID, stream: stream, cause: cause)
        }
        streams.removeAll()
        core.unregister(connectionID)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let engineError = error as? HTTP2EngineError,
            engineError == .headerListTooLarge(limit: core.maximumHeaderListSize)
        {
            // Larger than SETTINGS_MAX_HEADER_LIST_SIZE: the engine ends the connection.
            core.recorder.oversizedHeaders()
        }
        // A protocol error (the engine has sent GOAWAY), or TLS or socket trouble: done.
        core.logger.debug(
            "sandbox connection error",
            metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
        closeNow()
    }

    /// The engine's events, after nghttp2 returned.
    func http2Engine(_ engine: HTTP2EngineHandler, didReceive event: HTTP2Event) {
        switch event {
        case .headers(let streamID, let headers, let endStream):
            if streamID > highestStreamID {
                highestStreamID = streamID
                receivedHeaders(streamID: streamID, head: SandboxRequestHead(headers), endStream: endStream)
            } else if endStream, let stream = streams[streamID] {
                // Trailers: nothing in them matters to APNs.
                stream.endStreamReceived = true
                complete(streamID)
            }
        case .data(let streamID, let bytes, let endStream):
            receivedData(streamID: streamID, buffer: bytes)
            if endStream, let stream = streams[streamID] {
                stream.endStreamReceived = true
                complete(streamID)
            }
        case .streamClosed(let streamID, _):
            auditor.streamClosed(streamID)
            streamClosed(streamID)
        case .settingsAcknowledged, .settings, .resetReceived, .goAway, .pingAcknowledged:
            break
        }
    }

    // MARK: Requests

    private func receivedHeaders(streamID: Int32, head: SandboxRequestHead, endStream: Bool) {
        if let last = goawayLastStreamID, streamID > last { return }
        streams[streamID] = Stream(
            head: head, sequence: core.recorder.nextSequence(), receivedAt: core.clock.now,
            endStreamReceived: endStream)
        if endStream { complete(streamID) }
    }

    private func receivedData(streamID: Int32, buffer: ByteBuffer) {
        guard let stream = streams[streamID], !stream.awaitingResponse else { return }
        let size = buffer.readableBytes
        stream.bodySize += size
        let limit =
            stream.head.pushType == PushType.voip.rawValue || SandboxBroadcastRules.isBroadcastPath(stream.head.path)
            ? 5120 : 4096
        if stream.bodySize <= limit {
            if stream.body == nil {
                stream.body = buffer
            } else {
                var copy = buffer
                stream.body!.writeBuffer(&copy)
            }
        }
        if stream.bodySize > limit {
            // Too large: answer now (RFC 9113 §8.1 lets a server answer before the request ends).
            complete(streamID)
        }
    }

    private func streamClosed(_ streamID: Int32) {
        guard let stream = streams[streamID], !stream.awaitingResponse else { return }
        streams.removeValue(forKey: streamID)
        let refused = goawayLastStreamID.map { streamID > $0 } ?? false
        recordCutOff(streamID: streamID, stream: stream, cause: refused ? "goaway-refused" : "client-reset")
        closeIfIdle()
    }

    private func complete(_ streamID: Int32) {
        guard let stream = streams[streamID], !stream.awaitingResponse else { return }
        refreshFaults()
        let outcome = evaluate(stream)
        if faults.addedLatency > 0, let context {
            stream.awaitingResponse = true
            core.recorder.heldForLatency()
            let delay = TimeAmount.nanoseconds(Int64(faults.addedLatency * 1_000_000_000))
            context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [self] in
                guard !self.closed, let waiting = self.streams[streamID] else { return }
                self.respond(streamID: streamID, stream: waiting, outcome: outcome)
            }
        } else {
            respond(streamID: streamID, stream: stream, outcome: outcome)
        }
    }

    /// APNs' checks, in the order the sandbox applies them (see the README).
    private func evaluate(_ stream: Stream) -> Outcome {
        var outcome = Outcome()
        let head = stream.head
        let now = stream.receivedAt

        if let reason = faults.outageReason(at: now) {
            outcome.reject(reason)
            return outcome
        }
        if service == .channels {
            return evaluateChannelCall(stream)
        }
        if SandboxBroadcastRules.isBroadcastPath(head.path) {
            return evaluateBroadcast(stream)
        }

        guard head.method == "POST" else {
            outcome.reject(.methodNotAllowed)
            return outcome
        }
        if let path = head.path, let last = lastDevicePath, Self.sameBytes(last.path, path) {
            outcome.deviceToken = last.token
        } else {
            switch SandboxRules.deviceToken(fromPath: head.path) {
            case .ok(let token):
                outcome.deviceToken = token
                if let path = head.path { lastDevicePath = (path, token) }
            case .rejected(let reason):
                outcome.reject(reason)
                return outcome
            }
        }
        if head.duplicated {
            outcome.reject(.duplicateHeaders)
            return outcome
        }

        // Authentication and topic.
        let topic: String
        switch auth {
        case .token:
            let keyIndex: Int
            switch authenticate(head.authorization, now: now) {
            case .ok(let verified):
                keyIndex = verified.keyIndex
                outcome.teamID = core.teamIDs[keyIndex]
                outcome.keyID = core.keyIDs[keyIndex]
            case .rejected(let reason):
                outcome.reject(reason)
                return outcome
            }
            if !tokenAccepted {
                tokenAccepted = true
                setStreamLimit(core.maxConcurrentStreams)
            }
            guard let requested = head.topic else {
                outcome.reject(.missingTopic)
                return outcome
            }
            topic = requested
            outcome.topic = topic
            if let reason = topicSyntax(topic) {
                outcome.reject(reason)
                return outcome
            }
            if lastAllowedTopic?.keyIndex != keyIndex || !Self.sameBytes(lastAllowedTopic?.topic, topic) {
                guard core.keyTopics[keyIndex].contains(topic) else {
                    outcome.reject(.topicDisallowed)
                    return outcome
                }
                lastAllowedTopic = (keyIndex, topic)
            }
        case .certificate(let topics):
            if let requested = head.topic {
                topic = requested
            } else if topics.count == 1 {
                topic = topics[0]
            } else {
                outcome.reject(.missingTopic)
                return outcome
            }
            outcome.topic = topic
            if let reason = topicSyntax(topic) {
                outcome.reject(reason)
                return outcome
            }
            guard topics.contains(topic) else {
                outcome.reject(.topicDisallowed)
                return outcome
            }
        }

        // Push type against topic.
        let pushType: PushType
        switch SandboxRules.pushType(head.pushType) {
        case .ok(let type): pushType = type
        case .rejected(let reason):
            outcome.reject(reason)
            return outcome
        }
        outcome.pushType = pushType
        if lastAgreement?.pushType != pushType || !Self.sameBytes(lastAgreement?.topic, topic) {
            guard pushType.agrees(withTopic: topic) else {
                outcome.reject(.deviceTokenNotForTopic)
                return outcome
            }
            lastAgreement = (pushType, topic)
        }

        if let reason = SandboxRules.optionalHeaders(head) {
            outcome.reject(reason)
            return outcome
        }

        // Payload.
        let payloadReason: APNsReason?
        if stream.bodySize > pushType.maximumPayloadSize {
            payloadReason = .payloadTooLarge
        } else if let body = stream.body {
            payloadReason = body.withUnsafeReadableBytes {
                SandboxRules.payload($0, pushType: pushType, priority: head.priority)
            }
        } else {
            payloadReason = .payloadEmpty
        }
        if let payloadReason {
            outcome.reject(payloadReason)
            return outcome
        }

        // The device.
        let token = outcome.deviceToken!
        if !core.devices.isEmpty, let state = core.devices[token] {
            switch state {
            case .unregistered(let since):
                outcome.reject(.unregistered, timestamp: since)
                return outcome
            case .expired(let since):
                outcome.reject(.expiredToken, timestamp: since)
                return outcome
            case .boundToTopic(let bound) where bound != topic:
                outcome.reject(.deviceTokenNotForTopic)
                return outcome
            case .boundToTopic:
                break
            }
        }
        if !core.admitDeviceRequest(token, now: now) {
            outcome.reject(.tooManyRequests)
            return outcome
        }

        injectFaults(&outcome)
        return outcome
    }

    // MARK: Broadcasts and channel management

    /// `POST /4/broadcasts/apps/<bundle>`, Apple's checks in order: method, path, duplicated
    /// headers, authentication and the bundle, the broadcast capability, push type, channel,
    /// request ID, priority and expiration (against the channel's storage policy), payload.
    private func evaluateBroadcast(_ stream: Stream) -> Outcome {
        answer(stream, as: .broadcast) { stream, outcome throws(SandboxRejection) in
            try checkBroadcast(stream, &outcome)
            injectFaults(&outcome)
        }
    }

    /// Runs an evaluation's steps; the first that throws answers with its reason.
    private func answer(
        _ stream: Stream, as kind: SandboxRequestKind, _ steps: (Stream, inout Outcome) throws(SandboxRejection) -> Void
    ) -> Outcome {
        var outcome = Outcome()
        outcome.kind = kind
        outcome.channelID = stream.head.channelID
        do throws(SandboxRejection) {
            try steps(stream, &outcome)
        } catch {
            outcome.reject(error.reason)
        }
        return outcome
    }

    private func checkBroadcast(_ stream: Stream, _ outcome: inout Outcome) throws(SandboxRejection) {
        let head = stream.head
        guard head.method == "POST" else { throw SandboxRejection(.methodNotAllowed) }
        let bundle = try SandboxBroadcastRules.broadcastBundle(head.path).get()
        outcome.topic = bundle
        guard !head.duplicated else { throw SandboxRejection(.duplicateHeaders) }
        try SandboxRejection.check(authorize(bundle: bundle, head: head, now: stream.receivedAt, outcome: &outcome))
        try SandboxRejection.check(SandboxBroadcastRules.broadcastPushType(head.pushType))
        let channelID = try SandboxBroadcastRules.channelID(head.channelID).get()
        guard let channel = core.channels.read(bundleID: bundle, id: channelID) else { throw SandboxRejection(.channelNotRegistered) }
        if let id = head.requestID, !UUIDText.isUUID(id) { throw SandboxRejection(.badMessageId) }
        try SandboxRejection.check(
            SandboxBroadcastRules.broadcastHeaders(
                priority: head.priority, expiration: head.expiration, storagePolicy: channel.storagePolicy))
        guard stream.bodySize <= Notification.maximumBroadcastPayloadSize else { throw SandboxRejection(.payloadTooLarge) }
        try SandboxRejection.check(SandboxBroadcastRules.broadcastPayload(stream.body.map { Array($0.readableBytesView) }))
    }

    /// A call on the channel management port: path, method, duplicated headers,
    /// authentication and the bundle, the broadcast capability, request ID, then the call.
    private func evaluateChannelCall(_ stream: Stream) -> Outcome {
        answer(stream, as: .channelManagement) { stream, outcome throws(SandboxRejection) in
            try answerChannelCall(stream, &outcome)
        }
    }

    private func answerChannelCall(_ stream: Stream, _ outcome: inout Outcome) throws(SandboxRejection) {
        let head = stream.head
        let route = try SandboxBroadcastRules.managementRoute(head.path).get()
        let bundle: String
        switch route {
        case .channels(let value):
            guard ["POST", "GET", "DELETE"].contains(head.method ?? "") else { throw SandboxRejection(.methodNotAllowed) }
            bundle = value
        case .allChannels(let value):
            guard head.method == "GET" else { throw SandboxRejection(.methodNotAllowed) }
            bundle = value
        }
        outcome.topic = bundle
        guard !head.duplicated else { throw SandboxRejection(.duplicateHeaders) }
        try SandboxRejection.check(authorize(bundle: bundle, head: head, now: stream.receivedAt, outcome: &outcome))
        if let id = head.requestID, !UUIDText.isUUID(id) { throw SandboxRejection(.badMessageId) }
        switch (route, head.method) {
        case (.allChannels, _):
            outcome.body = SandboxBroadcastRules.listBody(core.channels.list(bundleID: bundle).map(\.id))
        case (.channels, "POST"):
            let policy = try SandboxBroadcastRules.creation(stream.body.map { Array($0.readableBytesView) }).get()
            guard let channel = core.channels.create(bundleID: bundle, storagePolicy: policy, now: stream.receivedAt) else {
                throw SandboxRejection(.cannotCreateChannelConfig)
            }
            outcome.status = 201
            outcome.channelID = channel.id
        case (.channels, let method):
            let channelID = try SandboxBroadcastRules.channelID(head.channelID).get()
            if method == "DELETE" {
                guard core.channels.delete(bundleID: bundle, id: channelID) else { throw SandboxRejection(.channelNotRegistered) }
                outcome.status = 204
            } else {
                guard let channel = core.channels.read(bundleID: bundle, id: channelID) else {
                    throw SandboxRejection(.channelNotRegistered)
                }
                outcome.body = SandboxBroadcastRules.channelBody(storagePolicy: channel.storagePolicy)
            }
        }
    }

    /// The faults the sandbox was started with (a fraction of 500s and 503s), drawn for a request
    /// that would have succeeded.
    private func injectFaults(_ outcome: inout Outcome) {
        guard faults.fraction500 > 0 || faults.fraction503 > 0 else { return }
        let draw = random.nextUnit()
        if draw < faults.fraction500 {
            outcome.reject(.internalServerError)
        } else if draw < faults.fraction500 + faults.fraction503 {
            outcome.reject(.serviceUnavailable)
        }
    }

    /// The provider token or certificate against a broadcast's or channel call's bundle ID:
    /// the token's reason, `TopicDisallowed` (a push-type suffix), `TopicMismatch` (not one of
    /// the key's or certificate's topics), `FeatureNotEnabled`; nil when allowed.
    private func authorize(bundle: String, head: SandboxRequestHead, now: Date, outcome: inout Outcome) -> APNsReason? {
        let allowed: Bool
        switch auth {
        case .token:
            switch authenticate(head.authorization, now: now) {
            case .ok(let verified):
                outcome.teamID = core.teamIDs[verified.keyIndex]
                outcome.keyID = core.keyIDs[verified.keyIndex]
                if !tokenAccepted {
                    tokenAccepted = true
                    setStreamLimit(core.maxConcurrentStreams)
                }
                allowed = core.keyTopics[verified.keyIndex].contains(bundle)
            case .rejected(let reason):
                return reason
            }
        case .certificate(let topics):
            allowed = topics.contains(bundle)
        }
        if let reason = SandboxBroadcastRules.bundleProblem(bundle) { return reason }
        guard allowed else { return .topicMismatch }
        if core.broadcastDisabledTopics.contains(bundle) { return .featureNotEnabled }
        return nil
    }

    /// The last topic that passed the syntax check on this connection (providers repeat topics).
    private var lastGoodTopic: String? = nil
    /// The last key and topic found allowed on this connection.
    private var lastAllowedTopic: (keyIndex: Int, topic: String)? = nil

    private func topicSyntax(_ topic: String) -> APNsReason? {
        if Self.sameBytes(lastGoodTopic, topic) { return nil }
        if let reason = SandboxRules.topicSyntax(topic) { return reason }
        lastGoodTopic = topic
        return nil
    }

    /// Checks `authorization: bearer <JWT>`; each distinct token is verified once (cached).
    private func authenticate(_ authorization: String?, now: Date) -> Checked<VerifiedToken> {
        guard let authorization else { return .rejected(.missingProviderToken) }
        if let lastAuthorization, let lastTokenVerdict, Self.sameBytes(lastAuthorization, authorization) {
            // The same header as the last accepted one: the same token, verified already.
            if let reason = TokenAge.check(issuedAt: lastTokenVerdict.issuedAt, now: now, lifetime: core.tokenLifetime) {
                return .rejected(reason)
            }
            return .ok(lastTokenVerdict)
        }
        let jwt: Substring
        if SandboxRules.hasBearerPrefix(authorization) {
            jwt = authorization.dropFirst(7).drop(while: { $0 == " " })
        } else if authorization.trimmingCharacters(in: .whitespaces).lowercased() == "bearer"
            || authorization.trimmingCharacters(in: .whitespaces).isEmpty
        {
            return .rejected(.missingProviderToken)
        } else {
            return .rejected(.invalidProviderToken)
        }
        guard !jwt.isEmpty else { return .rejected(.missingProviderToken) }

        let verified: VerifiedToken
        let sameAsLast: Bool
        if let lastToken, let lastTokenVerdict, Self.sameBytes(lastToken, jwt) {
            verified = lastTokenVerdict
            sameAsLast = true
        } else {
            switch core.verifier.verify(jwt: String(jwt)) {
            case .success(let v): verified = v
            case .failure: return .rejected(.invalidProviderToken)
            }
            sameAsLast = false
        }
        // A key Apple restricted to the other environment signs nothing here.
        if let restricted = core.keyEnvironments[verified.keyIndex], restricted != core.environment {
            return .rejected(.badEnvironmentKeyInToken)
        }
        if let reason = TokenAge.check(issuedAt: verified.issuedAt, now: now, lifetime: core.tokenLifetime) {
            return .rejected(reason)
        }
        if !sameAsLast {
            let allowed: Bool
            switch core.tokenUpdateScope {
            case .key:
                allowed = core.observeTokenForKey(keyIndex: verified.keyIndex, issuedAt: verified.issuedAt, now: now)
            case .strict:
                allowed = core.observeTokenStrictly(
                    keyIndex: verified.keyIndex, jwt: jwt, issuedAt: verified.issuedAt, now: now)
            case .connection:
                allowed = connectionTracker.observe(
                    keyIndex: verified.keyIndex, issuedAt: verified.issuedAt, now: now,
                    minimumInterval: core.tokenUpdateMinimumInterval)
            }
            guard allowed else { return .rejected(.tooManyProviderTokenUpdates) }
            lastToken = String(jwt)
            lastAuthorization = authorization
            lastTokenVerdict = verified
        }
        return .ok(verified)
    }

    /// The per-connection caches compare by bytes, never with `String ==`: that is canonical
    /// equivalence, under which e.g. U+212A KELVIN SIGN equals `K`, so a different token,
    /// path or topic could pass as one already checked.
    private static func sameBytes(_ a: String?, _ b: String) -> Bool {
        guard let a else { return false }
        return sameBytes(a, Substring(b))
    }

    /// `a == b` by their UTF-8 bytes (`memcmp`), without making a String of the substring.
    private static func sameBytes(_ a: String, _ b: Substring) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        let compared = a.utf8.withContiguousStorageIfAvailable { left in
            b.utf8.withContiguousStorageIfAvailable { right in
                HTTP2HeaderBlock.bytesEqual(UnsafeRawBufferPointer(left), UnsafeRawBufferPointer(right))
            }
        }
        return (compared ?? nil) ?? a.utf8.elementsEqual(b.utf8)
    }

    // MARK: Responses

    private func respond(streamID: Int32, stream: Stream, outcome: Outcome) {
        guard let engine, let context, !closed else { return }
        streams.removeValue(forKey: streamID)

        let sentID = outcome.kind == .device ? stream.head.apnsID : stream.head.requestID
        let requestID = sentID.flatMap { UUIDText.isUUID($0) ? $0 : nil }
        let echoed = requestID ?? idGenerator.nextID().rawValue
        let apnsID: String
        switch faults.answeredID {
        case .echo: apnsID = echoed
        case .uppercase: apnsID = echoed.uppercased()
        case .other: apnsID = idGenerator.nextID().rawValue
        case .malformed: apnsID = "not-a-uuid"
        }
        // The development environment's key to its delivery log, new for every answer; a
        // successful broadcast gets one in either environment.
        let uniqueID: String?
        switch outcome.kind {
        case .device: uniqueID = core.environment == .development ? idGenerator.nextID().rawValue : nil
        case .broadcast: uniqueID = outcome.reason == nil ? idGenerator.nextID().rawValue : nil
        case .channelManagement: uniqueID = nil
        }
        let idHeader = outcome.kind == .device ? "apns-id" : "apns-request-id"

        // apns-id and apns-unique-id change with every answer: never worth a dynamic table
        // entry. Every value here is the sandbox's own (a status, a canonical UUID): not
        // re-validated.
        do {
            var headers: [HTTP2Header]
            var body: ByteBuffer? = nil
            if let reason = outcome.reason {
                body = context.channel.allocator.buffer(
                    bytes: APNsErrorBody(reason: reason, timestamp: outcome.timestamp).encoded())
                headers = [
                    HTTP2Header(name: ":status", value: Self.statusText(outcome.status)),
                    HTTP2Header(name: "content-type", value: "application/json"),
                    HTTP2Header(name: idHeader, value: apnsID, indexing: .neverIndexed),
                ]
            } else {
                headers = [
                    HTTP2Header(name: ":status", value: Self.statusText(outcome.status)),
                    HTTP2Header(name: idHeader, value: apnsID, indexing: .neverIndexed),
                ]
                if outcome.kind == .channelManagement {
                    if outcome.status == 201, let channelID = outcome.channelID {
                        headers.append(HTTP2Header(name: "apns-channel-id", value: channelID, indexing: .neverIndexed))
                    }
                    if let answer = outcome.body {
                        headers.append(HTTP2Header(name: "content-type", value: "application/json"))
                        body = context.channel.allocator.buffer(bytes: answer)
                    }
                }
            }
            if let uniqueID { headers.append(HTTP2Header(name: "apns-unique-id", value: uniqueID, indexing: .neverIndexed)) }
            if let seconds = faults.retryAfter, outcome.status == 429 || outcome.status == 503 {
                headers.append(HTTP2Header(name: "retry-after", value: String(max(0, seconds))))
            }
            try engine.submitResponse(streamID: streamID, headers: headers, body: body, validatingHeaders: false)
            if !stream.endStreamReceived {
                // Answered before the request ended (payload too large): the answer goes out
                // first, then the rest of the request is reset (NO_ERROR): nghttp2 sends a reset
                // ahead of DATA still queued.
                engine.flushNow()
                try engine.resetStream(streamID, errorCode: .noError)
            }
        } catch {
            // The stream is gone (the client reset it meanwhile): nothing to answer.
            core.logger.debug(
                "sandbox could not answer a stream",
                metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
        }

        core.recorder.record(processed: true, status: outcome.status, reason: outcome.reason) {
            var record = makeRecord(
                streamID: streamID, stream: stream, outcome: outcome, apnsID: apnsID,
                fromRequest: requestID != nil, processed: true, cutOff: nil)
            record.uniqueID = uniqueID
            record.kind = outcome.kind
            record.channelID = outcome.channelID
            return record
        }

        processedCount += 1
        afterResponse(streamID: streamID, success: outcome.status == 200)
    }

    private func afterResponse(streamID: Int32, success: Bool) {
        if burstAccepted, !tokenAccepted, isTokenConnection, advertisedLimit > 1 {
            burstAccepted = false
            burstEnded = true
            setStreamLimit(1)
        }
        if core.dropStreamLimitAfterRejection, tokenAccepted || !isTokenConnection {
            let wanted = success ? core.maxConcurrentStreams : 1
            if wanted != advertisedLimit { setStreamLimit(wanted) }
        }
        if faults.goawayAfter != nil || faults.dropAfter != nil {
            let (drops, goesAway): (Bool, Bool)
            switch faults.scope {
            case .connection:
                drops = faults.dropAfter.map { processedCount >= $0 } ?? false
                goesAway = faults.goawayAfter.map { processedCount == $0 } ?? false
            case .sandbox:
                // Every multiple of the answers on all connections.
                let answered = core.countAnswer()
                drops = faults.dropAfter.map { answered % $0 == 0 } ?? false
                goesAway = faults.goawayAfter.map { answered % $0 == 0 } ?? false
            }
            if drops {
                drop()
                return
            }
            if goesAway, goawayLastStreamID == nil {
                sendGoAway(lastStreamID: streamID, reason: faults.goawayReason)
            }
        }
        closeIfIdle()
    }

    private var isTokenConnection: Bool {
        if case .token = auth { return true }
        return false
    }

    private static func statusText(_ status: Int) -> String {
        switch status {
        case 200: return "200"
        case 201: return "201"
        case 204: return "204"
        case 400: return "400"
        case 403: return "403"
        case 404: return "404"
        case 405: return "405"
        case 410: return "410"
        case 413: return "413"
        case 429: return "429"
        case 500: return "500"
        case 503: return "503"
        default: return String(status)
        }
    }

    /// apns-ids the sandbox assigns to requests that bring none: Herald's own generator, one per
    /// connection (no lock: the connection's event loop is its only user).
    private var idGenerator = NotificationIDGenerator()

    private func makeRecord(
        streamID: Int32, stream: Stream, outcome: Outcome?, apnsID: String, fromRequest: Bool,
        processed: Bool, cutOff: String?
    ) -> SandboxRecordedRequest {
        let head = stream.head
        var hash = ""
        var payload: [UInt8]? = nil
        if let body = stream.body {
            hash = body.withUnsafeReadableBytes { bytes in
                SHA256.hash(data: bytes).map { byte in
                    let digits = Array("0123456789abcdef".utf8)
                    return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]], as: UTF8.self)
                }.joined()
            }
            if core.recordPayloads { payload = Array(body.readableBytesView) }
        }
        let kind: SandboxRequestKind =
            outcome?.kind
            ?? (service == .channels ? .channelManagement : SandboxBroadcastRules.isBroadcastPath(head.path) ? .broadcast : .device)
        let deviceToken = kind == .device ? outcome?.deviceToken ?? SandboxRules.deviceToken(fromPath: head.path).value : nil
        return SandboxRecordedRequest(
            sequence: stream.sequence, connectionID: connectionID, streamID: Int(streamID), authKind: auth.kind,
            teamID: outcome?.teamID, keyID: outcome?.keyID, topic: outcome?.topic ?? head.topic,
            deviceToken: deviceToken, apnsID: apnsID, apnsIDFromRequest: fromRequest, method: head.method,
            path: head.path, pushType: head.pushType, priority: head.priority, expiration: head.expiration,
            collapseID: head.collapseID, payloadSize: stream.bodySize, payloadSHA256: hash, payload: payload,
            status: processed ? outcome?.status : nil, reason: processed ? outcome?.reason : nil,
            processed: processed, cutOff: cutOff, receivedAt: stream.receivedAt, kind: kind,
            channelID: outcome?.channelID ?? head.channelID)
    }

    private func recordCutOff(streamID: Int32, stream: Stream, cause: String) {
        let sent = service == .channels || SandboxBroadcastRules.isBroadcastPath(stream.head.path) ? stream.head.requestID : stream.head.apnsID
        let requestID = sent.flatMap { UUIDText.isUUID($0) ? $0 : nil }
        core.recorder.record(processed: false, status: nil, reason: nil) {
            makeRecord(
                streamID: streamID, stream: stream, outcome: nil, apnsID: requestID ?? "",
                fromRequest: requestID != nil, processed: false, cutOff: cause)
        }
    }

    // MARK: Connection control

    private func setStreamLimit(_ limit: Int) {
        guard let engine, !closed else { return }
        advertisedLimit = limit
        do {
            try engine.sendSettings([.maxConcurrentStreams(UInt32(clamping: limit))])
            auditor.sentStreamLimit(limit)
        } catch {
            core.logger.debug(
                "sandbox could not send SETTINGS",
                metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
        }
    }

    /// The client opened `limit` streams before it acknowledged any SETTINGS, so before it could
    /// know the one-stream rule of a token connection (h2load does this). nghttp2 would refuse
    /// those beyond the limit it sent; the sandbox serves them, as a limit only binds once
    /// acknowledged (RFC 9113 §6.5.3). The limit is raised to cover them before the
    /// engine reads them, and drops back to one after the next answer while no valid token has
    /// been seen.
    /// Bounded: never above the configured limit, only rising, and over once the limit has gone
    /// back to one, so a client that never acknowledges cannot queue SETTINGS without end.
    func acceptUnannouncedBurst(limit: Int) {
        let wanted = min(limit, core.maxConcurrentStreams)
        guard !burstEnded, wanted > advertisedLimit else { return }
        burstAccepted = true
        setStreamLimit(wanted)
    }

    /// Runtime change of the stream limit (``APNsSandbox/setMaxConcurrentStreams(_:)``).
    func maxConcurrentStreamsChanged(_ limit: Int) {
        guard !isTokenConnection || tokenAccepted else { return }
        setStreamLimit(limit)
    }

    /// Shutdown GOAWAY: every stream already opened is still answered; later ones are refused.
    func goAwayForShutdown(reason: APNsReason) {
        sendGoAway(lastStreamID: highestStreamID, reason: reason)
    }

    private func sendGoAway(lastStreamID: Int32, reason: APNsReason) {
        guard let context, let engine, !closed else { return }
        let last = goawayLastStreamID.map { min($0, lastStreamID) } ?? lastStreamID
        goawayLastStreamID = last
        auditor.sentGoAway()
        // Streams above the last one are never processed: refused, so the client may retry them.
        for (streamID, stream) in streams.sorted(by: { $0.key < $1.key }) where streamID > last {
            streams.removeValue(forKey: streamID)
            try? engine.resetStream(streamID, errorCode: .refusedStream)
            recordCutOff(streamID: streamID, stream: stream, cause: "goaway-refused")
        }
        do {
            try engine.goAway(lastStreamID: last, errorCode: .noError, debugData: APNsErrorBody(reason: reason).encoded())
        } catch {
            core.logger.debug(
                "sandbox could not send GOAWAY",
                metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
        }
        core.recorder.goawaySent()
        closeWhenIdle = true
        closeIfIdle()
        // Do not wait for ever for a client that never finishes its streams.
        context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(10)) { [self] in
            self.closeNow()
        }
    }

    private func drop() {
        dropped = true
        core.recorder.connectionDropped()
        for (streamID, stream) in streams.sorted(by: { $0.key < $1.key }) {
            recordCutOff(streamID: streamID, stream: stream, cause: "connection-dropped")
        }
        streams.removeAll()
        // What was answered so far goes out; nothing after.
        engine?.flushNow()
        closeNow()
    }

    private func closeIfIdle() {
        guard closeWhenIdle, streams.isEmpty, let context, !closed else { return }
        context.eventLoop.assumeIsolated().execute { [self] in
            self.engine?.flushNow()
            self.closeNow()
        }
    }

    private func closeNow() {
        guard let context, !closed else { return }
        closed = true
        context.close(promise: nil)
    }

    private func refreshFaults() {
        let version = core.faultsVersion
        guard version != faultsVersion else { return }
        faultsVersion = version
        faults = core.faults
        random = SplitMix64(seed: Self.mix(seed: faults.seed, connectionID: connectionID))
    }
}
