import CNGHTTP2
import Crypto
import Foundation
import HeraldCore
import Logging
import NIOCore

/// Answers the requests of one HTTP/2 connection on the connection's event loop, directly above
/// TLS: bytes in go to an nghttp2 server session (``SandboxHTTP2Session``) and to the HPACK
/// auditor; the session's events are acted on once nghttp2 has returned; bytes out are gathered
/// into one buffer per flush. No per-stream channels or tasks: the sandbox must never be the
/// bottleneck.
final class SandboxConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

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

        mutating func reject(_ reason: APNsReason, timestamp: Date? = nil) {
            self.status = reason.status ?? 400
            self.reason = reason
            self.timestamp = timestamp
        }
    }

    private let core: SandboxCore
    let connectionID: Int
    private let auth: Auth
    private var context: ChannelHandlerContext?
    private var session: SandboxHTTP2Session?
    private let auditor = SandboxHPACKAuditor()
    private var streams: [Int32: Stream] = [:]
    /// Streams answered before their request ended: reset (NO_ERROR) once the answer is out.
    private var resetAfterResponse: Set<Int32> = []

    private var tokenAccepted = false
    private var advertisedLimit: Int
    private var processedCount = 0
    private var highestStreamID: Int32 = 0
    /// Set once the sandbox sent GOAWAY: streams above it are refused.
    private var goawayLastStreamID: Int32? = nil
    private var closeWhenIdle = false
    private var closed = false
    private var dropped = false
    private var inRead = false
    private var needsFlush = false

    private var faults: SandboxFaults
    private var faultsVersion: Int
    private var random: SplitMix64

    private var lastToken: String? = nil
    private var lastTokenVerdict: VerifiedToken? = nil
    private var connectionTracker = TokenUpdateTracker()

    /// The connection-level inbound window the sandbox keeps open for its client (nghttp2 sends
    /// WINDOW_UPDATE as the client's data is consumed).
    static let connectionWindowTarget = 1 << 20
    /// At most this many bytes are gathered from nghttp2 per write; more waits for writability.
    static let outputChunk = 256 * 1024

    init(core: SandboxCore, connectionID: Int, auth: Auth, initialLimit: Int) {
        self.core = core
        self.connectionID = connectionID
        self.auth = auth
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
        do {
            let session = try SandboxHTTP2Session(
                allocator: context.channel.allocator, maximumHeaderListSize: core.maximumHeaderListSize)
            session.submitSettings(
                maxConcurrentStreams: advertisedLimit, maxHeaderListSize: core.maximumHeaderListSize,
                initialWindowSize: 65_535)
            session.setConnectionWindow(Self.connectionWindowTarget)
            self.session = session
        } catch {
            core.logger.debug(
                "sandbox could not start an HTTP/2 session",
                metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
            closeNow()
            return
        }
        flushNow()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        session?.close()
        session = nil
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        let cause = dropped ? "connection-dropped" : "connection-closed"
        for (streamID, stream) in streams.sorted(by: { $0.key < $1.key }) {
            recordCutOff(streamID: streamID, stream: stream, cause: cause)
        }
        streams.removeAll()
        session?.close()
        core.unregister(connectionID)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        guard let session, !closed else { return }
        inRead = true
        defer { inRead = false }
        auditor.scan(buffer)
        for finding in auditor.takeFindings() {
            core.recorder.hpackViolation("connection \(connectionID) stream \(finding.streamID): \(finding.text)")
        }
        do {
            try session.receive(buffer)
        } catch {
            // A connection nghttp2 cannot go on with (bad preface, flooding): what it queued
            // goes out, then the connection closes.
            core.logger.debug(
                "sandbox connection error",
                metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
            handleEvents()
            flushNow()
            closeNow()
            return
        }
        handleEvents()
        needsFlush = true
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush { flushNow() }
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, session?.wantsWrite == true { flushNow() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // TLS or socket trouble: the connection is done.
        core.logger.debug(
            "sandbox connection error",
            metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
        closeNow()
    }

    /// Acts on what nghttp2 reported, after it returned.
    private func handleEvents() {
        guard let session else { return }
        for event in session.takeEvents() {
            switch event {
            case .request(let streamID, let head, let endStream, let withPriority):
                if withPriority { core.recorder.headersWithPriority() }
                receivedHeaders(streamID: streamID, head: head, endStream: endStream)
            case .trailers(let streamID, let endStream, let withPriority):
                if withPriority { core.recorder.headersWithPriority() }
                // Trailers: nothing in them matters to APNs.
                if endStream, let stream = streams[streamID] {
                    stream.endStreamReceived = true
                    complete(streamID)
                }
            case .data(let streamID, let bytes):
                receivedData(streamID: streamID, buffer: bytes)
            case .endOfData(let streamID):
                guard let stream = streams[streamID] else { break }
                stream.endStreamReceived = true
                complete(streamID)
            case .priorityFrame:
                core.recorder.priorityFrame()
            case .streamClosed(let streamID, _):
                resetAfterResponse.remove(streamID)
                streamClosed(streamID)
            case .invalidFrame(let type, let streamID, let libError):
                if type == UInt8(NGHTTP2_HEADERS.rawValue), streamID > highestStreamID,
                    libError == NGHTTP2_ERR_PROTO.rawValue || libError == NGHTTP2_ERR_REFUSED_STREAM.rawValue
                {
                    // A new stream beyond SETTINGS_MAX_CONCURRENT_STREAMS: nghttp2 refused it.
                    core.recorder.streamAboveLimit()
                }
            case .responseSent(let streamID):
                if resetAfterResponse.remove(streamID) != nil {
                    session.resetStream(streamID, errorCode: NGHTTP2_NO_ERROR)
                }
            }
        }
    }

    // MARK: Requests

    private func receivedHeaders(streamID: Int32, head: SandboxRequestHead, endStream: Bool) {
        if streamID > highestStreamID { highestStreamID = streamID }
        if head.listSize > core.maximumHeaderListSize {
            // Larger than SETTINGS_MAX_HEADER_LIST_SIZE: refuse the stream, keep the connection.
            core.recorder.oversizedHeaders()
            session?.resetStream(streamID, errorCode: NGHTTP2_PROTOCOL_ERROR)
            return
        }
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
        let limit = stream.head.pushType == PushType.voip.rawValue ? 5120 : 4096
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
            let delay = TimeAmount.nanoseconds(Int64(faults.addedLatency * 1_000_000_000))
            context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [self] in
                guard !self.closed, let waiting = self.streams[streamID] else { return }
                self.respond(streamID: streamID, stream: waiting, outcome: outcome)
                self.flushNow()
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

        guard head.method == "POST" else {
            outcome.reject(.methodNotAllowed)
            return outcome
        }
        switch SandboxRules.deviceToken(fromPath: head.path) {
        case .ok(let token): outcome.deviceToken = token
        case .rejected(let reason):
            outcome.reject(reason)
            return outcome
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
            if lastAllowedTopic?.keyIndex != keyIndex || lastAllowedTopic?.topic != topic {
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
        guard pushType.agrees(withTopic: topic) else {
            outcome.reject(.deviceTokenNotForTopic)
            return outcome
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
        if let state = core.devices[token] {
            switch state {
            case .unregistered(let since):
                outcome.reject(.unregistered, timestamp: since)
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

        // Injected faults, on requests that would have succeeded.
        if faults.fraction500 > 0 || faults.fraction503 > 0 {
            let draw = random.nextUnit()
            if draw < faults.fraction500 {
                outcome.reject(.internalServerError)
            } else if draw < faults.fraction500 + faults.fraction503 {
                outcome.reject(.serviceUnavailable)
            }
        }
        return outcome
    }

    /// The last topic that passed the syntax check on this connection (providers repeat topics).
    private var lastGoodTopic: String? = nil
    /// The last key and topic found allowed on this connection.
    private var lastAllowedTopic: (keyIndex: Int, topic: String)? = nil

    private func topicSyntax(_ topic: String) -> APNsReason? {
        if let lastGoodTopic, lastGoodTopic == topic { return nil }
        if let reason = SandboxRules.topicSyntax(topic) { return reason }
        lastGoodTopic = topic
        return nil
    }

    /// Checks `authorization: bearer <JWT>`; each distinct token is verified once (cached).
    private func authenticate(_ authorization: String?, now: Date) -> Checked<VerifiedToken> {
        guard let authorization else { return .rejected(.missingProviderToken) }
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
        if let lastToken, let lastTokenVerdict, lastToken == jwt {
            verified = lastTokenVerdict
            sameAsLast = true
        } else {
            switch core.verifier.verify(jwt: String(jwt)) {
            case .success(let v): verified = v
            case .failure: return .rejected(.invalidProviderToken)
            }
            sameAsLast = false
        }
        if let reason = TokenAge.check(issuedAt: verified.issuedAt, now: now, lifetime: core.tokenLifetime) {
            return .rejected(reason)
        }
        if !sameAsLast {
            let allowed: Bool
            switch core.tokenUpdateScope {
            case .key:
                allowed = core.observeTokenForKey(keyIndex: verified.keyIndex, issuedAt: verified.issuedAt, now: now)
            case .connection:
                allowed = connectionTracker.observe(
                    keyIndex: verified.keyIndex, issuedAt: verified.issuedAt, now: now,
                    minimumInterval: core.tokenUpdateMinimumInterval)
            }
            guard allowed else { return .rejected(.tooManyProviderTokenUpdates) }
            lastToken = String(jwt)
            lastTokenVerdict = verified
        }
        return .ok(verified)
    }

    // MARK: Responses

    private func respond(streamID: Int32, stream: Stream, outcome: Outcome) {
        guard let session, !closed else { return }
        streams.removeValue(forKey: streamID)

        let requestID = stream.head.apnsID.flatMap { SandboxRules.isCanonicalUUID($0) ? $0 : nil }
        let apnsID = requestID ?? newApnsID()

        // apns-id changes with every answer: never worth a dynamic table entry.
        if let reason = outcome.reason {
            session.respond(
                streamID: streamID,
                headers: [
                    (":status", Self.statusText(outcome.status), false),
                    ("content-type", "application/json", false),
                    ("apns-id", apnsID, true),
                ],
                body: Array(APNsErrorBody(reason: reason, timestamp: outcome.timestamp).encoded()))
        } else {
            session.respond(streamID: streamID, headers: [(":status", "200", false), ("apns-id", apnsID, true)], body: nil)
        }
        // Answered before the request ended (payload too large): the rest of the request is
        // reset (NO_ERROR) once the answer is out.
        if !stream.endStreamReceived { resetAfterResponse.insert(streamID) }
        needsFlush = true

        core.recorder.record(processed: true, status: outcome.status, reason: outcome.reason) {
            makeRecord(
                streamID: streamID, stream: stream, outcome: outcome, apnsID: apnsID,
                fromRequest: requestID != nil, processed: true, cutOff: nil)
        }

        processedCount += 1
        afterResponse(streamID: streamID, success: outcome.status == 200)
    }

    private func afterResponse(streamID: Int32, success: Bool) {
        if core.dropStreamLimitAfterRejection, tokenAccepted || !isTokenConnection {
            let wanted = success ? core.maxConcurrentStreams : 1
            if wanted != advertisedLimit { setStreamLimit(wanted) }
        }
        if let dropAfter = faults.dropAfter, processedCount >= dropAfter {
            drop()
            return
        }
        if let goawayAfter = faults.goawayAfter, processedCount == goawayAfter, goawayLastStreamID == nil {
            sendGoAway(lastStreamID: streamID, reason: faults.goawayReason)
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

    /// apns-ids the sandbox assigns: random version-4 UUIDs from a per-connection generator
    /// (seeded from the system's), without a system call per request.
    private var idGenerator: SplitMix64 = {
        var system = SystemRandomNumberGenerator()
        return SplitMix64(seed: system.next())
    }()

    private func newApnsID() -> String {
        var high = idGenerator.next()
        var low = idGenerator.next()
        high = (high & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000  // version 4
        low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000  // variant 10
        return String(unsafeUninitializedCapacity: 36) { buffer in
            let digits: StaticString = "0123456789abcdef"
            var i = 0
            for n in 0..<32 {
                if n == 8 || n == 12 || n == 16 || n == 20 {
                    buffer[i] = UInt8(ascii: "-")
                    i += 1
                }
                let word = n < 16 ? high : low
                let shift = UInt64(60 - 4 * (n % 16))
                buffer[i] = digits.utf8Start[Int((word >> shift) & 0xf)]
                i += 1
            }
            return i
        }
    }

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
        let deviceToken =
            outcome?.deviceToken ?? SandboxRules.deviceToken(fromPath: head.path).value
        return SandboxRecordedRequest(
            sequence: stream.sequence, connectionID: connectionID, streamID: Int(streamID), authKind: auth.kind,
            teamID: outcome?.teamID, keyID: outcome?.keyID, topic: outcome?.topic ?? head.topic,
            deviceToken: deviceToken, apnsID: apnsID, apnsIDFromRequest: fromRequest, method: head.method,
            path: head.path, pushType: head.pushType, priority: head.priority, expiration: head.expiration,
            collapseID: head.collapseID, payloadSize: stream.bodySize, payloadSHA256: hash, payload: payload,
            status: processed ? outcome?.status : nil, reason: processed ? outcome?.reason : nil,
            processed: processed, cutOff: cutOff, receivedAt: stream.receivedAt)
    }

    private func recordCutOff(streamID: Int32, stream: Stream, cause: String) {
        let requestID = stream.head.apnsID.flatMap { SandboxRules.isCanonicalUUID($0) ? $0 : nil }
        core.recorder.record(processed: false, status: nil, reason: nil) {
            makeRecord(
                streamID: streamID, stream: stream, outcome: nil, apnsID: requestID ?? "",
                fromRequest: requestID != nil, processed: false, cutOff: cause)
        }
    }

    // MARK: Connection control

    private func setStreamLimit(_ limit: Int) {
        guard let session, !closed else { return }
        advertisedLimit = limit
        session.submitSettings(maxConcurrentStreams: limit)
        needsFlush = true
        if !inRead { flushNow() }
    }

    /// Runtime change of the stream limit (``APNsSandbox/setMaxConcurrentStreams(_:)``).
    func maxConcurrentStreamsChanged(_ limit: Int) {
        guard !isTokenConnection || tokenAccepted else { return }
        setStreamLimit(limit)
    }

    /// Shutdown GOAWAY: every stream already opened is still answered; later ones are refused.
    func goAwayForShutdown(reason: APNsReason) {
        sendGoAway(lastStreamID: highestStreamID, reason: reason)
        flushNow()
    }

    private func sendGoAway(lastStreamID: Int32, reason: APNsReason) {
        guard let context, let session, !closed else { return }
        let last = goawayLastStreamID.map { min($0, lastStreamID) } ?? lastStreamID
        goawayLastStreamID = last
        // Streams above the last one are never processed: refused, so the client may retry them.
        for (streamID, stream) in streams.sorted(by: { $0.key < $1.key }) where streamID > last {
            streams.removeValue(forKey: streamID)
            session.resetStream(streamID, errorCode: NGHTTP2_REFUSED_STREAM)
            recordCutOff(streamID: streamID, stream: stream, cause: "goaway-refused")
        }
        session.goAway(lastStreamID: last, debugData: Array(APNsErrorBody(reason: reason).encoded()))
        needsFlush = true
        if !inRead { flushNow() }
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
        flushNow()
        closeNow()
    }

    private func closeIfIdle() {
        guard closeWhenIdle, streams.isEmpty, let context, !closed else { return }
        context.eventLoop.assumeIsolated().execute { [self] in
            self.flushNow()
            self.closeNow()
        }
    }

    private func closeNow() {
        guard let context, !closed else { return }
        closed = true
        context.close(promise: nil)
    }

    /// Writes what nghttp2 has to send (one buffer per write) and flushes. Closes the connection
    /// once nghttp2 neither reads nor writes any more (after a GOAWAY for a connection error).
    private func flushNow() {
        guard let context, let session, !closed else { return }
        needsFlush = false
        var wrote = false
        var idleRounds = 0
        while context.channel.isWritable {
            var output = context.channel.allocator.buffer(capacity: 4096)
            do {
                try session.send(into: &output, limit: Self.outputChunk)
            } catch {
                core.logger.debug(
                    "sandbox connection error",
                    metadata: ["herald.connection": "\(connectionID)", "herald.error": "\(error)"])
                if output.readableBytes > 0 { context.write(wrapOutboundOut(output), promise: nil) }
                context.flush()
                closeNow()
                return
            }
            // Sending may report responses that went out (resets to follow): act on them.
            handleEvents()
            if output.readableBytes == 0 {
                // Once more if acting on the events queued frames (resets); never spin.
                idleRounds += 1
                if idleRounds > 1 || !session.wantsWrite { break }
                continue
            }
            idleRounds = 0
            context.write(wrapOutboundOut(output), promise: nil)
            wrote = true
        }
        if wrote { context.flush() }
        if !session.isAlive {
            // nghttp2 ended the session (a connection error): its GOAWAY is out; close once written.
            closeNow()
        }
    }

    private func refreshFaults() {
        let version = core.faultsVersion
        guard version != faultsVersion else { return }
        faultsVersion = version
        faults = core.faults
        random = SplitMix64(seed: Self.mix(seed: faults.seed, connectionID: connectionID))
    }
}
