import Crypto
import Foundation
import HeraldCore

/// Tenant API keys: how they are made, hashed and looked up.
///
/// A key is `hk_` followed by 32 random bytes in base64url (no padding). Tenant files list only
/// the key's SHA-256 (`api_keys: [{name, sha256}]`); Herald never stores or logs the key.
///
/// ```swift
/// let key = APIKeys.generate()              // give this to the tenant, once
/// let line = APIKeys.sha256Hex(of: key)     // put this in the tenant's YAML
/// ```
public enum APIKeys {
    /// A fresh random key.
    public static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return "hk_" + base64URL(bytes)
    }

    /// The SHA-256 of the key's UTF-8 bytes, as 64 lowercase hex digits (what tenant files hold).
    public static func sha256Hex(of key: String) -> String {
        hex(Array(SHA256.hash(data: Array(key.utf8))))
    }

    static func digest(of key: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(key.utf8)))
    }

    /// Compares two byte strings in time that depends only on their lengths.
    static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func bytes(hex: String) -> [UInt8]? {
        let utf8 = Array(hex.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = HexDigits.value(utf8[index]), let low = HexDigits.value(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    static func base64URL(_ bytes: [UInt8]) -> String { Base64URL.encode(bytes) }

    /// The key of an `Authorization: Bearer <key>` header value; nil for any other form.
    static func bearer(_ header: String?) -> String? {
        guard let header else { return nil }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.count > 7, trimmed.prefix(7).lowercased() == "bearer " else { return nil }
        let key = trimmed.dropFirst(7).trimmingCharacters(in: .whitespaces)
        return key.isEmpty ? nil : key
    }
}

/// Which tenant an API key belongs to: an index from SHA-256 digest to tenant, built from the
/// loaded tenants' `api_keys` (and rebuilt when tenants are reloaded).
///
/// The presented key is hashed first and the index is keyed by digest, so the lookup's timing
/// depends only on a SHA-256 of the caller's own guess, never on the stored digests' bytes; the
/// match is then confirmed with a constant-time comparison of the full digest.
public struct APIKeyIndex: Sendable {
    public struct Entry: Sendable, Hashable {
        public var tenant: TenantID
        /// The key's name in the tenant file (safe to log).
        public var name: String
        let digest: [UInt8]
        /// The digest as tenant files write it (64 lowercase hex digits).
        var sha256Hex: String { APIKeys.hex(digest) }
    }

    private var byDigest: [[UInt8]: Entry] = [:]
    /// Digests listed by more than one tenant: refused for all of them.
    public private(set) var conflicts: [String] = []

    public init() {}

    public init(tenants: [TenantConfiguration]) {
        var seen: [[UInt8]: Entry] = [:]
        var conflicting = Set<[UInt8]>()
        for tenant in tenants {
            for key in tenant.apiKeys {
                guard let digest = APIKeys.bytes(hex: key.sha256Hex), digest.count == 32 else { continue }
                if let existing = seen[digest], existing.tenant != tenant.id {
                    conflicting.insert(digest)
                    conflicts.append("\(existing.tenant)/\(existing.name) and \(tenant.id)/\(key.name)")
                    continue
                }
                seen[digest] = Entry(tenant: tenant.id, name: key.name, digest: digest)
            }
        }
        for digest in conflicting { seen.removeValue(forKey: digest) }
        byDigest = seen
    }

    /// The tenant (and key name) the key belongs to, or nil.
    public func authenticate(_ key: String) -> Entry? {
        let digest = APIKeys.digest(of: key)
        guard let entry = byDigest[digest], APIKeys.constantTimeEquals(entry.digest, digest) else { return nil }
        return entry
    }

    /// The indexed digests, as hex.
    var digests: Set<String> { Set(byDigest.values.map(\.sha256Hex)) }

    /// How many keys are indexed.
    public var count: Int { byDigest.count }
}
