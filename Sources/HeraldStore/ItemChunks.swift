import Foundation
import HeraldCore

// The SQLite store's batch item shape (migration v10-sqlite-batch-items). A job's items are written by
// the POST as chunk rows of up to ``ItemChunks/size`` items, each one blob of their notifications
// (device tokens as bytes, apns-ids as 16 bytes, a topic or push type equal to the previous
// item's written once). What changes while the job runs is kept apart and small:
// - `job_settled`: per chunk, one bit per item that left `pending` (an outcome or a retry);
// - `job_sent`: the plain successes (200, nothing else to say) of one commit group and chunk as
//   one row of fixed-size records: index, attempts, finish time, the apns-id APNs answered;
// - `job_item`: a row only for an item with something else to keep: any other outcome, a retry,
//   an on-the-wire mark;
// - `job_claim`: one lease per claimant and job, with the indexes it holds.
// The blobs are read through ``ByteReader`` (bounds checked: a damaged blob is a
// ``StoreError/corrupt(_:)``, never a trap).

enum ItemChunks {
    /// Items per chunk row (a power of two: a chunk starts at a multiple of it).
    static let size = 256
    /// Bytes of a chunk's `job_settled` bitmap.
    static let settledBytes = size / 8
    /// Items one job may hold in this shape (indexes and row ids keep 31 bits).
    static let maxItems = Int(Int32.max) - size

    /// The first index of the chunk holding `index` (an index in 0 ..< ``maxItems``).
    static func first(of index: Int) -> Int { index & ~(size - 1) }

    /// The row id of a chunk's rows (`job_chunk`, `job_settled`): the job's key in the high 32
    /// bits, the chunk's first index in the low ones. `job_sent` adds a sequence number (0–255)
    /// in the low byte, which a chunk's first index leaves free.
    static func rowID(key: Int64, first: Int) -> Int64 { key << 32 | Int64(first) }

    /// The lowest and highest row id of a job's rows.
    static func rowIDs(key: Int64) -> ClosedRange<Int64> { (key << 32)...(key << 32 | 0xffff_ffff) }

    // MARK: Notifications

    /// Flags of one item in a chunk blob.
    private enum Flag {
        static let topic: UInt8 = 0x01
        static let sameTopic: UInt8 = 0x02
        static let priority: UInt8 = 0x04
        static let expiration: UInt8 = 0x08
        static let collapseID: UInt8 = 0x10
        static let samePayload: UInt8 = 0x20
        static let samePushType: UInt8 = 0x40
    }

    /// Encodes items' notifications (apns-ids assigned, payloads as their `job_payload` ids)
    /// into one chunk blob.
    struct Encoder {
        private(set) var bytes: [UInt8] = []
        private var lastTopic: String? = nil
        private var lastPushType: PushType? = nil
        private var lastPayload: Int64 = -1

        init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

        /// Appends one item: its fields, then the token's and the apns-id's bytes, written
        /// straight into the chunk (no array is made for either).
        mutating func append(_ notification: HeraldCore.Notification, id: NotificationID, payloadRef: Int64) throws {
            var flags: UInt8 = 0
            if let topic = notification.topic {
                flags |= Flag.topic
                if topic == lastTopic { flags |= Flag.sameTopic }
            }
            if notification.priority != nil { flags |= Flag.priority }
            if notification.expiration != nil { flags |= Flag.expiration }
            if notification.collapseID != nil { flags |= Flag.collapseID }
            if payloadRef == lastPayload { flags |= Flag.samePayload }
            if notification.pushType == lastPushType { flags |= Flag.samePushType }
            bytes.append(flags)
            // A DeviceToken holds checked, lowercase hex only (its initializers validate). A
            // batch item goes to a device; broadcasts are single sends.
            guard let device = notification.deviceToken else {
                throw StoreError.invalidArgument("a batch item needs a device token; a broadcast is not a batch item")
            }
            let tokenLength = device.byteCount
            guard tokenLength <= 255 else { throw StoreError.invalidArgument("a device token is longer than 255 bytes") }
            bytes.append(UInt8(tokenLength))
            let tokenStart = bytes.count
            bytes.append(contentsOf: repeatElement(0, count: tokenLength))
            bytes.withUnsafeMutableBytes { chunk in
                _ = device.copyBytes(to: UnsafeMutableRawBufferPointer(rebasing: chunk[tokenStart...]))
            }
            if flags & Flag.samePushType == 0 {
                try appendShort(notification.pushType.rawValue, field: "push type")
                lastPushType = notification.pushType
            }
            if let topic = notification.topic, flags & Flag.sameTopic == 0 {
                let utf8 = Array(topic.utf8)
                guard utf8.count <= Int(UInt16.max) else { throw StoreError.invalidArgument("a topic is too long") }
                appendInteger(UInt16(utf8.count))
                bytes.append(contentsOf: utf8)
                lastTopic = topic
            }
            if let priority = notification.priority { bytes.append(UInt8(clamping: priority.rawValue)) }
            switch notification.expiration {
            case nil: break
            case .immediately?: appendInteger(Int64(0))
            case .at(let seconds)?: appendInteger(Int64(seconds))
            }
            if let collapseID = notification.collapseID { try appendShort(collapseID, field: "collapse id") }
            id.words.append(to: &bytes)
            if flags & Flag.samePayload == 0 {
                appendInteger(payloadRef)
                lastPayload = payloadRef
            }
        }

