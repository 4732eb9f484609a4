/// A `reason` string from an APNs error response or GOAWAY frame (Apple's table of reasons).
///
/// Wire strings map to a case; anything Apple adds later is kept as ``unknown(_:)``.
public enum APNsReason: Hashable, Sendable, CustomStringConvertible, Codable {
    case badCollapseId
    case badDeviceToken
    case badExpirationDate
    case badMessageId
    case badPriority
    case badTopic
    case deviceTokenNotForTopic
    case duplicateHeaders
    case idleTimeout
    /// 400: the `apns-push-type` value is not one APNs knows.
    case invalidPushType
    case missingDeviceToken
    case missingTopic
    case payloadEmpty
    case topicDisallowed
    case badCertificate
    case badCertificateEnvironment
    case expiredProviderToken
    case forbidden
    case invalidProviderToken
    case missingProviderToken
    /// 403: the token's key ID is not related to the team or the topic (a key restricted to
    /// other topics, or another team's).
    case unrelatedKeyIdInToken
    /// 403: the token's key is restricted to the other environment (its key ID is known there).
    case badEnvironmentKeyIdInToken
    /// 403: the token was signed with a key restricted to the other environment.
    case badEnvironmentKeyInToken
    case badPath
    case methodNotAllowed
    /// 410: the device token has expired (a Live Activity's push token after the activity ended).
    case expiredToken
    case unregistered
    case payloadTooLarge
    case tooManyProviderTokenUpdates
    case tooManyRequests
    case internalServerError
    case serviceUnavailable
    case shutdown
    /// 400 (broadcasts): broadcast push is not enabled for the bundle ID.
    case featureNotEnabled
    /// 400 (broadcasts, channel management): no `apns-channel-id` header.
    case missingChannelId
    /// 400: the `apns-channel-id` is not base64, or too long.
    case badChannelId
    /// 400: no channel has that ID (deleted, or never made for this bundle and environment).
    case channelNotRegistered
    /// 400 (channel management): the JSON body holds an attribute APNs does not know, or a bad value.
    case badRequestParams
    /// 400 (channel management): the JSON body cannot be parsed.
    case badRequestPayload
    /// 400 (broadcasts): no `apns-push-type` header.
    case missingPushType
    /// 400 (channel management): the app has as many channels as APNs allows (10,000 per environment).
    case cannotCreateChannelConfig
    /// 403 (broadcasts, channel management): the bundle ID in the path is not one the token or
    /// certificate is for.
    case topicMismatch
    /// A reason string this version of Herald does not know.
    case unknown(String)

    /// Every reason in Apple's table, in the table's order.
    public static let known: [APNsReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken, .missingTopic,
        .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
        .expiredProviderToken, .forbidden, .invalidProviderToken, .missingProviderToken,
        .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .badPath,
        .methodNotAllowed, .expiredToken, .unregistered, .payloadTooLarge, .tooManyProviderTokenUpdates,
        .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown,
    ]

    /// The reasons Apple lists for broadcasts and channel management besides those in ``known``.
    public static let broadcastReasons: [APNsReason] = [
        .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered, .badRequestParams,
        .badRequestPayload, .missingPushType, .cannotCreateChannelConfig, .topicMismatch,
    ]

    private static let byWire: [String: APNsReason] = Dictionary(
        uniqueKeysWithValues: (known + broadcastReasons).map { ($0.wireValue, $0) })

    public init(wireValue: String) {
        self = Self.byWire[wireValue] ?? .unknown(wireValue)
    }

    /// The string APNs puts in `{"reason": …}`.
    public var wireValue: String {
        switch self {
        case .badCollapseId: return "BadCollapseId"
        case .badDeviceToken: return "BadDeviceToken"
        case .badExpirationDate: return "BadExpirationDate"
        case .badMessageId: return "BadMessageId"
        case .badPriority: return "BadPriority"
        case .badTopic: return "BadTopic"
        case .deviceTokenNotForTopic: return "DeviceTokenNotForTopic"
        case .duplicateHeaders: return "DuplicateHeaders"
        case .idleTimeout: return "IdleTimeout"
        case .invalidPushType: return "InvalidPushType"
        case .missingDeviceToken: return "MissingDeviceToken"
        case .missingTopic: return "MissingTopic"
        case .payloadEmpty: return "PayloadEmpty"
        case .topicDisallowed: return "TopicDisallowed"
        case .badCertificate: return "BadCertificate"
        case .badCertificateEnvironment: return "BadCertificateEnvironment"
        case .expiredProviderToken: return "ExpiredProviderToken"
        case .forbidden: return "Forbidden"
        case .invalidProviderToken: return "InvalidProviderToken"
        case .missingProviderToken: return "MissingProviderToken"
        case .unrelatedKeyIdInToken: return "UnrelatedKeyIdInToken"
        case .badEnvironmentKeyIdInToken: return "BadEnvironmentKeyIdInToken"
        case .badEnvironmentKeyInToken: return "BadEnvironmentKeyInToken"
        case .badPath: return "BadPath"
        case .methodNotAllowed: return "MethodNotAllowed"
        case .expiredToken: return "ExpiredToken"
        case .unregistered: return "Unregistered"
        case .payloadTooLarge: return "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: return "TooManyProviderTokenUpdates"
        case .tooManyRequests: return "TooManyRequests"
        case .internalServerError: return "InternalServerError"
        case .serviceUnavailable: return "ServiceUnavailable"
        case .shutdown: return "Shutdown"
        case .featureNotEnabled: return "FeatureNotEnabled"
        case .missingChannelId: return "MissingChannelId"
        case .badChannelId: return "BadChannelId"
        case .channelNotRegistered: return "ChannelNotRegistered"
        case .badRequestParams: return "BadRequestParams"
        case .badRequestPayload: return "BadRequestPayload"
        case .missingPushType: return "MissingPushType"
        case .cannotCreateChannelConfig: return "CannotCreateChannelConfig"
        case .topicMismatch: return "TopicMismatch"
        case .unknown(let raw): return raw
        }
    }

    /// The HTTP status APNs answers with for this reason (Apple's table); nil for unknown reasons.
    public var status: Int? {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
            .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
            .missingTopic, .payloadEmpty, .topicDisallowed, .featureNotEnabled, .missingChannelId, .badChannelId,
            .channelNotRegistered, .badRequestParams, .badRequestPayload, .missingPushType, .cannotCreateChannelConfig:
            return 400
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
            .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
            .badEnvironmentKeyInToken, .topicMismatch:
            return 403
        case .badPath: return 404
        case .methodNotAllowed: return 405
        case .expiredToken, .unregistered: return 410
        case .payloadTooLarge: return 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: return 429
        case .internalServerError: return 500
        case .serviceUnavailable, .shutdown: return 503
        case .unknown: return nil
        }
    }

    /// True for a refusal of the tenant's credential rather than of one notification: a
    /// certificate or provider token APNs will not take, or a key used outside what Apple
    /// restricted it to. Nothing resends it; an operator has to act.
    public var isCredentialProblem: Bool {
        switch self {
        case .badCertificate, .badCertificateEnvironment, .invalidProviderToken, .missingProviderToken, .forbidden,
            .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .topicMismatch:
            return true
        default:
            return false
        }
    }

    /// A short label, safe for metrics (bounded: unknown reasons share one label).
    public var metricLabel: String {
        if case .unknown = self { return "Unknown" }
        return wireValue
    }

    public var description: String { wireValue }

    public init(from decoder: any Decoder) throws {
        self.init(wireValue: try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(wireValue)
    }
}
