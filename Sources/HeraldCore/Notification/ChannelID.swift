/// A broadcast channel's ID: the base64 text APNs' channel management service gave when the
/// channel was created (`apns-channel-id`). Apple gives no size; Herald takes up to
/// ``maximumLength`` characters of standard base64 (padding included) and keeps the text as
/// given.
///
/// ```swift
/// let channel = try ChannelID("dHN0LXNyY2gtY2hubA==")
/// channel.rawValue   // "dHN0LXNyY2gtY2hubA=="
/// ```
public struct ChannelID: Hashable, Sendable, CustomStringConvertible, Codable, Comparable {
    /// The longest channel ID accepted, in characters.
    public static let maximumLength = 256

    public let rawValue: String

    /// - Throws: `MissingChannelId` when empty, `BadChannelId` when it is not standard base64
    ///   (letters, digits, `+`, `/`, a length that is a multiple of 4, `=` only as padding) or
    ///   is longer than ``maximumLength``.
    public init(_ text: String, field: String = "channel_id") throws(NotificationValidationError) {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else {
            throw NotificationValidationError(.missingChannelId, field: field, message: "the channel ID is empty")
        }
        guard bytes.count <= Self.maximumLength else {
            throw NotificationValidationError(
                .badChannelId, field: field, message: "the channel ID is longer than \(Self.maximumLength) characters")
        }
        guard Self.isBase64(bytes) else {
            throw NotificationValidationError(.badChannelId, field: field, message: "the channel ID is not base64 text")
        }
        rawValue = text
    }

    /// Standard base64 with padding: groups of four, `=` only at the end (at most two).
    static func isBase64(_ bytes: [UInt8]) -> Bool {
        guard bytes.count % 4 == 0 else { return false }
        var padding = 0
        for (index, byte) in bytes.enumerated() {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"):
                if padding > 0 { return false }
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 || index < bytes.count - 2 { return false }
            default:
                return false
            }
        }
        return true
    }

    public var description: String { rawValue }

    public static func < (lhs: ChannelID, rhs: ChannelID) -> Bool { lhs.rawValue < rhs.rawValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        do {
            try self.init(raw)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.message)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// A channel's message storage policy (`message-storage-policy`), fixed when it is created.
public enum ChannelStoragePolicy: Int, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// `0`: nothing is stored for offline devices; broadcasts on it take `apns-expiration: 0` only.
    case noMessageStored = 0
    /// `1`: the most recent message is stored (at most 8 hours).
    case mostRecentMessageStored = 1

    public var description: String { String(rawValue) }
}
