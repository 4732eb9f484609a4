import Foundation
import HeraldCore
import NIOCore
import PostgresNIO

/// A one-dimensional PostgreSQL array without NULLs, in its binary form, for the arrays a batch
/// moves in bulk: a job's chunks (written at its creation, read at each claim) and its commit
/// groups' records.
///
/// PostgresNIO codes `[Element]` one element at a time through its generic protocols: each element
/// gets a buffer slice of its own and unspecialized calls, which cost more than the element's
/// bytes. This reads the whole array from one view of the cell's bytes and writes it into one
/// view of the bytes it reserved (a write to the buffer per element would check its capacity
/// and its exclusive access each time), each element type's code specialized. The wire form is
/// PostgreSQL's (`array_recv`/`array_send`): dimensions, a has-NULLs flag, the element type, then
/// per dimension its length and lower bound, then each element's length and bytes.
///
/// Every byte read is checked, as from any peer: a cell that is not a one-dimensional array of
/// the expected type, an element of the wrong size, a NULL element, a count the cell's bytes
/// cannot hold or bytes left over are refused (``PostgresDecodingError``), never trusted. No
/// more elements are reserved than the cell's bytes can hold.
struct PostgresArray<Element: PostgresArrayElement>: Sendable {
    var elements: [Element]

    init(_ elements: [Element] = []) {
        self.elements = elements
    }

    init(capacity: Int) {
        elements = []
        elements.reserveCapacity(capacity)
    }

    mutating func append(_ element: Element) {
        elements.append(element)
    }

    var count: Int { elements.count }
    var isEmpty: Bool { elements.isEmpty }
}

/// An element of a ``PostgresArray``: its PostgreSQL types and its binary form.
protocol PostgresArrayElement: Sendable {
    /// The element type written.
    static var elementType: PostgresDataType { get }
    /// The array type written.
    static var arrayType: PostgresDataType { get }
    /// The element read from exactly `bytes`, sent as `type`; nil when they are not one.
    static func read(_ bytes: UnsafeRawBufferPointer, as type: PostgresDataType) -> Self?
    /// How many bytes ``store(into:)`` writes.
    var wireByteCount: Int { get }
    /// Writes the element's bytes (without their length) at the start of `bytes`, which hold
    /// ``wireByteCount`` of them or more.
    func store(into bytes: UnsafeMutableRawBufferPointer)
    /// True when an element whose bytes equal the one before's is read as that one's value
    /// (shared, not made again): text, which a chunk's items mostly repeat (its topic), and
    /// which costs an allocation an element when it is longer than a few bytes.
    static var sharesRepeats: Bool { get }
}

extension PostgresArrayElement {
    static var sharesRepeats: Bool { false }
}

extension PostgresArray: PostgresNonThrowingEncodable {
    static var psqlType: PostgresDataType { Element.arrayType }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        var bytes = 12
        if !elements.isEmpty {
            bytes += 8 + 4 * elements.count
            for element in elements { bytes += element.wireByteCount }
        }
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: bytes) { out in
            var writer = WireWriter(out)
            // An empty array has no dimensions, as PostgreSQL writes one.
            writer.int32(elements.isEmpty ? 0 : 1)
            writer.int32(0)
            writer.int32(Int32(bitPattern: Element.elementType.rawValue))
            guard !elements.isEmpty else { return writer.offset }
            writer.int32(Int32(clamping: elements.count))
            writer.int32(1)
            for element in elements {
                let count = element.wireByteCount
                writer.int32(Int32(clamping: count))
                element.store(into: writer.next(count))
            }
            return writer.offset
        }
    }
}

extension PostgresArray: PostgresDecodable {
    init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat,
        context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard format == .binary, type == Element.arrayType else { throw PostgresDecodingError.Code.typeMismatch }
        guard let elements = buffer.withUnsafeReadableBytes({ Self.elements(from: $0) }) else {
            throw PostgresDecodingError.Code.failure
        }
        buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
        self.elements = elements
    }

    /// The elements of an array's whole binary form; nil when `bytes` are not exactly one
    /// one-dimensional array of `Element`s without NULLs.
    static func elements(from bytes: UnsafeRawBufferPointer) -> [Element]? {
        var reader = WireReader(bytes)
        guard let dimensions = reader.int32(), let flags = reader.int32(), let elementOID = reader.uint32(),
            flags == 0 || flags == 1
        else { return nil }
        let elementType = PostgresDataType(elementOID)
        if dimensions == 0 { return reader.isAtEnd ? [] : nil }
        guard dimensions == 1, let count = reader.int32(), reader.int32() != nil, count >= 0,
            Int(count) <= reader.remaining / 4
        else { return nil }
        var elements: [Element] = []
        elements.reserveCapacity(Int(count))
        // The bytes of the element read last, when the type shares repeats.
        var previous: UnsafeRawBufferPointer? = nil
        for _ in 0..<count {
            // A NULL element has the length -1, which `bytes(count:)` refuses.
            guard let length = reader.int32(), let element = reader.bytes(count: Int(length)) else { return nil }
            if let last = previous, let repeated = elements.last, last.elementsEqual(element) {
                elements.append(repeated)
                continue
            }
            guard let value = Element.read(element, as: elementType) else { return nil }
            if Element.sharesRepeats { previous = element }
            elements.append(value)
        }
        return reader.isAtEnd ? elements : nil
    }
}

