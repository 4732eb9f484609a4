import HeraldConfig
import HeraldCore

/// What the tenant lifecycle requires of what its callers hand it, beyond what a tenant file's
/// own parser checks: the admin API, the console and `herald tenants` all reach
/// ``ReloadCoordinator/createTenant(_:)`` and ``ReloadCoordinator/updateTenant(_:_:)``, which apply
/// these rules, so each caller refuses exactly the same things (its own field names come from
/// mapping ``TenantLifecycleError/field``).
public enum TenantLifecycleRules {
    /// Topics a tenant may list.
    public static let maximumTopics = 1000
    /// API keys a tenant may have.
    public static let maximumAPIKeys = 100

    /// API key names appear in URLs (`/admin/tenants/{id}/api-keys/{name}`): 1 to 64 of
    /// `A-Z a-z 0-9 . _ -`. Refused with the field `api_keys`.
    public static func checkKeyName(_ name: String) throws(TenantLifecycleError) {
        let bytes = name.utf8
        guard (1...64).contains(bytes.count), bytes.allSatisfy(isKeyNameByte) else {
            throw .invalid("an API key name must be 1 to 64 of A-Z a-z 0-9 . _ -", field: "api_keys")
        }
    }

    /// `topics`, when among the sections: an array of at most ``maximumTopics`` strings. The
    /// sections go into the tenant file as YAML, where a JSON `false` or `7` would read back as
    /// the topic "false" or "7", so the type is checked before the file is written. A `null`
    /// (take the section out) is left to the file's own check, which requires topics.
    public static func checkTopics<Sections: Sequence>(in sections: Sections) throws(TenantLifecycleError)
    where Sections.Element == (String, JSONValue?) {
        for (name, value) in sections where name == "topics" {
            switch value {
            case nil, .null?:
                continue
            case .array(let items)?:
                guard items.count <= maximumTopics else {
                    throw .invalid("lists \(items.count) topics; a tenant may have at most \(maximumTopics)", field: "topics")
                }
                for (index, item) in items.enumerated() {
                    guard case .string = item else {
                        throw .invalid("must be a string (a bundle ID such as com.example.app)", field: "topics[\(index)]")
                    }
                }
            default:
                throw .invalid("must be an array of topic strings", field: "topics")
            }
        }
    }

    private static func isKeyNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
    }
}
