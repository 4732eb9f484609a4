import CNGHTTP2
import HTTP2Engine
import NIOCore
import NIOEmbedded
import Testing

@Suite("HTTP2Engine: client and server sessions over libnghttp2")
struct HTTP2EngineTests {
    @Test("A request with a body is answered; both sides release the stream")
    func roundTrip() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        pair.answerEveryRequest { _ in ByteBuffer(string: #"{"reason":"BadDeviceToken"}"#) }
        try pair.exchange()
        let id = try pair.clientEngine.submitRequest(
            EnginePair.request(extra: [HTTP2Header(name: "apns-topic", value: "com.example")]), body: EnginePair.buffer(#"{"aps":{}}"#))
        try pair.exchange()

        let requestHeads = pair.serverEvents.headers(on: id)
        #expect(requestHeads.count == 1)
        #expect(requestHeads.first?.map(\.pair).contains("apns-topic: com.example") == true)
        #expect(requestHeads.first?.map(\.pair).contains(":path: /3/device/abc") == true)
        #expect(pair.serverEvents.body(on: id) == Array(#"{"aps":{}}"#.utf8))
        #expect(pair.clientEvents.headers(on: id).first?.first?.pair == ":status: 200")
        #expect(pair.clientEvents.body(on: id) == Array(#"{"reason":"BadDeviceToken"}"#.utf8))
        #expect(pair.clientEvents.closed(id) == .noError)
        #expect(pair.serverEvents.closed(id) == .noError)
        #expect(pair.clientEngine.trackedStreams == 0)
        #expect(pair.serverEngine.trackedStreams == 0)
    }

    @Test(
        "Header blocks and DATA split across reads arrive whole (the receive arena keeps a partial frame's bytes)",
        arguments: Array(1...64) + [97, 128, 200, 333, 500, 1000])
    func framesSplitAcrossReads(chunkSize: Int) throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        var bodies: [Int32: String] = [:]
        pair.answerEveryRequest(status: "400") { id in ByteBuffer(string: #"{"reason":"BadDeviceToken","stream":\#(id)}"#) }
        try pair.exchange(chunkSize: chunkSize)
        var ids: [Int32] = []
        for index in 0..<12 {
            let body = #"{"aps":{"alert":"\#(String(repeating: "x", count: 40 * index))"}}"#
            let id = try pair.clientEngine.submitRequest(
                EnginePair.request(
                    path: "/3/device/\(String(repeating: "ab", count: 32))",
                    extra: [
                        HTTP2Header(name: "apns-topic", value: "com.example.\(index)"),
                        HTTP2Header(name: "authorization", value: "bearer " + String(repeating: "t\(index)", count: 90), indexing: .neverIndexed),
                    ]),
                body: EnginePair.buffer(body))
            bodies[id] = body
            ids.append(id)
        }
        try pair.exchange(rounds: 200, chunkSize: chunkSize)
        for (index, id) in ids.enumerated() {
            let head = pair.serverEvents.headers(on: id).first ?? []
            #expect(head.map(\.name) == [":method", ":scheme", ":path", ":authority", "apns-topic", "authorization"])
            #expect(head.first { $0.name == "apns-topic" }?.value == "com.example.\(index)")
            #expect(head.first { $0.name == "authorization" }?.indexing == .neverIndexed)
            #expect(head.first { $0.name == "authorization" }?.value == "bearer " + String(repeating: "t\(index)", count: 90))
            #expect(pair.serverEvents.body(on: id) == Array((bodies[id] ?? "").utf8))
            let answer = pair.clientEvents.headers(on: id).first
            #expect(answer?.first?.pair == ":status: 400")
            #expect(pair.clientEvents.body(on: id) == Array(#"{"reason":"BadDeviceToken","stream":\#(id)}"#.utf8))
            #expect(pair.clientEvents.closed(id) == .noError)
        }
        #expect(pair.clientErrors.errors.isEmpty)
        #expect(pair.serverErrors.errors.isEmpty)
    }

    @Test("A received header block reads as bytes and as HTTP2Header values alike")
    func headerBlockAccess() {
        let block = HTTP2HeaderBlock([
            HTTP2Header(name: ":status", value: "200"),
            HTTP2Header(name: "apns-id", value: "3f6c4d8e-2a1b-4c5d-8e9f-0a1b2c3d4e5f", indexing: .neverIndexed),
            HTTP2Header(name: "apns-id", value: "second"),
        ])
        #expect(block.count == 3)
        #expect(Array(block).map(\.name) == [":status", "apns-id", "apns-id"])
        #expect(block.value(of: "apns-id") == "3f6c4d8e-2a1b-4c5d-8e9f-0a1b2c3d4e5f")
        #expect(block.value(of: "content-type") == nil)
        var flags: [Bool] = []
        block.forEachField { _, _, neverIndexed in flags.append(neverIndexed) }
        #expect(flags == [false, true, false])
        #expect(block.description == ":status, apns-id, apns-id")
        #expect(HTTP2HeaderBlock([]).isEmpty)
    }

    @Test("A field given as bytes is the same field as one given as text")
    func headerValueForms() {
        let text = HTTP2Header(name: "apns-id", value: "3f6c4d8e-2a1b-4c5d-8e9f-0a1b2c3d4e5f", indexing: .neverIndexed)
        let bytes = HTTP2Header(name: "apns-id", utf8: Array(text.value.utf8), indexing: .neverIndexed)
        #expect(bytes.value == text.value)
        #expect(bytes == text)
        #expect(Set([bytes, text]).count == 1)
        #expect(bytes != HTTP2Header(name: "apns-id", utf8: Array(text.value.utf8)))
        #expect(bytes != HTTP2Header(name: "apns-id", utf8: Array(text.value.utf8.dropLast()), indexing: .neverIndexed))
        #expect(HTTP2HeaderBlock([bytes]).value(of: "apns-id") == text.value)
        var changed = bytes
        changed.value = "other"
        #expect(changed == HTTP2Header(name: "apns-id", value: "other", indexing: .neverIndexed))
    }

    @Test("Header bytes are copied at submit: the caller's strings may go away before the frame is sent")
    func headerLifetime() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        pair.answerEveryRequest()
        try pair.exchange()
        var ids: [Int32] = []
        // One array rewritten in place for every request, as a connection writes its apns-ids.
        var scratch: [UInt8] = []
        for index in 0..<20 {
            // Built from fresh heap strings that die at the end of each iteration, long before the flush.
            let value = String(repeating: "v\(index)-", count: 40)
            var headers = EnginePair.request(path: "/3/device/\(String(repeating: "a", count: 60 + index))")
            headers.append(HTTP2Header(name: "x-large-\(index)", value: value))
            scratch.removeAll(keepingCapacity: true)
            scratch.append(contentsOf: String(repeating: "b\(index)-", count: 12).utf8)
            headers.append(HTTP2Header(name: "x-bytes", utf8: scratch))
            ids.append(try pair.clientEngine.submitRequest(headers, body: nil))
            headers.removeAll()
        }
        try pair.exchange()
        for (index, id) in ids.enumerated() {
            let head = pair.serverEvents.headers(on: id).first ?? []
            #expect(head.contains { $0.name == "x-large-\(index)" && $0.value == String(repeating: "v\(index)-", count: 40) })
            #expect(head.contains { $0.name == "x-bytes" && $0.value == String(repeating: "b\(index)-", count: 12) })
            #expect(head.contains { $0.name == ":path" && $0.value.hasSuffix(String(repeating: "a", count: 60 + index)) })
            #expect(pair.clientEvents.closed(id) == .noError)
        }
    }

    @Test("SETTINGS MAX_CONCURRENT_STREAMS down to 1 and back reaches the client as events and in nghttp2's view")
    func maxConcurrentStreams() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        #expect(pair.clientEvents.settings.first?.contains(.maxConcurrentStreams(100)) == true)
        #expect(pair.clientEngine.remoteMaxConcurrentStreams == 100)

        try pair.serverEngine.sendSettings([.maxConcurrentStreams(1)])
        try pair.exchange()
        #expect(pair.clientEvents.settings.last == [.maxConcurrentStreams(1)])
        #expect(pair.clientEngine.remoteMaxConcurrentStreams == 1)
        #expect(pair.serverEvents.events.contains { if case .settingsAcknowledged = $0 { true } else { false } })

        try pair.serverEngine.sendSettings([.maxConcurrentStreams(500)])
        try pair.exchange()
        #expect(pair.clientEngine.remoteMaxConcurrentStreams == 500)
    }

    @Test("A server refuses streams above the limit it sent but the client had not yet seen: each ends with a REFUSED_STREAM close on both sides, without a headers event")
    func streamsAboveAnUnacknowledgedLimitAreRefused() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        // The lower limit is sent, but the client's three requests leave before it arrives.
        try pair.serverEngine.sendSettings([.maxConcurrentStreams(1)])
        let ids = try (0..<3).map { _ in try pair.clientEngine.submitRequest(EnginePair.request(), body: EnginePair.buffer("{}")) }
        try pair.exchange()
        #expect(ids == [1, 3, 5])
        #expect(pair.serverEvents.headers(on: 1).count == 1)
        #expect(pair.serverEvents.closed(1) == nil)
        for id in [Int32(3), 5] {
            #expect(pair.serverEvents.headers(on: id).isEmpty)
            #expect(pair.serverEvents.closed(id) == .refusedStream)
            #expect(pair.clientEvents.closed(id) == .refusedStream)
        }
        #expect(pair.serverEngine.trackedStreams == 1)
        #expect(pair.server.isActive)
    }

    @Test("GOAWAY from the server: streams above its last stream ID close as refused, those below finish, then the connection closes")
    func goAwayFromServer() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        let ids = try (0..<3).map { _ in try pair.clientEngine.submitRequest(EnginePair.request(), body: EnginePair.buffer("{}")) }
        try pair.exchange()
        #expect(ids == [1, 3, 5])
        try pair.serverEngine.goAway(lastStreamID: 1, errorCode: .noError, debugData: Array(#"{"reason":"Shutdown"}"#.utf8))
        try pair.exchange()

        var goAway: (Int32, HTTP2ErrorCode, String)?
        for case .goAway(let last, let code, var data) in pair.clientEvents.events {
            goAway = (last, code, data.readString(length: data.readableBytes) ?? "")
        }
        #expect(goAway?.0 == 1)
        #expect(goAway?.1 == .noError)
        #expect(goAway?.2 == #"{"reason":"Shutdown"}"#)
        #expect(pair.clientEvents.closed(3) == .refusedStream)
        #expect(pair.clientEvents.closed(5) == .refusedStream)
        #expect(pair.clientEvents.closed(1) == nil)
        #expect(pair.client.isActive)

        try pair.serverEngine.submitResponse(streamID: 1, headers: [HTTP2Header(name: ":status", value: "200")], body: nil)
        try pair.exchange()
        #expect(pair.clientEvents.closed(1) == .noError)
        #expect(pair.clientEvents.headers(on: 1).first?.first?.pair == ":status: 200")
        // Nothing left to read or write on either side: both engines close their channels.
        #expect(!pair.client.isActive)
        #expect(!pair.server.isActive)
    }

    @Test("GOAWAY from the client reaches the server with the last stream ID")
    func goAwayFromClient() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        try pair.clientEngine.goAway(lastStreamID: 0, errorCode: .noError)
        try pair.exchange()
        let received = pair.serverEvents.events.contains {
            if case .goAway(0, .noError, _) = $0 { true } else { false }
        }
        #expect(received)
    }

    @Test("RST_STREAM both ways: a reset stream closes with its code on each side")
    func resetStream() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        let first = try pair.clientEngine.submitRequest(EnginePair.request(), body: nil)
        try pair.exchange()
        try pair.clientEngine.resetStream(first, errorCode: .cancel)
        try pair.exchange()
        #expect(pair.serverEvents.events.contains { if case .resetReceived(first, .cancel) = $0 { true } else { false } })
        #expect(pair.serverEvents.closed(first) == .cancel)
        #expect(pair.clientEvents.closed(first) == .cancel)

        let second = try pair.clientEngine.submitRequest(EnginePair.request(), body: nil)
        try pair.exchange()
        try pair.serverEngine.resetStream(second, errorCode: .refusedStream)
        try pair.exchange()
        #expect(pair.clientEvents.events.contains { if case .resetReceived(second, .refusedStream) = $0 { true } else { false } })
        #expect(pair.clientEvents.closed(second) == .refusedStream)
        #expect(pair.clientEngine.trackedStreams == 0)
        #expect(pair.serverEngine.trackedStreams == 0)
    }