/// Big-endian reads over bytes, each checked against their end.
private struct WireReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var remaining: Int { bytes.count - offset }
    var isAtEnd: Bool { offset == bytes.count }

    mutating func uint32() -> UInt32? {
        guard remaining >= 4 else { return nil }
        defer { offset += 4 }
        return UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    mutating func int32() -> Int32? {
        uint32().map { Int32(bitPattern: $0) }
    }

    /// The next `count` bytes; nil when `count` is negative or more than are left.
    mutating func bytes(count: Int) -> UnsafeRawBufferPointer? {
        guard count >= 0, count <= remaining else { return nil }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }
}

/// Big-endian writes into bytes reserved for all of them (``PostgresArray``'s encoding counts
/// them first).
private struct WireWriter {
    let bytes: UnsafeMutableRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeMutableRawBufferPointer) {
        self.bytes = bytes
    }

    mutating func int32(_ value: Int32) {
        bytes.storeBytes(of: value.bigEndian, toByteOffset: offset, as: Int32.self)
        offset += 4
    }

    /// The next `count` bytes, for an element to write.
    mutating func next(_ count: Int) -> UnsafeMutableRawBufferPointer {
        defer { offset += count }
        return UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }
}

/// A big-endian integer of `bytes`, which hold exactly 2, 4 or 8 of them.
private func signedInteger(_ bytes: UnsafeRawBufferPointer) -> Int64? {
    switch bytes.count {
    case 2: Int64(Int16(bigEndian: bytes.loadUnaligned(as: Int16.self)))
    case 4: Int64(Int32(bigEndian: bytes.loadUnaligned(as: Int32.self)))
    case 8: Int64(bigEndian: bytes.loadUnaligned(as: Int64.self))
    default: nil
    }
}

/// The byte width of PostgreSQL's integer `type`, nil for any other type.
private func integerWidth(_ type: PostgresDataType) -> Int? {
    switch type {
    case .int2: 2
    case .int4: 4
    case .int8: 8
    default: nil
    }
}

/// An integer element: a narrower integer type widens (as PostgresNIO reads one), a wider one
/// is refused. Each integer type names its PostgreSQL types; reading and writing are shared.
protocol PostgresIntegerArrayElement: PostgresArrayElement, FixedWidthInteger {}

extension PostgresIntegerArrayElement {
    static func read(_ bytes: UnsafeRawBufferPointer, as type: PostgresDataType) -> Self? {
        guard let width = integerWidth(type), width == bytes.count, width <= MemoryLayout<Self>.size,
            let value = signedInteger(bytes)
        else { return nil }
        return Self(exactly: value)
    }

    var wireByteCount: Int { MemoryLayout<Self>.size }

    func store(into bytes: UnsafeMutableRawBufferPointer) { bytes.storeBytes(of: bigEndian, as: Self.self) }
}

extension Int16: PostgresIntegerArrayElement {
    static var elementType: PostgresDataType { .int2 }
    static var arrayType: PostgresDataType { .int2Array }
}

extension Int32: PostgresIntegerArrayElement {
    static var elementType: PostgresDataType { .int4 }
    static var arrayType: PostgresDataType { .int4Array }
}

extension Int64: PostgresIntegerArrayElement {
    static var elementType: PostgresDataType { .int8 }
    static var arrayType: PostgresDataType { .int8Array }
}

extension UUID: PostgresArrayElement {
    static var elementType: PostgresDataType { .uuid }
    static var arrayType: PostgresDataType { .uuidArray }
    static func read(_ bytes: UnsafeRawBufferPointer, as type: PostgresDataType) -> UUID? {
        guard type == .uuid, bytes.count == MemoryLayout<uuid_t>.size else { return nil }
        return UUID(uuid: bytes.loadUnaligned(as: uuid_t.self))
    }
    var wireByteCount: Int { 16 }
    func store(into bytes: UnsafeMutableRawBufferPointer) {
        withUnsafeBytes(of: uuid) { bytes.copyMemory(from: $0) }
    }
}

extension String: PostgresArrayElement {
    static var elementType: PostgresDataType { .text }
    static var arrayType: PostgresDataType { .textArray }
    /// Text, `varchar` or `name`, read as PostgresNIO reads them (invalid UTF-8 repaired).
    static func read(_ bytes: UnsafeRawBufferPointer, as type: PostgresDataType) -> String? {
        guard type == .text || type == .varchar || type == .name else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
    var wireByteCount: Int { utf8.count }
    func store(into bytes: UnsafeMutableRawBufferPointer) { bytes.copyBytes(from: utf8) }
    static var sharesRepeats: Bool { true }
}

extension TokenBytes: PostgresArrayElement {
    static var elementType: PostgresDataType { .bytea }
    static var arrayType: PostgresDataType { .byteaArray }
    static func read(_ bytes: UnsafeRawBufferPointer, as type: PostgresDataType) -> TokenBytes? {
        guard type == .bytea, let token = TokenBytes.token(bytes) else { return nil }
        return TokenBytes(token)
    }
    var wireByteCount: Int { token.byteCount }
    func store(into bytes: UnsafeMutableRawBufferPointer) { _ = token.copyBytes(to: bytes) }
}

/// A payload as PostgreSQL's `bytea`, any length (a claim reads its items' payloads as one
/// `bytea[]` a chunk).
struct PayloadBytes: PostgresArrayElement {
    var bytes: [UInt8]

    static var elementType: PostgresDataType { .bytea }
    static var arrayType: PostgresDataType { .byteaArray }
    static func read(_ bytes: UnsafeRawBufferPointer, as type: PostgresDataType) -> PayloadBytes? {
        guard type == .bytea else { return nil }
        return PayloadBytes(bytes: Array(bytes))
    }
    var wireByteCount: Int { bytes.count }
    func store(into bytes: UnsafeMutableRawBufferPointer) { bytes.copyBytes(from: self.bytes) }
}
