import CNGHTTP2
import HTTP2Engine
import NIOCore

/// Sees what a client does on the wire that the HTTP/2 engine does not report: how it encodes
/// its headers (what entered the HPACK dynamic table, field by field), PRIORITY frames and
/// HEADERS with priority, and streams opened beyond the MAX_CONCURRENT_STREAMS it acknowledged.
/// It reads a copy of the connection's plain-text input (``SandboxWireAuditHandler``), before
/// the engine's nghttp2 session does; nothing it does changes what the engine sees.
///
/// nghttp2's session reports only the never-indexed flag of a field, so the auditor keeps a
/// second, standalone HPACK decoder (`nghttp2_hd_inflater`) that mirrors the client's encoder:
/// it is fed every header block of the connection, in order, and after each decoded field the
/// auditor reads the decoder's table back (`nghttp2_hd_inflate_get_num_table_entries`,
/// `…_get_table_entry`, `…_get_dynamic_table_size`) to learn whether the field was added.
///
/// Header blocks are found in the raw bytes before they reach the session, from the 9-byte frame
/// headers (RFC 9113 §4.1): the connection preface is skipped, HEADERS payloads lose their
/// padding and priority fields, CONTINUATION payloads are appended until END_HEADERS, and frames
/// may be split anywhere across reads. The only HPACK the auditor itself reads is the first byte
/// of each representation the decoder delimited (RFC 7541 §6: `01` is "with incremental
/// indexing"), a cross-check of the table read-back.
final class SandboxWireAuditor {
    enum Finding: Equatable {
        /// A field encoded against Apple's advice.
        case hpack(streamID: Int32, text: String)
        case priorityFrame
        case headersWithPriority
        /// A new stream while as many were open as the client had acknowledged allowing.
        case streamAboveLimit(streamID: Int32)
    }

    /// Findings since the handler last took them.
    private(set) var findings: [Finding] = []
    /// False once the auditor lost track (a block it could not decode or too large to keep):
    /// nghttp2 fails such a connection itself; the audit stops rather than guess.
    private(set) var isTracking = true

    private var inflater: OpaquePointer?
    private var rules = HPACKAudit()

    private var prefaceRemaining = 24
    private var frameHeader: [UInt8] = []
    private var frame: (type: UInt8, flags: UInt8, streamID: Int32, length: Int)? = nil
    private var payloadRemaining = 0
    private var payload: [UInt8] = []
    private var block: [UInt8] = []
    private var blockStreamID: Int32 = 0
    /// The last header block decoded, kept only when it was table-neutral (see `decodeBlock`).
    private var lastBlock: [UInt8] = []
    private var lastBlockNeutral = false
    /// Blocks not decoded because they repeated a table-neutral block byte for byte.
    private(set) var repeatsSkipped = 0

    /// Streams the client opened that are not closed yet, as nghttp2 counts them: a stream
    /// counts from its HEADERS until the engine reports it closed — answered, reset, or refused
    /// by nghttp2 on arrival (above the limit last sent, before the client acknowledged it:
    /// nghttp2 never opens such a stream, the engine reports its refusal as a close). Not
    /// counted: streams after the sandbox's GOAWAY (nghttp2 ignores them).
    private var openStreams: Set<Int32> = []
    /// The sandbox sent GOAWAY: later streams are ignored by nghttp2, so not counted either.
    private var goAwaySent = false
    /// False once the client left more SETTINGS unacknowledged than ``maximumUnacknowledgedLimits``:
    /// the stream-limit audit stops there (the HPACK audit goes on), so the list stays bounded.
    private(set) var isTrackingLimits = true
    private var highestStreamID: Int32 = 0
    /// MAX_CONCURRENT_STREAMS values sent and not yet acknowledged, oldest first.
    private var unacknowledgedLimits: [Int] = []
    private var acknowledgedLimit = Int.max
    /// Streams the client opened before it acknowledged any SETTINGS (so before it could know
    /// the limit) beyond the limit last sent: the limit they need, until taken.
    private var unannouncedBurstLimit: Int? = nil

