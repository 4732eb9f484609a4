/// A tenant's identifier: `[a-z0-9][a-z0-9-]{0,63}`.
public struct TenantID: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    public let rawValue: String

    public init(_ rawValue: String) throws(TenantIDError) {
        let bytes = Array(rawValue.utf8)
        guard let first = bytes.first, bytes.count <= 64 else { throw TenantIDError(value: rawValue) }
        func alnum(_ b: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
        }
        guard alnum(first), bytes.dropFirst().allSatisfy({ alnum($0) || $0 == UInt8(ascii: "-") }) else {
            throw TenantIDError(value: rawValue)
        }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    public static func < (lhs: TenantID, rhs: TenantID) -> Bool { lhs.rawValue < rhs.rawValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        do { try self.init(raw) } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

public struct TenantIDError: Error, Sendable, Hashable, CustomStringConvertible {
    public var value: String
    public var description: String {
        "tenant id '\(value)' must match [a-z0-9][a-z0-9-]{0,63} (lowercase letters, digits, hyphens; at most 64)"
    }
}
