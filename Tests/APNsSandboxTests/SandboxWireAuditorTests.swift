import Foundation
import HeraldCore
import NIOCore
import NIOHPACK
import Testing

@testable import APNsSandbox

/// The HPACK auditor on raw connection bytes, encoded by NIOHPACK (an encoder the sandbox does
/// not use): frame boundaries under any split of the reads, CONTINUATION, padding, priority.
@Suite("APNsSandbox HPACK auditor")
struct SandboxWireAuditorTests {
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    static func frame(type: UInt8, flags: UInt8, stream: UInt32, payload: [UInt8]) -> [UInt8] {
        let length = payload.count
        return [
            UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), type, flags,
            UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff),
        ] + payload
    }

    static func block(_ encoder: inout HPACKEncoder, _ fields: [(String, String, HPACKIndexing)]) throws -> [UInt8] {
        var headers = HPACKHeaders()
        for (name, value, indexing) in fields { headers.add(name: name, value: value, indexing: indexing) }
        var buffer = ByteBufferAllocator().buffer(capacity: 256)
        try encoder.encode(headers: headers, to: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// A connection's bytes: three requests in the shapes the audit must tell apart.
    static func connectionBytes() throws -> [UInt8] {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        var bytes = preface
        bytes += frame(type: 4, flags: 0, stream: 0, payload: [])  // SETTINGS
        // Stream 1: Apple's advice (apns-id indexed the first time), split into HEADERS +
        // CONTINUATION, padded. Clean.
        let first = try block(
            &encoder,
            [
                (":method", "POST", .indexable), (":path", "/3/device/abcd", .nonIndexable),
                ("authorization", "bearer a.b.c", .neverIndexed), ("apns-id", "11111111-1111-1111-1111-111111111111", .indexable),
                ("apns-topic", "com.example.app", .indexable),
            ])
        let half = first.count / 2
        bytes += frame(type: 1, flags: 0x8, stream: 1, payload: [3] + first[..<half] + [0, 0, 0])
        bytes += frame(type: 9, flags: 0x4, stream: 1, payload: Array(first[half...]))
        bytes += frame(type: 0, flags: 0x1, stream: 1, payload: Array("{}".utf8))
        // Stream 3: :path indexed (violation), apns-id indexed again (violation), with priority.
        let second = try block(
            &encoder,
            [
                (":method", "POST", .indexable), (":path", "/3/device/beef", .indexable),
                ("authorization", "bearer a.b.c", .nonIndexable), ("apns-id", "22222222-2222-2222-2222-222222222222", .indexable),
            ])
        bytes += frame(type: 1, flags: 0x4 | 0x20, stream: 3, payload: [0, 0, 0, 0, 15] + second)
        // Stream 5: authorization indexed (violation); apns-id without indexing (fine); the indexed
        // :path of stream 3 referenced from the table (it entered already: no new violation).
        let third = try block(
            &encoder,
            [
                (":method", "POST", .indexable), (":path", "/3/device/beef", .indexable),
                ("authorization", "bearer d.e.f", .indexable), ("apns-id", "33333333-3333-3333-3333-333333333333", .nonIndexable),
            ])
        bytes += frame(type: 1, flags: 0x4 | 0x1, stream: 5, payload: third)
        return bytes
    }

    static func audit(_ bytes: [UInt8], splitEvery size: Int) -> [SandboxWireAuditor.Finding] {
        let auditor = SandboxWireAuditor()
        var findings: [SandboxWireAuditor.Finding] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + size)
            auditor.scan(ByteBuffer(bytes: bytes[offset..<end]))
            findings += auditor.takeFindings()
            offset = end
        }
        #expect(auditor.isTracking)
        return findings
    }

    @Test func findsWhatEnteredTheTableUnderEverySplit() throws {
        let bytes = try Self.connectionBytes()
        for size in [1, 2, 3, 7, 9, 10, 64, bytes.count] {
            let findings = Self.audit(bytes, splitEvery: size)
            let summary = findings.map { finding -> String in
                switch finding {
                case .hpack(let streamID, let text): return "\(streamID) \(text.prefix(while: { $0 != " " }))"
                case .headersWithPriority: return "priority"
                case .priorityFrame: return "PRIORITY"
                case .streamAboveLimit(let streamID): return "\(streamID) above limit"
                }
            }
            #expect(summary == ["priority", "3 :path", "3 apns-id", "5 authorization"], "reads of \(size) bytes")
        }
    }

    @Test func streamsBeyondTheAcknowledgedLimitAreFound() throws {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        let fields: [(String, String, HPACKIndexing)] = [(":method", "POST", .indexable)]
        let auditor = SandboxWireAuditor()
        auditor.sentStreamLimit(1)
        var bytes = Self.preface
        // Before the client acknowledged the limit, nothing is above it.
        bytes += Self.frame(type: 1, flags: 0x4, stream: 1, payload: try Self.block(&encoder, fields))
        bytes += Self.frame(type: 1, flags: 0x4, stream: 3, payload: try Self.block(&encoder, fields))
        auditor.scan(ByteBuffer(bytes: bytes))
        #expect(auditor.takeFindings().isEmpty)
        // …but the limit sent (one) does not cover them: the limit they need is reported once.
        #expect(auditor.takeUnannouncedBurstLimit() == 2)
        #expect(auditor.takeUnannouncedBurstLimit() == nil)
        auditor.sentStreamLimit(2)
        auditor.streamClosed(1)
        auditor.streamClosed(3)
        // Two SETTINGS ACKs (limits one, then two)… and the limit goes back to one.
        auditor.sentStreamLimit(1)
        bytes = Self.frame(type: 4, flags: 0x1, stream: 0, payload: [])
        bytes += Self.frame(type: 4, flags: 0x1, stream: 0, payload: [])
        bytes += Self.frame(type: 4, flags: 0x1, stream: 0, payload: [])
        bytes += Self.frame(type: 1, flags: 0x4, stream: 5, payload: try Self.block(&encoder, fields))
        bytes += Self.frame(type: 1, flags: 0x4, stream: 7, payload: try Self.block(&encoder, fields))
        bytes += Self.frame(type: 3, flags: 0, stream: 5, payload: [0, 0, 0, 8])
        bytes += Self.frame(type: 1, flags: 0x4, stream: 9, payload: try Self.block(&encoder, fields))
        // A PRIORITY frame and trailers on stream 9 are no new stream.
        bytes += Self.frame(type: 2, flags: 0, stream: 9, payload: [0, 0, 0, 0, 15])
        bytes += Self.frame(type: 1, flags: 0x5, stream: 9, payload: try Self.block(&encoder, fields))
        auditor.scan(ByteBuffer(bytes: bytes))
        #expect(auditor.takeFindings() == [.streamAboveLimit(streamID: 7), .priorityFrame])
        // Once the client has acknowledged a limit, a burst is a violation, not an excuse.
        #expect(auditor.takeUnannouncedBurstLimit() == nil)
    }

    @Test func streamsRefusedOrAfterGoAwayDoNotCountAsOpen() throws {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        let fields: [(String, String, HPACKIndexing)] = [(":method", "POST", .indexable)]
        let auditor = SandboxWireAuditor()
        auditor.sentStreamLimit(2)
        var bytes = Self.preface + Self.frame(type: 4, flags: 0x1, stream: 0, payload: [])
        bytes += Self.frame(type: 1, flags: 0x4, stream: 1, payload: try Self.block(&encoder, fields))
        bytes += Self.frame(type: 1, flags: 0x4, stream: 3, payload: try Self.block(&encoder, fields))
        auditor.scan(ByteBuffer(bytes: bytes))
        #expect(auditor.takeFindings().isEmpty)
        // The limit drops to one; before the client acknowledges it, nghttp2 refuses stream 3
        // (above the limit sent) and the engine reports it closed, as it does for answered 1.
        auditor.sentStreamLimit(1)
        auditor.streamClosed(3)
        auditor.streamClosed(1)
        // Acknowledged: one stream at a time is fine, and nothing is left over from 1 and 3.
        bytes = Self.frame(type: 4, flags: 0x1, stream: 0, payload: [])
        bytes += Self.frame(type: 1, flags: 0x4, stream: 5, payload: try Self.block(&encoder, fields))
        auditor.scan(ByteBuffer(bytes: bytes))
        #expect(auditor.takeFindings().isEmpty)
        // After the sandbox's GOAWAY nghttp2 opens no stream: none is counted, none reported.
        auditor.sentGoAway()
        bytes = Self.frame(type: 1, flags: 0x4, stream: 7, payload: try Self.block(&encoder, fields))
        bytes += Self.frame(type: 1, flags: 0x4, stream: 9, payload: try Self.block(&encoder, fields))
        auditor.scan(ByteBuffer(bytes: bytes))
        #expect(auditor.takeFindings().isEmpty)
    }

    @Test func aClientThatNeverAcknowledgesStopsOnlyTheLimitAudit() throws {
        let auditor = SandboxWireAuditor()
        for _ in 0...SandboxWireAuditor.maximumUnacknowledgedLimits { auditor.sentStreamLimit(1) }
        #expect(!auditor.isTrackingLimits)
        #expect(auditor.isTracking)
    }

    /// A block identical to the previous one is skipped only when the previous one left the
    /// table untouched; a repeated block that adds to the table is decoded (and judged) again.
    @Test func repeatedBlocksAreSkippedOnlyWhenTableNeutral() throws {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator())
        // Warm the table with the indexable fields, then a block of table references and literals.
        let fields: [(String, String, HPACKIndexing)] = [
            (":method", "POST", .indexable), ("apns-topic", "com.example.app", .indexable),
            (":path", "/3/device/abcd", .nonIndexable), ("authorization", "bearer a.b.c", .neverIndexed),
        ]
        let warm = try Self.block(&encoder, fields)
        let neutral = try Self.block(&encoder, fields)
        #expect(warm != neutral)
        var bytes = Self.preface + Self.frame(type: 1, flags: 0x5, stream: 1, payload: warm)
        for stream in [UInt32(3), 5, 7] { bytes += Self.frame(type: 1, flags: 0x5, stream: stream, payload: neutral) }
        let auditor = SandboxWireAuditor()
        auditor.scan(ByteBuffer(bytes: bytes))
        #expect(auditor.takeFindings().isEmpty)
        #expect(auditor.repeatsSkipped == 2)
        #expect(auditor.isTracking)

        // `:path` with incremental indexing, sent twice byte for byte: each adds an entry (a
        // violation each time), so the repeat is decoded, not skipped.
        var fresh = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        let indexed = try Self.block(&fresh, [(":path", "/3/device/abcd", .indexable)])
        let again = SandboxWireAuditor()
        again.scan(
            ByteBuffer(
                bytes: Self.preface + Self.frame(type: 1, flags: 0x5, stream: 1, payload: indexed)
                    + Self.frame(type: 1, flags: 0x5, stream: 3, payload: indexed)))
        #expect(again.takeFindings().count == 2)
        #expect(again.repeatsSkipped == 0)
    }

    @Test func undecodableBlockStopsTheAuditWithoutFindings() {
        let auditor = SandboxWireAuditor()
        // HEADERS whose block refers to dynamic table entry 70 of an empty table.
        auditor.scan(ByteBuffer(bytes: Self.preface + Self.frame(type: 1, flags: 0x5, stream: 1, payload: [0x80 | 70])))
        #expect(!auditor.isTracking)
        #expect(auditor.takeFindings().isEmpty)
    }

    @Test func oversizedHeaderFrameStopsTheAudit() {
        let auditor = SandboxWireAuditor()
        auditor.scan(ByteBuffer(bytes: Self.preface + [0xff, 0xff, 0xff, 1, 4, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 32)))
        #expect(!auditor.isTracking)
    }

    @Test(arguments: [
        ([0x40], true), ([0x7f, 0x01], true), ([0x00], false), ([0x10], false), ([0x82], false),
        ([0x20, 0x40], true), ([0x3f, 0xe1, 0x1f, 0x40], true), ([0x3f, 0xe1, 0x1f, 0x10], false), ([0x20], false),
    ] as [([UInt8], Bool)])
    func representationPrefixes(_ bytes: [UInt8], _ incremental: Bool) {
        #expect(bytes.withUnsafeBufferPointer { SandboxWireAuditor.isIncrementalIndexing($0) } == incremental)
    }

    /// A literal's value is skipped, not decoded, only when the auditor can delimit the whole
    /// representation; the name part is kept byte for byte.
    @Test(arguments: [
        // Without indexing, name :path (static 4), raw value of 3.
        ([0x04, 0x03, 0x61, 0x62, 0x63], 1, 5),
        // Never indexed, literal name "abc", value of 2, followed by more of the block.
        ([0x10, 0x03, 0x61, 0x62, 0x63, 0x02, 0x78, 0x79, 0x82], 5, 8),
        // A name index past the 4-bit prefix (15 + 5 = 20), a Huffman value of 1.
        ([0x0f, 0x05, 0x81, 0xff], 2, 4),
        // A value length past the 7-bit prefix: 127 + 1 = 128 bytes.
        ([0x04, 0x7f, 0x01] + [UInt8](repeating: 0x61, count: 128), 1, 131),
    ] as [([UInt8], Int, Int)])
    func unindexedLiteralsAreDelimited(_ bytes: [UInt8], _ nameEnd: Int, _ length: Int) {
        let found = bytes.withUnsafeBufferPointer { SandboxWireAuditor.unindexedLiteral($0) }
        #expect(found?.nameEnd == nameEnd)
        #expect(found?.length == length)
    }

    @Test(arguments: [
        [],
        [0x82],  // indexed
        [0x40, 0x03, 0x61, 0x62, 0x63, 0x01, 0x78],  // incremental indexing: it enters the table
        [0x3f, 0xe1, 0x1f],  // a size update
        [0x04, 0x00],  // an empty value: nothing to skip
        [0x04, 0x05, 0x61, 0x62],  // value truncated
        [0x00, 0x05, 0x61],  // literal name truncated
        [0x04],  // no value length
        [0x0f],  // name index cut inside its integer
        [0x04, 0x7f, 0x80, 0x80, 0x80, 0x80, 0x01],  // a length beyond 2^28
        [0x04, 0x7f, 0x82, 0x80, 0x04] + [UInt8](repeating: 0x61, count: 16),  // over 65,536: decoded as it came
    ] as [[UInt8]])
    func otherRepresentationsAreDecodedAsTheyCame(_ bytes: [UInt8]) {
        #expect(bytes.withUnsafeBufferPointer { SandboxWireAuditor.unindexedLiteral($0) } == nil)
    }

    /// The auditor that skips unindexed values against one that decodes every value, on random
    /// connections from NIOHPACK's encoder (another encoder than the sandbox's): every kind of
    /// representation, Huffman or raw, names of every length the rules look at, values past
    /// the 7-bit prefix. Same findings, same table, both tracking, under any split of the reads.
    @Test(arguments: [UInt64(1), 2, 3, 4, 5, 6, 7, 8])
    func skippingUnindexedValuesChangesNothingFound(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: random.next() % 2 == 0)
        let names = [
            ":path", "authorization", "apns-id", "apns-expiration", "apns-collapse-id", "apns-topic", "apns-priority",
            "apns-push-type", ":method", "x-custom", "x-five", "a-name-of-sixteen", "content-length",
        ]
        let indexings: [HPACKIndexing] = [.indexable, .nonIndexable, .neverIndexed]
        let alphabet = Array("abcdef0123456789-_.ABCXYZ~")
        var bytes = Self.preface
        for stream in 0..<120 {
            var fields: [(String, String, HPACKIndexing)] = []
            for _ in 0..<(1 + Int(random.next() % 8)) {
                let name = names[Int(random.next() % UInt64(names.count))]
                let length = [0, 1, 5, 36, 64, 126, 127, 128, 300][Int(random.next() % 9)]
                let value = String((0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
                // Values repeat now and then, so that indexed fields refer back to the table.
                fields.append((name, random.next() % 4 == 0 ? "repeated" : value, indexings[Int(random.next() % 3)]))
            }
            let block = try Self.block(&encoder, fields)
            bytes += Self.frame(type: 1, flags: 0x5, stream: UInt32(2 * stream + 1), payload: block)
        }
        for size in [bytes.count, 1 + Int(random.next() % 50)] {
            let skipping = SandboxWireAuditor()
            let decoding = SandboxWireAuditor(skipsUnindexedValues: false)
            var offset = 0
            var found: ([SandboxWireAuditor.Finding], [SandboxWireAuditor.Finding]) = ([], [])
            while offset < bytes.count {
                let end = min(bytes.count, offset + size)
                skipping.scan(ByteBuffer(bytes: bytes[offset..<end]))
                decoding.scan(ByteBuffer(bytes: bytes[offset..<end]))
                found.0 += skipping.takeFindings()
                found.1 += decoding.takeFindings()
                #expect(skipping.decoderTable == decoding.decoderTable, "seed \(seed), reads of \(size), at \(end)")
                offset = end
            }
            #expect(found.0 == found.1, "seed \(seed), reads of \(size)")
            #expect(!found.0.isEmpty, "seed \(seed): the random blocks break some rule")
            #expect(skipping.isTracking && decoding.isTracking)
            #expect(skipping.decoderTable.entries > 61, "seed \(seed): something entered the table")
        }
    }
}