    /// Frames larger than this are a connection error for nghttp2 (SETTINGS_MAX_FRAME_SIZE).
    static let maximumFrameSize = 16_384
    /// Header blocks larger than this are not audited (nghttp2's decoder refuses far less).
    static let maximumBlockSize = 256 * 1024
    /// Open streams followed at most (the engine allows fewer).
    static let maximumTrackedStreams = 100_000

    /// True (the default): the value of a literal that never enters the table is not decoded
    /// (``unindexedLiteral(_:)``); false decodes every value (the tests compare the two).
    let skipsUnindexedValues: Bool
    /// A representation with its value emptied, handed to the decoder in place of the original.
    private var shortened: [UInt8] = []

    init(skipsUnindexedValues: Bool = true) {
        self.skipsUnindexedValues = skipsUnindexedValues
        var created: OpaquePointer?
        if nghttp2_hd_inflate_new(&created) == 0 {
            inflater = created
        } else {
            isTracking = false
        }
    }

    deinit {
        if let inflater { nghttp2_hd_inflate_del(inflater) }
    }

    /// SETTINGS the sandbox may have sent and not yet seen acknowledged (it sends one at most
    /// per answer; a client that acknowledges none stops the stream-limit audit).
    static let maximumUnacknowledgedLimits = 1_000

    /// The sandbox sent SETTINGS with this MAX_CONCURRENT_STREAMS (every SETTINGS it sends has one).
    func sentStreamLimit(_ limit: Int) {
        guard isTrackingLimits else { return }
        guard unacknowledgedLimits.count < Self.maximumUnacknowledgedLimits else {
            isTrackingLimits = false
            unacknowledgedLimits = []
            openStreams = []
            return
        }
        unacknowledgedLimits.append(limit)
    }

    /// The sandbox sent GOAWAY: nghttp2 opens no stream after it.
    func sentGoAway() {
        goAwaySent = true
    }

    /// The engine closed a stream (answered, reset, refused).
    func streamClosed(_ streamID: Int32) {
        openStreams.remove(streamID)
    }

    /// The stream limit that would let nghttp2 take streams the client opened before it could
    /// know the limit (nghttp2 refuses streams above a limit from the moment it is sent, not
    /// from the client's acknowledgement); nil when none are waiting.
    func takeUnannouncedBurstLimit() -> Int? {
        defer { unannouncedBurstLimit = nil }
        return unannouncedBurstLimit
    }

    func takeFindings() -> [Finding] {
        defer { findings.removeAll(keepingCapacity: true) }
        return findings
    }

