/// One call to APNs' channel management service (broadcast channels), for one bundle ID in one
/// environment: `POST`, `GET` or `DELETE` on `/1/apps/<bundle>/channels`, or `GET` on
/// `/1/apps/<bundle>/all-channels`.
public enum ChannelCall: Sendable, Hashable {
    /// Creates a channel (`201`, its ID in `apns-channel-id`).
    case create(bundleID: String, storagePolicy: ChannelStoragePolicy)
    /// Reads a channel's configuration (`200`, `{"message-storage-policy": …, "push-type": …}`).
    case read(bundleID: String, channel: ChannelID)
    /// Deletes a channel (`204`).
    case delete(bundleID: String, channel: ChannelID)
    /// Lists the bundle's channels (`200`, `{"channels": […]}`).
    case list(bundleID: String)

    public var bundleID: String {
        switch self {
        case .create(let bundle, _), .read(let bundle, _), .delete(let bundle, _), .list(let bundle): return bundle
        }
    }

    public var method: String {
        switch self {
        case .create: return "POST"
        case .read, .list: return "GET"
        case .delete: return "DELETE"
        }
    }

    public var path: String {
        switch self {
        case .list(let bundle): return "/1/apps/\(bundle)/all-channels"
        default: return "/1/apps/\(bundleID)/channels"
        }
    }

    /// `apns-channel-id`.
    public var channel: ChannelID? {
        switch self {
        case .read(_, let channel), .delete(_, let channel): return channel
        case .create, .list: return nil
        }
    }

    /// The JSON body (only a creation has one).
    public var body: [UInt8]? {
        guard case .create(_, let policy) = self else { return nil }
        return Array(#"{"message-storage-policy":\#(policy.rawValue),"push-type":"LiveActivity"}"#.utf8)
    }

    /// The status APNs answers a successful call with.
    public var successStatus: Int {
        switch self {
        case .create: return 201
        case .read, .list: return 200
        case .delete: return 204
        }
    }
}

/// What a successful channel management answer says, read from untrusted bytes: every field
/// is checked, and an answer that does not hold what the call expects is refused.
public enum ChannelAnswer {
    /// The new channel's ID from a creation's `apns-channel-id`.
    public static func createdChannel(_ response: APNsResponse) throws(NotificationValidationError) -> ChannelID {
        guard let header = response.channelID else {
            throw NotificationValidationError(
                .missingChannelId, field: "apns-channel-id", message: "APNs answered the creation without a channel ID")
        }
        return try ChannelID(header, field: "apns-channel-id")
    }

    /// A read's storage policy (the body's `message-storage-policy`).
    public static func storagePolicy(_ response: APNsResponse) throws(NotificationValidationError) -> ChannelStoragePolicy {
        guard let body = members(response.body),
            case .number(let text)? = body.first(where: { $0.key == "message-storage-policy" })?.value.value,
            let value = Int(text), let policy = ChannelStoragePolicy(rawValue: value)
        else {
            throw NotificationValidationError(
                .badRequestPayload, field: "message-storage-policy", message: "APNs' answer holds no storage policy of 0 or 1")
        }
        return policy
    }

    /// A list's channel IDs (the body's `channels`): its first `limit` items, those that are not
    /// base64 text left out.
    public static func channels(_ response: APNsResponse, limit: Int) throws(NotificationValidationError) -> [ChannelID] {
        guard let body = members(response.body),
            case .array(let items)? = body.first(where: { $0.key == "channels" })?.value.value
        else {
            throw NotificationValidationError(
                .badRequestPayload, field: "channels", message: "APNs' answer holds no list of channels")
        }
        var channels: [ChannelID] = []
        for item in items.prefix(limit) {
            if case .string(let text) = item.value, let channel = try? ChannelID(text) { channels.append(channel) }
        }
        return channels
    }

    /// An answer body's top-level members, read by the strict parser (bounded nesting: the
    /// body is untrusted); nil when it is not a JSON object.
    private static func members(_ body: [UInt8]) -> [(key: String, value: JSONNode)]? {
        guard let root = try? StrictJSONParser.parse(body), case .object(let members) = root.value else { return nil }
        return members
    }
}
