import Foundation
import HeraldCore

/// The rules of APNs' broadcast route (`POST /4/broadcasts/apps/<bundle>`) and of its channel
/// management service (`/1/apps/<bundle>/channels`, `/1/apps/<bundle>/all-channels`), each as a
/// pure function.
enum SandboxBroadcastRules {
    static let broadcastPathPrefix = "/4/broadcasts/apps/"

    /// True for a path on the broadcast route.
    static func isBroadcastPath(_ path: String?) -> Bool {
        path?.hasPrefix(broadcastPathPrefix) ?? false
    }

    /// A broadcast path's bundle ID, or `BadPath`.
    static func broadcastBundle(_ path: String?) -> Checked<String> {
        guard let path, path.hasPrefix(broadcastPathPrefix) else { return .rejected(.badPath) }
        let bundle = String(path.dropFirst(broadcastPathPrefix.count))
        guard !bundle.isEmpty, !bundle.contains("/"), !bundle.contains("?") else { return .rejected(.badPath) }
        return .ok(bundle)
    }

    /// What a channel management path names.
    enum ManagementRoute: Equatable {
        /// `/1/apps/<bundle>/channels`: POST, GET or DELETE.
        case channels(bundle: String)
        /// `/1/apps/<bundle>/all-channels`: GET.
        case allChannels(bundle: String)
    }

    static func managementRoute(_ path: String?) -> Checked<ManagementRoute> {
        guard let path, path.hasPrefix("/1/apps/") else { return .rejected(.badPath) }
        let parts = path.dropFirst("/1/apps/".count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return .rejected(.badPath) }
        let bundle = String(parts[0])
        switch parts[1] {
        case "channels": return .ok(.channels(bundle: bundle))
        case "all-channels": return .ok(.allChannels(bundle: bundle))
        default: return .rejected(.badPath)
        }
    }

    /// A bundle ID with a push-type suffix (`TopicDisallowed`), or bad syntax.
    static func bundleProblem(_ bundle: String) -> APNsReason? {
        if let reason = SandboxRules.topicSyntax(bundle) { return reason == .missingTopic ? .badPath : reason }
        let suffixed = PushType.allCases.contains { $0.requiredTopicSuffix.map { bundle.hasSuffix($0) } ?? false }
        return suffixed ? .topicDisallowed : nil
    }

    /// `apns-channel-id`: `MissingChannelId`, `BadChannelId` (not base64, or longer than
    /// Herald's limit), or the ID.
    static func channelID(_ value: String?) -> Checked<String> {
        guard let value, !value.isEmpty else { return .rejected(.missingChannelId) }
        do {
            return .ok(try ChannelID(value).rawValue)
        } catch {
            return .rejected(.badChannelId)
        }
    }

    /// `apns-push-type` on a broadcast: required, and `liveactivity` (any case: Apple's pages
    /// write it both ways).
    static func broadcastPushType(_ value: String?) -> APNsReason? {
        guard let value else { return .missingPushType }
        return value.lowercased() == PushType.liveactivity.rawValue ? nil : .invalidPushType
    }

    /// `apns-priority` (required: 10, 5 or 1) and `apns-expiration` (required: UNIX seconds;
    /// a channel that stores nothing takes 0 only).
    static func broadcastHeaders(priority: String?, expiration: String?, storagePolicy: Int) -> APNsReason? {
        guard let priority, ["10", "5", "1"].contains(priority) else { return .badPriority }
        guard let expiration, let seconds = UInt32(expiration) else { return .badExpirationDate }
        if storagePolicy == 0, seconds != 0 { return .badExpirationDate }
        return nil
    }

    /// A broadcast's body: `PayloadEmpty`, `PayloadTooLarge` (over 5,120 bytes), or not a JSON
    /// object (`BadRequestPayload`).
    static func broadcastPayload(_ body: [UInt8]?) -> APNsReason? {
        guard let body, !body.isEmpty else { return .payloadEmpty }
        if body.count > Notification.maximumBroadcastPayloadSize { return .payloadTooLarge }
        return JSONSyntax.isObject(body) ? nil : .badRequestPayload
    }

    /// A channel creation's body: exactly `message-storage-policy` (0 or 1) and `push-type`
    /// (`LiveActivity`). Returns the policy, or `PayloadEmpty`, `BadRequestPayload` (not JSON)
    /// or `BadRequestParams` (another key, or a bad value).
    static func creation(_ body: [UInt8]?) -> Checked<Int> {
        guard let body, !body.isEmpty else { return .rejected(.payloadEmpty) }
        guard let root = try? StrictJSONParser.parse(body), case .object(let members) = root.value else {
            return .rejected(.badRequestPayload)
        }
        var policy: Int? = nil
        var pushType: String? = nil
        for (key, member) in members {
            switch (key, member.value) {
            case ("message-storage-policy", .number(let text)) where text == "0" || text == "1":
                policy = Int(text)
            case ("push-type", .string(let text)):
                pushType = text
            default:
                return .rejected(.badRequestParams)
            }
        }
        guard let policy, let pushType, pushType.lowercased() == "liveactivity" else { return .rejected(.badRequestParams) }
        return .ok(policy)
    }

    /// A read's answer body.
    static func channelBody(storagePolicy: Int) -> [UInt8] {
        Array(#"{"message-storage-policy":\#(storagePolicy),"push-type":"LiveActivity"}"#.utf8)
    }

    /// A list's answer body.
    static func listBody(_ ids: [String]) -> [UInt8] {
        (try? JSONEncoder().encode(["channels": ids])).map(Array.init) ?? Array(#"{"channels":[]}"#.utf8)
    }
}