    /// Reads the raw bytes of one read, before nghttp2 does.
    ///
    /// A frame that lies whole in the read is audited in place (its header block decoded
    /// straight from the read's bytes, no copy); only frames split across reads are gathered.
    func scan(_ buffer: ByteBuffer) {
        guard isTracking else { return }
        buffer.withUnsafeReadableBytes { bytes in
            var index = 0
            while index < bytes.count, isTracking {
                if prefaceRemaining > 0 {
                    let skipped = min(prefaceRemaining, bytes.count - index)
                    prefaceRemaining -= skipped
                    index += skipped
                    continue
                }
                guard let current = frame else {
                    if frameHeader.isEmpty, bytes.count - index >= 9 {
                        let header = UnsafeRawBufferPointer(rebasing: bytes[index..<(index + 9)])
                        let parsed = Self.parseFrameHeader(header)
                        if bytes.count - index - 9 >= parsed.length {
                            // The whole frame is here.
                            index += 9
                            observeFrame(parsed)
                            if Self.carriesHeaderBlock(parsed.type), parsed.length > Self.maximumFrameSize {
                                isTracking = false
                                return
                            }
                            endFrame(parsed, payload: UnsafeRawBufferPointer(rebasing: bytes[index..<(index + parsed.length)]))
                            index += parsed.length
                            continue
                        }
                    }
                    let needed = 9 - frameHeader.count
                    let taken = min(needed, bytes.count - index)
                    frameHeader.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[index..<(index + taken)]))
                    index += taken
                    if frameHeader.count == 9 { beginFrame() }
                    continue
                }
                let taken = min(payloadRemaining, bytes.count - index)
                if Self.carriesHeaderBlock(current.type) {
                    payload.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[index..<(index + taken)]))
                }
                payloadRemaining -= taken
                index += taken
                if payloadRemaining == 0 { endGatheredFrame(current) }
            }
        }
    }

    private typealias FrameHeader = (type: UInt8, flags: UInt8, streamID: Int32, length: Int)

    private static func parseFrameHeader(_ bytes: UnsafeRawBufferPointer) -> FrameHeader {
        let length = Int(bytes[0]) << 16 | Int(bytes[1]) << 8 | Int(bytes[2])
        let streamID = Int32(bytes[5] & 0x7f) << 24 | Int32(bytes[6]) << 16 | Int32(bytes[7]) << 8 | Int32(bytes[8])
        return (type: bytes[3], flags: bytes[4], streamID: streamID, length: length)
    }

    private static func carriesHeaderBlock(_ type: UInt8) -> Bool {
        type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_CONTINUATION.rawValue)
    }

    private func beginFrame() {
        let current = frameHeader.withUnsafeBytes { Self.parseFrameHeader($0) }
        frameHeader.removeAll(keepingCapacity: true)
        observeFrame(current)
        if Self.carriesHeaderBlock(current.type), current.length > Self.maximumFrameSize {
            isTracking = false
            return
        }
        frame = current
        payloadRemaining = current.length
        payload.removeAll(keepingCapacity: true)
        if current.length == 0 { endGatheredFrame(current) }
    }

    /// Frame-level facts, from the 9-byte header alone.
    private func observeFrame(_ current: FrameHeader) {
        switch current.type {
        case UInt8(NGHTTP2_HEADERS.rawValue):
            if current.flags & UInt8(NGHTTP2_FLAG_PRIORITY.rawValue) != 0 { findings.append(.headersWithPriority) }
            guard current.streamID > highestStreamID else { return }  // trailers
            highestStreamID = current.streamID
            guard isTrackingLimits, !goAwaySent else { return }
            // A lower limit binds once acknowledged; a higher one as soon as it is sent.
            if openStreams.count >= max(acknowledgedLimit, unacknowledgedLimits.max() ?? 0) {
                findings.append(.streamAboveLimit(streamID: current.streamID))
            } else if openStreams.count >= Self.maximumTrackedStreams {
                // The engine ends a connection long before (it tracks fewer); stop, stay bounded.
                isTracking = false
            } else {
                openStreams.insert(current.streamID)
                let sent = unacknowledgedLimits.last ?? acknowledgedLimit
                if acknowledgedLimit == Int.max, openStreams.count > sent {
                    unannouncedBurstLimit = openStreams.count
                }
            }
        case UInt8(NGHTTP2_PRIORITY.rawValue):
            findings.append(.priorityFrame)
        case UInt8(NGHTTP2_RST_STREAM.rawValue):
            openStreams.remove(current.streamID)
        case UInt8(NGHTTP2_SETTINGS.rawValue) where current.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 && isTrackingLimits:
            if !unacknowledgedLimits.isEmpty { acknowledgedLimit = unacknowledgedLimits.removeFirst() }
        default:
            break
        }
    }

    /// A frame gathered across reads is complete.
    private func endGatheredFrame(_ current: FrameHeader) {
        frame = nil
        guard Self.carriesHeaderBlock(current.type) else { return }
        let gathered = payload
        gathered.withUnsafeBytes { endFrame(current, payload: $0) }
    }

    /// A complete frame: a header block fragment is added to the block (or, when it is the
    /// whole block, decoded where it lies).
    private func endFrame(_ current: FrameHeader, payload: UnsafeRawBufferPointer) {
        guard Self.carriesHeaderBlock(current.type) else { return }
        var fragment = payload
        if current.type == UInt8(NGHTTP2_HEADERS.rawValue) {
            blockStreamID = current.streamID
            block.removeAll(keepingCapacity: true)
            if current.flags & UInt8(NGHTTP2_FLAG_PADDED.rawValue) != 0 {
                guard let padding = fragment.first, Int(padding) < fragment.count else {
                    isTracking = false
                    return
                }
                fragment = UnsafeRawBufferPointer(rebasing: fragment[1..<(fragment.count - Int(padding))])
            }
            if current.flags & UInt8(NGHTTP2_FLAG_PRIORITY.rawValue) != 0 {
                guard fragment.count >= 5 else {
                    isTracking = false
                    return
                }
                fragment = UnsafeRawBufferPointer(rebasing: fragment[5...])
            }
        }
        let endsBlock = current.flags & UInt8(NGHTTP2_FLAG_END_HEADERS.rawValue) != 0
        if endsBlock, block.isEmpty {
            decodeBlock(fragment)
            return
        }
        guard block.count + fragment.count <= Self.maximumBlockSize else {
            isTracking = false
            return
        }
        block.append(contentsOf: fragment)
        if endsBlock {
            let whole = block
            whole.withUnsafeBytes { decodeBlock($0) }
            block.removeAll(keepingCapacity: true)
        }
    }

    /// The decoder's table now: entries (the 61 static ones included) and dynamic size in bytes.
    var decoderTable: (entries: Int, bytes: Int) {
        guard let inflater else { return (0, 0) }
        return (nghttp2_hd_inflate_get_num_table_entries(inflater), nghttp2_hd_inflate_get_dynamic_table_size(inflater))
    }

    /// The decoder's table, as far as telling an addition apart: entry count, size in bytes and
    /// the newest entry's storage.
    private struct TableState: Equatable {
        var count: Int
        var size: Int
        var newest: UnsafeRawPointer?
    }

    private func tableState(_ inflater: OpaquePointer) -> TableState {
        let count = nghttp2_hd_inflate_get_num_table_entries(inflater)
        let newest = count > 61 ? nghttp2_hd_inflate_get_table_entry(inflater, 62) : nil
        return TableState(
            count: count, size: nghttp2_hd_inflate_get_dynamic_table_size(inflater),
            newest: newest.map { UnsafeRawPointer($0) })
    }

    /// True when the newest dynamic table entry is `name: value`.
    private func newestEntryIs(_ inflater: OpaquePointer, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool {
        guard nghttp2_hd_inflate_get_num_table_entries(inflater) > 61,
            let entry = nghttp2_hd_inflate_get_table_entry(inflater, 62)
        else { return false }
        let entryName = UnsafeRawBufferPointer(start: entry.pointee.name, count: entry.pointee.namelen)
        let entryValue = UnsafeRawBufferPointer(start: entry.pointee.value, count: entry.pointee.valuelen)
        return HTTP2HeaderBlock.bytesEqual(entryName, name) && HTTP2HeaderBlock.bytesEqual(entryValue, value)
    }

    /// Decodes one whole header block, unless it is provably a repeat with nothing to learn.
    ///
    /// The skip: when the previous block left the decoder's table as it found it (no field
    /// added, no size update: a *table-neutral* block) and this block has the same bytes, the
    /// table is still the one the previous block was decoded against, so this block decodes to
    /// the same fields, adds nothing again, and every field's `entered` is false again. Rules
    /// only report fields that entered the table, and what they remember (a name seen once) is
    /// already remembered from the previous block: skipping changes neither the table, nor the
    /// findings, nor the rules' state. A client that repeats its provider token and `:path`
    /// (both literals, never added) and refers to everything else from the table sends such
    /// blocks request after request (h2load does; Herald's client varies `apns-id`).
    private func decodeBlock(_ raw: UnsafeRawBufferPointer) {
        if lastBlockNeutral, raw.count == lastBlock.count,
            lastBlock.withUnsafeBytes({ HTTP2HeaderBlock.bytesEqual($0, raw) })
        {
            repeatsSkipped &+= 1
            return
        }
        let neutral = decodeBlockFully(raw)
        lastBlockNeutral = neutral
        lastBlock.removeAll(keepingCapacity: true)
        if neutral { lastBlock.append(contentsOf: raw) }
    }

    /// Decodes the block field by field; returns true when it was table-neutral (no size update,
    /// no literal with incremental indexing, the table's entry count and size unchanged).
    ///
    /// A literal without indexing or never indexed (RFC 7541 §6.2.2, §6.2.3) leaves the table
    /// as it is, and the rules need only its name: the decoder is given that representation
    /// with its value emptied (``unindexedLiteral(_:)``), so the provider token, `:path` and
    /// `apns-id` a client sends as such literals with every request are not Huffman-decoded a
    /// second time (the engine's session decodes them too). The table, the names and the
    /// findings are those of decoding the original; anything the shortcut cannot delimit is
    /// decoded as it came.
    private func decodeBlockFully(_ raw: UnsafeRawBufferPointer) -> Bool {
        guard let inflater else { return false }
        let input = raw.assumingMemoryBound(to: UInt8.self)
        guard let base = input.baseAddress, !input.isEmpty else {
            // An empty block decodes to nothing; still end it.
            nghttp2_hd_inflate_end_headers(inflater)
            return true
        }
        let atStart = tableState(inflater)
        var neutral = true
        var offset = 0
        while true {
            let rest = UnsafeBufferPointer(rebasing: input[offset...])
            let step: (consumed: Int, flags: Int32)?
            if skipsUnindexedValues, let literal = Self.unindexedLiteral(rest) {
                shortened.removeAll(keepingCapacity: true)
                shortened.append(contentsOf: rest[..<literal.nameEnd])
                shortened.append(0)  // an empty value, not Huffman-coded
                step = shortened.withUnsafeBufferPointer { bytes -> (consumed: Int, flags: Int32)? in
                    guard let start = bytes.baseAddress else { return nil }
                    // Not the block's end (in_final 0): the next call goes on after the original.
                    let result = decodeField(inflater, start, bytes.count, final: false, table: &neutral)
                    guard let result, result.consumed == bytes.count else { return nil }
                    return (literal.length, result.flags)
                }
            } else {
                step = decodeField(inflater, base + offset, input.count - offset, final: true, table: &neutral)
            }
            guard let step else {
                isTracking = false
                return false
            }
            offset += step.consumed
            if step.flags & Int32(NGHTTP2_HD_INFLATE_FINAL.rawValue) != 0 {
                nghttp2_hd_inflate_end_headers(inflater)
                return neutral && tableState(inflater).count == atStart.count
                    && tableState(inflater).size == atStart.size
            }
            if step.consumed == 0, step.flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) == 0 {
                // No progress on a final block: malformed; nghttp2's session refuses it too.
                isTracking = false
                return false
            }
        }
    }

    /// Decodes the next field of `count` bytes at `start` and shows it to the rules; clears
    /// `neutral` when the representation may change the table. Nil when the decoder failed.
    /// The decoded field's name and value live in the decoder's buffers until its next call.
    private func decodeField(
        _ inflater: OpaquePointer, _ start: UnsafePointer<UInt8>, _ count: Int, final: Bool, table neutral: inout Bool
    ) -> (consumed: Int, flags: Int32)? {
        let before = tableState(inflater)
        var field = nghttp2_nv()
        var flags: Int32 = 0
        let consumed = nghttp2_hd_inflate_hd2(inflater, &field, &flags, start, count, final ? 1 : 0)
        guard consumed >= 0, consumed <= count else { return nil }
        let effect = Self.tableEffect(UnsafeBufferPointer(start: start, count: consumed))
        if effect.sizeUpdate || effect.incremental { neutral = false }
        if flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) != 0, HPACKAudit.mayConcern(nameLength: field.namelen) {
            let name = UnsafeRawBufferPointer(start: field.name, count: field.namelen)
            let value = UnsafeRawBufferPointer(start: field.value, count: field.valuelen)
            let changed = tableState(inflater) != before
            let entered = (changed && newestEntryIs(inflater, name: name, value: value)) || effect.incremental
            rules.observe(name: name, entered: entered)
            if rules.hasViolations {
                for text in rules.take() { findings.append(.hpack(streamID: blockStreamID, text: text)) }
            }
        }
        return (consumed, flags)
    }

    /// The longest value the shortcut skips: nghttp2's decoder refuses a longer one
    /// (`NGHTTP2_HD_MAX_NV`), so such a representation is decoded as it came, and fails there.
    static let maximumSkippedValue = 65_536

    /// When `bytes` begins with a whole literal without indexing or never indexed (RFC 7541
    /// §6.2.2, §6.2.3: first byte `0000xxxx` or `0001xxxx`) with a non-empty value: where its
    /// name ends (the name's index, or its literal string, included) and its whole length. Nil
    /// for any other representation (indexed, with incremental indexing, a size update), and
    /// for one that is truncated or has an integer beyond what a field can hold; those are
    /// decoded as they came.
    static func unindexedLiteral(_ bytes: UnsafeBufferPointer<UInt8>) -> (nameEnd: Int, length: Int)? {
        guard let first = bytes.first, first < 0x20 else { return nil }
        var index = 0
        guard let nameIndex = prefixInteger(bytes, at: &index, prefixBits: 4) else { return nil }
        if nameIndex == 0 {
            // A literal name: a string (H bit, 7-bit prefix length) follows.
            guard let nameLength = prefixInteger(bytes, at: &index, prefixBits: 7),
                nameLength <= bytes.count - index
            else { return nil }
            index += nameLength
        }
        let nameEnd = index
        guard let valueLength = prefixInteger(bytes, at: &index, prefixBits: 7),
            valueLength > 0, valueLength <= maximumSkippedValue, valueLength <= bytes.count - index
        else { return nil }
        return (nameEnd, index + valueLength)
    }

    /// An integer with an N-bit prefix (RFC 7541 §5.1) starting at `index`, which moves past
    /// it. Nil when it runs past the bytes or beyond 2^28 (no field length comes near).
    static func prefixInteger(_ bytes: UnsafeBufferPointer<UInt8>, at index: inout Int, prefixBits: Int) -> Int? {
        guard index < bytes.count else { return nil }
        let mask = (1 << prefixBits) - 1
        var value = Int(bytes[index]) & mask
        index += 1
        guard value == mask else { return value }
        var shift = 0
        while index < bytes.count, shift <= 21 {
            let byte = bytes[index]
            index += 1
            value += Int(byte & 0x7f) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
        return nil
    }

    /// RFC 7541 §6: the representation the decoder just consumed starts (after any dynamic
    /// table size updates, `001xxxxx` with a 5-bit-prefix integer) with `01` for a literal with
    /// incremental indexing.
    static func isIncrementalIndexing(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        tableEffect(bytes).incremental
    }

    /// What the representation the decoder just consumed may do to the dynamic table: size
    /// updates before it (`001xxxxx`), and whether it is a literal with incremental indexing.
    static func tableEffect(_ bytes: UnsafeBufferPointer<UInt8>) -> (sizeUpdate: Bool, incremental: Bool) {
        var index = 0
        var sizeUpdate = false
        while index < bytes.count, bytes[index] & 0xe0 == 0x20 {
            sizeUpdate = true
            // Skip a size update: its integer continues while the prefix is all ones.
            let prefixFull = bytes[index] & 0x1f == 0x1f
            index += 1
            if prefixFull {
                while index < bytes.count, bytes[index] & 0x80 != 0 { index += 1 }
                index += 1
            }
        }
        guard index < bytes.count else { return (sizeUpdate, false) }
        return (sizeUpdate, bytes[index] & 0xc0 == 0x40)
    }
}