    @Test("PING is acknowledged with its 8 bytes")
    func ping() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        try pair.clientEngine.ping(0x0102_0304_0506_0708)
        try pair.exchange()
        #expect(pair.clientEvents.events.contains { if case .pingAcknowledged(0x0102_0304_0506_0708) = $0 { true } else { false } })
    }

    @Test("Flow control: bodies far above the initial 65,535-byte windows arrive whole, both ways")
    func flowControl() throws {
        let size = 300_000
        let pair = try EnginePair(
            client: .init(mode: .client, initialSettings: [.enablePush(0)], connectionWindowSize: 65_535),
            server: .init(mode: .server, initialSettings: [.maxConcurrentStreams(10)], connectionWindowSize: 65_535))
        defer { pair.finish() }
        let big = ByteBuffer(repeating: 0x61, count: size)
        pair.answerEveryRequest { _ in big }
        try pair.exchange()
        let id = try pair.clientEngine.submitRequest(
            EnginePair.request(extra: [HTTP2Header(name: "content-length", value: "\(size)")]), body: big)
        try pair.exchange(rounds: 500)
        #expect(pair.serverEvents.body(on: id).count == size)
        #expect(pair.clientEvents.body(on: id).count == size)
        #expect(pair.clientEvents.closed(id) == .noError)
        // The windows were replenished with WINDOW_UPDATE (nghttp2's automatic consumption).
        #expect(pair.clientEngine.localConnectionWindow > 0)
    }

    @Test("Output is gathered into bounded buffers and paused while the channel is not writable")
    func boundedAndPausedOutput() throws {
        let limit = 16 * 1024
        let pair = try EnginePair(
            server: .init(mode: .server, initialSettings: [.maxConcurrentStreams(10)], maxBytesPerFlush: limit))
        defer { pair.finish() }
        pair.answerEveryRequest { _ in ByteBuffer(repeating: 0x62, count: 200_000) }
        try pair.exchange()
        pair.serverWrites.removeAll()
        let id = try pair.clientEngine.submitRequest(EnginePair.request(), body: nil)
        try pair.exchange(rounds: 500)
        #expect(pair.clientEvents.body(on: id).count == 200_000)
        #expect(pair.serverWrites.count > 1)
        // One buffer holds at most `limit` bytes plus the frame that crossed it (16 KiB + 9).
        #expect(pair.serverWrites.allSatisfy { $0.readableBytes <= limit + 16_384 + 9 })

        // Not writable: nothing is written; writable again: the answer goes out.
        pair.server.isWritable = false
        let second = try pair.clientEngine.submitRequest(EnginePair.request(), body: nil)
        try pair.exchange()
        #expect(pair.clientEvents.closed(second) == nil)
        #expect(pair.clientEvents.body(on: second).isEmpty)
        pair.server.isWritable = true
        pair.server.pipeline.fireChannelWritabilityChanged()
        try pair.exchange(rounds: 500)
        #expect(pair.clientEvents.body(on: second).count == 200_000)
        #expect(pair.clientEvents.closed(second) == .noError)
    }

    @Test(
        "Requests submitted while answers are read go out after every writeAfterRequests, the rest when the read ends",
        arguments: [(0, 0), (4, 2), (3, 3)])
    func writesDuringARead(writeAfter: Int, writesDuringRead: Int) throws {
        var clientConfiguration = HTTP2EngineHandler.Configuration(mode: .client)
        clientConfiguration.writeAfterRequests = writeAfter
        let pair = try EnginePair(client: clientConfiguration)
        defer { pair.finish() }
        pair.answerEveryRequest()
        try pair.exchange()
        for _ in 0..<10 { _ = try pair.clientEngine.submitRequest(EnginePair.request(), body: nil) }
        // Each answer's close sends the next request, as a completion does.
        var sent: [Int32] = []
        pair.clientEvents.onEvent = { engine, event in
            guard case .streamClosed = event, sent.count < 10, let id = try? engine.submitRequest(EnginePair.request(), body: nil) else { return }
            sent.append(id)
        }
        // The ten requests reach the server; its ten answers reach the client in one read.
        pair.client.embeddedEventLoop.run()
        while let bytes = try pair.client.readOutbound(as: ByteBuffer.self) { try pair.server.writeInbound(bytes) }
        pair.server.pipeline.fireChannelReadComplete()
        pair.server.embeddedEventLoop.run()
        var answers = ByteBuffer()
        while var bytes = try pair.server.readOutbound(as: ByteBuffer.self) { answers.writeBuffer(&bytes) }
        // One channelRead, and not yet its channelReadComplete (EmbeddedChannel.writeInbound fires both).
        pair.client.pipeline.fireChannelRead(answers)
        #expect(sent.count == 10)
        var during: [ByteBuffer] = []
        while let bytes = try pair.client.readOutbound(as: ByteBuffer.self) { during.append(bytes) }
        #expect(during.count == writesDuringRead)
        for bytes in during { try pair.server.writeInbound(bytes) }
        // The rest (10 is not a multiple of the step) goes out when the read ends.
        pair.client.pipeline.fireChannelReadComplete()
        var after = 0
        while let bytes = try pair.client.readOutbound(as: ByteBuffer.self) {
            after += 1
            try pair.server.writeInbound(bytes)
        }
        #expect(after == (writeAfter > 0 && 10 % writeAfter == 0 ? 0 : 1))
        pair.server.pipeline.fireChannelReadComplete()
        try pair.exchange()
        #expect(sent.allSatisfy { pair.clientEvents.closed($0) == .noError })
        #expect(pair.clientEngine.trackedStreams == 0)
    }

    @Test("An error raised inside a callback is kept, fired down the pipeline after nghttp2 returns, and closes the connection")
    func callbackErrorIsRethrown() throws {
        let pair = try EnginePair(
            client: .init(mode: .client, initialSettings: [.enablePush(0)], maxHeaderListSize: 1024))
        defer { pair.finish() }
        pair.serverEvents.onEvent = { engine, event in
            if case .headers(let id, _, true) = event {
                try? engine.submitResponse(
                    streamID: id,
                    headers: [HTTP2Header(name: ":status", value: "200"), HTTP2Header(name: "x-big", value: String(repeating: "z", count: 4096))],
                    body: nil)
            }
        }
        try pair.exchange()
        _ = try pair.clientEngine.submitRequest(EnginePair.request(), body: nil)
        try pair.exchange()
        #expect(pair.clientErrors.errors.count == 1)
        #expect(pair.clientErrors.errors.first as? HTTP2EngineError == .headerListTooLarge(limit: 1024))
        #expect(!pair.client.isActive)
        #expect(throws: HTTP2EngineError.notActive) { try pair.clientEngine.submitRequest(EnginePair.request(), body: nil) }
    }

    @Test("Hostile bytes: a server fed something other than the HTTP/2 preface fails and closes, without trapping")
    func garbageInput() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.server.writeInbound(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        pair.server.embeddedEventLoop.run()
        #expect(pair.serverErrors.errors.first is HTTP2EngineError)
        #expect(!pair.server.isActive)
    }

    @Test("A header with CR/LF in its value is refused before anything is sent")
    func invalidHeaderRefused() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        try pair.exchange()
        #expect(throws: HTTP2EngineError.invalidHeader) {
            try pair.clientEngine.submitRequest(EnginePair.request(extra: [HTTP2Header(name: "x-bad", value: "a\r\nb: c")]), body: nil)
        }
        #expect(throws: HTTP2EngineError.invalidHeader) {
            try pair.clientEngine.submitRequest(EnginePair.request(extra: [HTTP2Header(name: "X-Upper", value: "a")]), body: nil)
        }
        #expect(throws: HTTP2EngineError.wrongMode) {
            try pair.serverEngine.submitRequest(EnginePair.request(), body: nil)
        }
    }

    @Test("HPACK: authorization is never indexed on its own, :path stays out of the dynamic table, NO_INDEX reaches the peer")
    func hpackIndexing() throws {
        let pair = try EnginePair()
        defer { pair.finish() }
        pair.answerEveryRequest()
        try pair.exchange()
        pair.clientWrites.removeAll()
        for index in 0..<2 {
            _ = try pair.clientEngine.submitRequest(
                EnginePair.request(
                    path: "/3/device/\(index)",
                    extra: [
                        HTTP2Header(name: "authorization", value: "bearer eyJhbGciOiJFUzI1NiJ9.token.\(index)"),
                        HTTP2Header(name: "apns-id", value: "id-\(index)", indexing: index == 0 ? .automatic : .neverIndexed),
                        HTTP2Header(name: "apns-topic", value: "com.example"),
                    ]),
                body: nil)
        }
        try pair.exchange()

        // What the server's engine reports, per field.
        let first = pair.serverEvents.headers(on: 1).first ?? []
        let second = pair.serverEvents.headers(on: 3).first ?? []
        #expect(first.first { $0.name == "authorization" }?.indexing == .neverIndexed)
        #expect(first.first { $0.name == "apns-id" }?.indexing == .automatic)
        #expect(second.first { $0.name == "apns-id" }?.indexing == .neverIndexed)

        // What entered the dynamic table: decode the client's bytes with a standalone inflater.
        let table = try HPACKProbe.dynamicTable(afterDecoding: pair.clientWrites)
        #expect(!table.contains { $0.name == ":path" })
        #expect(!table.contains { $0.name == "authorization" })
        #expect(table.filter { $0.name == "apns-id" }.map(\.value) == ["id-0"])
        #expect(table.contains { $0.name == "apns-topic" && $0.value == "com.example" })
    }
}