        private mutating func appendShort(_ string: String, field: String) throws {
            let utf8 = Array(string.utf8)
            guard utf8.count <= 255 else { throw StoreError.invalidArgument("a \(field) is longer than 255 bytes") }
            bytes.append(UInt8(utf8.count))
            bytes.append(contentsOf: utf8)
        }

        private mutating func appendInteger<T: FixedWidthInteger>(_ value: T) {
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
    }

    /// One item of a chunk, decoded.
    struct Item {
        var notification: HeraldCore.Notification
        var payloadRef: Int64
    }

    /// Decodes the items of a chunk blob whose position (0 ..< count) is in `wanted` (all of them
    /// when nil), in position order, with their payloads left empty and their payload refs.
    static func decode(_ blob: Data, count: Int, wanted: Range<Int>? = nil) throws -> [(position: Int, item: Item)] {
        var items: [(position: Int, item: Item)] = []
        items.reserveCapacity(max(0, min(wanted?.count ?? count, count, size)))
        try decode(blob, count: count, wanted: wanted, payload: { _ in [] }) { position, notification, payloadRef in
            items.append((position, Item(notification: notification, payloadRef: payloadRef)))
        }
        return items
    }

    /// Decodes the items of a chunk blob whose position (0 ..< count) is in `wanted` (all of them
    /// when nil), in position order: each kept item's notification is built once, with the payload
    /// `payload` gives for its payload ref, and handed to `each` with its position and payload ref.
    static func decode(
        _ blob: Data, count: Int, wanted: Range<Int>? = nil, payload: (Int64) throws -> [UInt8],
        _ each: (_ position: Int, _ notification: consuming HeraldCore.Notification, _ payloadRef: Int64) throws -> Void
    ) throws {
        // The count comes from the row, not the blob: a corrupt row must not trap the range or
        // reserve more than a chunk holds.
        guard (0...size).contains(count) else { throw StoreError.corrupt("a job chunk that claims \(count) items") }
        var reader = ByteReader(blob)
        var lastTopic: String? = nil
        var lastPushType: PushType? = nil
        var lastPayload: Int64 = -1
        for position in 0..<count {
            let flags = try reader.byte()
            let tokenLength = Int(try reader.byte())
            let keep = wanted.map { $0.contains(position) } ?? true
            let tokenBytes = try reader.bytes(tokenLength)
            let token = keep ? DeviceToken(bytes: tokenBytes) : nil
            if flags & Flag.samePushType == 0 {
                let raw = try reader.shortString()
                guard let pushType = PushType(rawValue: raw) else { throw StoreError.corrupt("a job chunk with an unknown push type") }
                lastPushType = pushType
            }
            guard let pushType = lastPushType else { throw StoreError.corrupt("a job chunk without a push type") }
            var topic: String? = nil
            if flags & Flag.topic != 0 {
                if flags & Flag.sameTopic == 0 {
                    let length = Int(try reader.integer(UInt16.self))
                    lastTopic = String(decoding: try reader.bytes(length), as: UTF8.self)
                }
                topic = lastTopic
            }
            var priority: Priority? = nil
            if flags & Flag.priority != 0 { priority = Priority(rawValue: Int(try reader.byte())) }
            var expiration: Expiration? = nil
            if flags & Flag.expiration != 0 {
                let value = try reader.integer(Int64.self)
                expiration = value == 0 ? .immediately : .at(UInt32(clamping: value))
            }
            var collapseID: String? = nil
            if flags & Flag.collapseID != 0 { collapseID = try reader.shortString() }
            let idBytes = try reader.bytes(16)
            if flags & Flag.samePayload == 0 { lastPayload = try reader.integer(Int64.self) }
            guard keep, let token else { continue }
            try each(
                position,
                HeraldCore.Notification(
                    deviceToken: token, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
                    collapseID: collapseID, id: ItemChunks.id(idBytes), payload: try payload(lastPayload)),
                lastPayload)
        }
    }

    /// An apns-id from its 16 bytes (canonical: lowercase, 8-4-4-4-12).
    static func id(_ bytes: some Collection<UInt8>) -> NotificationID {
        NotificationID(bytes: bytes)
    }

