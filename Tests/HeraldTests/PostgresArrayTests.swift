import Foundation
import HeraldCore
import NIOCore
import PostgresNIO
import Testing

@testable import HeraldPostgres

/// ``PostgresArray``: PostgreSQL's binary array form, read and written in one pass. It must agree
/// with PostgresNIO's own array coding and with the server, and refuse every malformed cell
/// without trapping.
@Suite("PostgreSQL arrays")
struct PostgresArrayTests {
    private static func encoded<Element: PostgresArrayElement>(_ array: PostgresArray<Element>) -> ByteBuffer {
        var buffer = ByteBuffer()
        array.encode(into: &buffer, context: .default)
        return buffer
    }

    private static func decoded<Element: PostgresArrayElement>(
        _ bytes: ByteBuffer, as: Element.Type, type: PostgresDataType = Element.arrayType
    ) throws -> [Element] {
        var bytes = bytes
        let array = try PostgresArray<Element>(from: &bytes, type: type, format: .binary, context: .default)
        #expect(bytes.readableBytes == 0, "the whole cell is read")
        return array.elements
    }

    /// The bytes of an array as PostgreSQL sends one: `dimensions`, the flags, the element type,
    /// then (with a dimension) `count` and the lower bound, then each element's length and bytes.
    private static func wire(
        dimensions: Int32 = 1, flags: Int32 = 0, element: PostgresDataType, count: Int32? = nil, lowerBound: Int32 = 1,
        elements: [[UInt8]?]
    ) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(dimensions)
        buffer.writeInteger(flags)
        buffer.writeInteger(element.rawValue)
        if dimensions > 0 {
            buffer.writeInteger(count ?? Int32(elements.count))
            buffer.writeInteger(lowerBound)
        }
        for element in elements {
            if let element {
                buffer.writeInteger(Int32(element.count))
                buffer.writeBytes(element)
            } else {
                buffer.writeInteger(Int32(-1))
            }
        }
        return buffer
    }

    @Test("every element type round-trips, empty arrays included, in the bytes PostgresNIO writes and reads")
    func roundTrips() throws {
        let ints32: [Int32] = [0, 1, -1, .max, .min, 42]
        let ints64: [Int64] = [0, -7, .max, .min]
        let ints16: [Int16] = [0, 3, .max, .min]
        let texts = ["", "com.example.app", "ünïcødé ✓", String(repeating: "x", count: 300)]
        let uuids = [UUID(), UUID(), UUID(uuidString: "00000000-0000-0000-0000-000000000000")!]
        let tokens = try [DeviceToken(hex: "00ff10"), DeviceToken(hex: String(repeating: "ab", count: 32))].map(TokenBytes.init)

        #expect(try Self.decoded(Self.encoded(PostgresArray(ints32)), as: Int32.self) == ints32)
        #expect(try Self.decoded(Self.encoded(PostgresArray(ints64)), as: Int64.self) == ints64)
        #expect(try Self.decoded(Self.encoded(PostgresArray(ints16)), as: Int16.self) == ints16)
        #expect(try Self.decoded(Self.encoded(PostgresArray(texts)), as: String.self) == texts)
        #expect(try Self.decoded(Self.encoded(PostgresArray(uuids)), as: UUID.self) == uuids)
        #expect(try Self.decoded(Self.encoded(PostgresArray(tokens)), as: TokenBytes.self).map(\.token) == tokens.map(\.token))
        #expect(try Self.decoded(Self.encoded(PostgresArray<Int32>()), as: Int32.self).isEmpty)
        #expect(try Self.decoded(Self.encoded(PostgresArray<String>()), as: String.self).isEmpty)

        // The same bytes as PostgresNIO's `[Element]`, both ways.
        func nio<Element: PostgresArrayEncodable & PostgresNonThrowingEncodable>(_ elements: [Element]) -> ByteBuffer {
            var buffer = ByteBuffer()
            elements.encode(into: &buffer, context: .default)
            return buffer
        }
        #expect(Self.encoded(PostgresArray(ints32)) == nio(ints32))
        #expect(Self.encoded(PostgresArray(ints64)) == nio(ints64))
        #expect(Self.encoded(PostgresArray(ints16)) == nio(ints16))
        #expect(Self.encoded(PostgresArray(texts)) == nio(texts))
        #expect(Self.encoded(PostgresArray(uuids)) == nio(uuids))
        #expect(Self.encoded(PostgresArray<Int32>()) == nio([Int32]()))
        var ours = Self.encoded(PostgresArray(uuids))
        #expect(try [UUID](from: &ours, type: .uuidArray, format: .binary, context: .default) == uuids)

        // Payloads of any length, an empty one included.
        let payloads = [PayloadBytes(bytes: []), PayloadBytes(bytes: [0, 1, 2, 255]), PayloadBytes(bytes: Array(repeating: 7, count: 5000))]
        #expect(try Self.decoded(Self.encoded(PostgresArray(payloads)), as: PayloadBytes.self).map(\.bytes) == payloads.map(\.bytes))
        // Written after what the buffer holds already, each array's bytes as on their own.
        var shared = ByteBuffer(bytes: [9, 9, 9])
        PostgresArray(ints32).encode(into: &shared, context: .default)
        PostgresArray(texts).encode(into: &shared, context: .default)
        var expected = ByteBuffer(bytes: [9, 9, 9])
        expected.writeImmutableBuffer(Self.encoded(PostgresArray(ints32)))
        expected.writeImmutableBuffer(Self.encoded(PostgresArray(texts)))
        #expect(shared == expected)
    }

    @Test("repeated text elements are read once and shared; each element keeps its own value and place")
    func repeatedText() throws {
        let topic = "com.example.herald.demo.voip"
        let texts = [topic, topic, "", "", topic, "ünï ✓", "ünï ✓", topic, "com.example.herald.demo.vo1p"]
        let read = try Self.decoded(Self.encoded(PostgresArray(texts)), as: String.self)
        #expect(read == texts)
        // A repeat shares the bytes of the element before it: one string, not one an element.
        func storage(_ text: String) -> UnsafeRawPointer? {
            var text = text
            return text.withUTF8 { UnsafeRawPointer($0.baseAddress) }
        }
        #expect(storage(read[0]) == storage(read[1]))
        #expect(storage(read[4]) != storage(read[1]), "only the element just before is compared")
        #expect(storage(read[8]) != storage(read[7]))
        // A repeat of an invalid element is refused like the element itself.
        let repeatedInvalid = Self.wire(element: .int4, elements: [Array("x".utf8), Array("x".utf8)])
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(repeatedInvalid, as: String.self, type: .textArray) }
    }

    @Test("a narrower integer element widens; a wider one, or one of another type or size, is refused")
    func integerWidths() throws {
        let shorts = Self.wire(element: .int2, elements: [[0x00, 0x07], [0xff, 0xfe]])
        #expect(try Self.decoded(shorts, as: Int32.self, type: .int4Array) == [7, -2])
        let ints = Self.wire(element: .int4, elements: [[0, 0, 1, 0]])
        #expect(try Self.decoded(ints, as: Int64.self, type: .int8Array) == [256])
        // An int8 element never narrows, even when its value would fit.
        let longs = Self.wire(element: .int8, elements: [[0, 0, 0, 0, 0, 0, 0, 1]])
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(longs, as: Int32.self, type: .int4Array) }
        // An element whose size is not its type's.
        let short = Self.wire(element: .int4, elements: [[0, 1]])
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(short, as: Int32.self) }
        // Text elements where integers are expected, and integers where a uuid is.
        let text = Self.wire(element: .text, elements: [Array("1234".utf8)])
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(text, as: Int32.self) }
        let notUUID = Self.wire(element: .int4, elements: [[0, 0, 0, 1]])
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(notUUID, as: UUID.self, type: .uuidArray) }
    }

    @Test("malformed cells are refused without trapping: truncated, NULL elements, bad headers, counts past the bytes, bytes left over")
    func hostileCells() throws {
        let good = Self.encoded(PostgresArray<Int32>([1, 2, 3]))
        // Every proper prefix of a good cell.
        for length in 0..<good.readableBytes {
            let prefix = good.getSlice(at: good.readerIndex, length: length)!
            #expect(throws: PostgresDecodingError.Code.self, "\(length) bytes") { try Self.decoded(prefix, as: Int32.self) }
        }
        // The whole cell plus one byte.
        var longer = good
        longer.writeInteger(UInt8(0))
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(longer, as: Int32.self) }

        let four: [UInt8] = [0, 0, 0, 1]
        let bad: [(String, ByteBuffer)] = [
            ("a NULL element", Self.wire(flags: 1, element: .int4, elements: [four, nil])),
            ("two dimensions", Self.wire(dimensions: 2, element: .int4, elements: [four])),
            ("negative dimensions", Self.wire(dimensions: -1, element: .int4, elements: [])),
            ("unknown flags", Self.wire(flags: 2, element: .int4, elements: [four])),
            ("a negative count", Self.wire(element: .int4, count: -1, elements: [])),
            ("a count past the bytes", Self.wire(element: .int4, count: .max, elements: [four])),
            ("an element longer than the cell", Self.wire(element: .int4, count: 1, elements: []).withTrailing(Int32(1000))),
            ("an element length below -1", Self.wire(element: .int4, count: 1, elements: []).withTrailing(Int32(-5))),
            ("no dimensions but bytes after", Self.wire(dimensions: 0, element: .int4, elements: [four])),
        ]
        for (name, cell) in bad {
            #expect(throws: PostgresDecodingError.Code.self, "\(name)") { try Self.decoded(cell, as: Int32.self) }
        }
        // The cell's own type must be the array's.
        #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(good, as: Int32.self, type: .int8Array) }
        var text = good
        #expect(throws: PostgresDecodingError.Code.self) {
            try PostgresArray<Int32>(from: &text, type: .int4Array, format: .text, context: .default)
        }
        // A token of no bytes, or of more than a token holds, is no token.
        let tokens = [Self.wire(element: .bytea, elements: [[]]), Self.wire(element: .bytea, elements: [Array(repeating: 1, count: 101)])]
        for cell in tokens {
            #expect(throws: PostgresDecodingError.Code.self) { try Self.decoded(cell, as: TokenBytes.self, type: .byteaArray) }
        }
        let longest = Self.wire(element: .bytea, elements: [Array(repeating: 1, count: 100)])
        #expect(try Self.decoded(longest, as: TokenBytes.self, type: .byteaArray).first?.token.byteCount == 100)
    }

    @Test("arrays the server builds read as they should; one holding a NULL is refused")
    func server() async throws {
        let store = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 1), logger: StoreBackend.logger)
        let uuid = UUID()
        let rows = try await store.client.query(
            """
            SELECT ARRAY[1, -2, 2147483647]::int4[], ARRAY[-9223372036854775808]::int8[], ARRAY[-1, 7]::int2[],
                   ARRAY['', 'ünï ✓']::text[], ARRAY[\(uuid)]::uuid[], ARRAY['\\x00ff10'::bytea], '{}'::int4[],
                   (ARRAY[5, 6, 7, 8]::int4[])[2:3], ARRAY[1, NULL]::int4[]
            """, logger: StoreBackend.logger
        ).collect()
        let cells = try #require(rows.first).makeRandomAccess()
        #expect(try cells[0].decode(PostgresArray<Int32>.self).elements == [1, -2, .max])
        #expect(try cells[1].decode(PostgresArray<Int64>.self).elements == [.min])
        #expect(try cells[2].decode(PostgresArray<Int16>.self).elements == [-1, 7])
        #expect(try cells[3].decode(PostgresArray<String>.self).elements == ["", "ünï ✓"])
        #expect(try cells[4].decode(PostgresArray<UUID>.self).elements == [uuid])
        #expect(try cells[5].decode(PostgresArray<TokenBytes>.self).elements.map(\.token) == [try DeviceToken(hex: "00ff10")])
        #expect(try cells[6].decode(PostgresArray<Int32>.self).elements.isEmpty)
        #expect(try cells[7].decode(PostgresArray<Int32>.self).elements == [6, 7])
        #expect(throws: (any Error).self) { try cells[8].decode(PostgresArray<Int32>.self) }
        // What this writes, the server reads back as written.
        let back = try await store.client.query(
            """
            SELECT \(PostgresArray<Int32>([3, -4])) = ARRAY[3, -4]::int4[], \(PostgresArray<String>(["a", "ü"])) = ARRAY['a', 'ü'],
                   cardinality(\(PostgresArray<UUID>([uuid, uuid]))), \(PostgresArray<Int16>()) = '{}'::int2[]
            """, logger: StoreBackend.logger
        ).collect()
        let answers = try #require(back.first).makeRandomAccess()
        #expect(try answers[0].decode(Bool.self) && answers[1].decode(Bool.self) && answers[3].decode(Bool.self))
        #expect(try answers[2].decode(Int.self) == 2)
        try await store.dropSchemaForTests()
        await store.close()
    }
}

extension ByteBuffer {
    fileprivate func withTrailing(_ value: Int32) -> ByteBuffer {
        var copy = self
        copy.writeInteger(value)
        return copy
    }
}
