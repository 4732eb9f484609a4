import Foundation

/// A device token that APNs reported invalid for a topic (410 Unregistered, 400 BadDeviceToken,
/// 400 DeviceTokenNotForTopic).
public struct InvalidTokenRecord: Sendable, Hashable {
    public var token: DeviceToken
    public var topic: String
    public var environment: APNsEnvironment
    public var reason: APNsReason
    /// With 410: when APNs last confirmed the token is not valid for the topic any more.
    public var apnsTimestamp: Date?
    /// When Herald recorded it.
    public var recordedAt: Date
    /// When the tenant last told Herald the device registered this token again.
    public var registeredAt: Date?

    public init(
        token: DeviceToken, topic: String, environment: APNsEnvironment, reason: APNsReason, apnsTimestamp: Date?,
        recordedAt: Date, registeredAt: Date? = nil
    ) {
        self.token = token
        self.topic = topic
        self.environment = environment
        self.reason = reason
        self.apnsTimestamp = apnsTimestamp
        self.recordedAt = recordedAt
        self.registeredAt = registeredAt
    }

    /// The time a re-registration must be later than: APNs' timestamp, or else when it was recorded.
    public var invalidSince: Date { apnsTimestamp ?? recordedAt }

    /// True while sends to the token should be refused: it has not been registered again with a
    /// registration time later than ``invalidSince`` (Apple: stop pushing until the device
    /// registers a token with a later timestamp).
    public var isInvalid: Bool {
        guard let registeredAt else { return true }
        return registeredAt <= invalidSince
    }
}

/// A store read a send would wait for, not made: the store failed such a read moments ago
/// (Herald's `SendPathLookups`). The send goes on without it, as after a failed read, without
/// waiting for the store again.
public struct StoreLookupSkipped: Error, Sendable, CustomStringConvertible {
    public var what: String

    public init(what: String) { self.what = what }

    public var description: String { "\(what) was skipped: the store did not answer such a read moments ago" }
}

/// The tenant's invalid-token list, as a plugin sees it: already scoped to one tenant.
public protocol InvalidTokenRecorder: Sendable {
    /// Records (or updates) the token as invalid for the topic. A newer APNs timestamp wins; a
    /// registration time already stored is kept.
    func record(_ record: InvalidTokenRecord) async throws
    /// The record for the token and topic in that environment, if any.
    func invalidToken(_ token: DeviceToken, topic: String, environment: APNsEnvironment) async throws
        -> InvalidTokenRecord?
    /// ``invalidToken(_:topic:environment:)`` answered by callback: `answer` is called exactly
    /// once, on any thread, and must not block. The default runs the `async` lookup in a task.
    func lookUp(
        _ token: DeviceToken, topic: String, environment: APNsEnvironment,
        answer: @escaping @Sendable (Result<InvalidTokenRecord?, any Error>) -> Void)
}

extension InvalidTokenRecorder {
    public func lookUp(
        _ token: DeviceToken, topic: String, environment: APNsEnvironment,
        answer: @escaping @Sendable (Result<InvalidTokenRecord?, any Error>) -> Void
    ) {
        Task {
            do {
                answer(.success(try await invalidToken(token, topic: topic, environment: environment)))
            } catch {
                answer(.failure(error))
            }
        }
    }
}