    // MARK: Settled bits

    static func isSet(_ bits: [UInt8], _ position: Int) -> Bool {
        bits[position >> 3] & (1 << UInt8(position & 7)) != 0
    }

    static func set(_ bits: inout [UInt8], _ position: Int) {
        bits[position >> 3] |= 1 << UInt8(position & 7)
    }

    // MARK: Plain successes (`job_sent`)

    /// One plain success: 4 bytes index, 8 attempts, 8 finish time (ms), 1 flag, 16 apns-id.
    static let sentRecordBytes = 37

    struct Sent {
        var index: Int
        var attempts: Int
        var finishedMillis: Int64
        var apnsID: NotificationID?
    }

    /// Appends one plain success record.
    static func appendSent(
        _ bytes: inout [UInt8], index: Int, attempts: Int, finishedMillis: Int64, apnsID: NotificationID?
    ) {
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: index).littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: Int64(attempts).littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: finishedMillis.littleEndian) { bytes.append(contentsOf: $0) }
        guard let apnsID else {
            bytes.append(0)
            bytes.append(contentsOf: repeatElement(0, count: 16))
            return
        }
        bytes.append(1)
        apnsID.words.append(to: &bytes)
    }

    static func decodeSent(_ blob: Data, into sent: inout [Int: Sent], range: ClosedRange<Int>) throws {
        guard blob.count % sentRecordBytes == 0 else { throw StoreError.corrupt("a job_sent row of a wrong size") }
        var reader = ByteReader(blob)
        while !reader.atEnd {
            let index = Int(try reader.integer(UInt32.self))
            guard range.contains(index) else {
                try reader.skip(sentRecordBytes - MemoryLayout<UInt32>.size)
                continue
            }
            let attempts = Int(try reader.integer(Int64.self))
            let finished = try reader.integer(Int64.self)
            let hasID = try reader.byte() != 0
            let id = try reader.bytes(16)
            sent[index] = Sent(index: index, attempts: attempts, finishedMillis: finished, apnsID: hasID ? ItemChunks.id(id) : nil)
        }
    }

    // MARK: Claims (`job_claim.items`)

    /// The high bit of a claim entry: the item was claimed as a due retry (state `retrying`).
    static let retryEntry: UInt32 = 0x8000_0000

    /// The claim entry of the item at `index`, with ``retryEntry`` set for a due retry. An index
    /// read from a row that no entry can hold (negative, or at the retry bit or above) is a
    /// corrupt row, refused rather than trapped on.
    static func claimEntry(_ index: Int, retry: Bool) throws -> UInt32 {
        guard let entry = UInt32(exactly: index), entry < retryEntry else {
            throw StoreError.corrupt("a job item with the index \(index), which no claim can hold")
        }
        return retry ? entry | retryEntry : entry
    }

    static func entries(_ blob: Data) throws -> [UInt32] {
        guard blob.count % 4 == 0 else { throw StoreError.corrupt("a job_claim row of a wrong size") }
        var reader = ByteReader(blob)
        var entries: [UInt32] = []
        entries.reserveCapacity(blob.count / 4)
        while !reader.atEnd { entries.append(try reader.integer(UInt32.self)) }
        return entries
    }

    static func blob(_ entries: [UInt32]) -> Data {
        var data = Data(capacity: entries.count * 4)
        for entry in entries { withUnsafeBytes(of: entry.littleEndian) { data.append(contentsOf: $0) } }
        return data
    }
}

/// Reads a blob with bounds checks: past its end is ``StoreError/corrupt(_:)``.
struct ByteReader {
    private let data: [UInt8]
    private var offset = 0

    init(_ data: Data) { self.data = [UInt8](data) }

    var atEnd: Bool { offset >= data.count }

    mutating func byte() throws -> UInt8 {
        guard offset < data.count else { throw StoreError.corrupt("a job blob ends too early") }
        defer { offset += 1 }
        return data[offset]
    }

    mutating func bytes(_ count: Int) throws -> ArraySlice<UInt8> {
        guard count >= 0, data.count - offset >= count else { throw StoreError.corrupt("a job blob ends too early") }
        defer { offset += count }
        return data[offset..<offset + count]
    }

    mutating func skip(_ count: Int) throws { _ = try bytes(count) }

    /// A little-endian integer.
    mutating func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let size = MemoryLayout<T>.size
        guard data.count - offset >= size else { throw StoreError.corrupt("a job blob ends too early") }
        defer { offset += size }
        return T(littleEndian: data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) })
    }

    mutating func shortString() throws -> String {
        let length = Int(try byte())
        return String(decoding: try bytes(length), as: UTF8.self)
    }
}