/// Reads HEADERS blocks out of raw HTTP/2 bytes (9-byte frame headers) and feeds them to an
/// `nghttp2_hd_inflater`, then lists its dynamic table.
enum HPACKProbe {
    struct Entry: Equatable {
        var name: String
        var value: String
    }

    static func dynamicTable(afterDecoding writes: [ByteBuffer]) throws -> [Entry] {
        var all = ByteBuffer()
        for var write in writes { all.writeBuffer(&write) }
        var bytes = all.readBytes(length: all.readableBytes) ?? []
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        if bytes.starts(with: preface) { bytes.removeFirst(preface.count) }

        var inflater: OpaquePointer?
        guard nghttp2_hd_inflate_new(&inflater) == 0, let inflater else { throw HTTP2EngineError.notActive }
        defer { nghttp2_hd_inflate_del(inflater) }
        var offset = 0
        while offset + 9 <= bytes.count {
            let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            let type = bytes[offset + 3]
            let flags = bytes[offset + 4]
            let payloadStart = offset + 9
            guard payloadStart + length <= bytes.count else { break }
            if type == 0x1 || type == 0x9 {
                var block = Array(bytes[payloadStart..<(payloadStart + length)])
                if type == 0x1 {
                    var padding = 0
                    if flags & 0x8 != 0 { padding = Int(block.removeFirst()) }
                    if flags & 0x20 != 0 { block.removeFirst(5) }
                    block.removeLast(padding)
                }
                try inflate(inflater, block, final: flags & 0x4 != 0)
            }
            offset = payloadStart + length
        }
        var entries: [Entry] = []
        let count = nghttp2_hd_inflate_get_num_table_entries(inflater)
        let staticEntries = 61
        if count > staticEntries {
            for index in (staticEntries + 1)...count {
                guard let entry = nghttp2_hd_inflate_get_table_entry(inflater, index) else { continue }
                let name = String(decoding: UnsafeRawBufferPointer(start: entry.pointee.name, count: entry.pointee.namelen), as: UTF8.self)
                let value = String(decoding: UnsafeRawBufferPointer(start: entry.pointee.value, count: entry.pointee.valuelen), as: UTF8.self)
                entries.append(Entry(name: name, value: value))
            }
        }
        return entries
    }

    private static func inflate(_ inflater: OpaquePointer, _ block: [UInt8], final: Bool) throws {
        try block.withUnsafeBufferPointer { buffer in
            var position = 0
            while true {
                var nv = nghttp2_nv()
                var flags: Int32 = 0
                let remaining = buffer.count - position
                let consumed = nghttp2_hd_inflate_hd2(
                    inflater, &nv, &flags, buffer.baseAddress.map { $0 + position }, remaining, final ? 1 : 0)
                if consumed < 0 { throw HTTP2EngineError.library(Int32(consumed)) }
                position += consumed
                if flags & Int32(NGHTTP2_HD_INFLATE_FINAL.rawValue) != 0 {
                    nghttp2_hd_inflate_end_headers(inflater)
                    break
                }
                if flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) == 0, consumed == 0, position >= buffer.count { break }
            }
        }
    }
}