/// Shows the wire auditor each read of plain text on its way from TLS to the HTTP/2 engine,
/// and records its findings. The bytes pass on unchanged.
final class SandboxWireAuditHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    let auditor = SandboxWireAuditor()
    private let recorder: SandboxRecorder
    private let connectionID: Int
    /// Raises the stream limit before the engine sees a burst the client opened unknowingly.
    /// Strong (the connection handler never refers back to this handler), released when the
    /// pipeline removes this handler. Not `weak`: a weak reference gives the connection handler
    /// a side table whose pointer is tagged, so LeakSanitizer reports it as lost for every
    /// connection still open at process exit.
    var connection: SandboxConnectionHandler?

    init(recorder: SandboxRecorder, connectionID: Int) {
        self.recorder = recorder
        self.connectionID = connectionID
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connection = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        auditor.scan(unwrapInboundIn(data))
        for finding in auditor.takeFindings() {
            switch finding {
            case .hpack(let streamID, let text):
                recorder.hpackViolation("connection \(connectionID) stream \(streamID): \(text)")
            case .priorityFrame: recorder.priorityFrame()
            case .headersWithPriority: recorder.headersWithPriority()
            case .streamAboveLimit:
                // nghttp2 ends such a connection itself (PROTOCOL_ERROR); the audit says why.
                recorder.streamAboveLimit()
            }
        }
        if let limit = auditor.takeUnannouncedBurstLimit() {
            connection?.acceptUnannouncedBurst(limit: limit)
        }
        context.fireChannelRead(data)
    }
}
