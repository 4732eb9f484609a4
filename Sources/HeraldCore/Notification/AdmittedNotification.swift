/// A notification a tenant has admitted: checked once against APNs' rules and the tenant's
/// policy, with its apns-id, its topic, its push type, its environment and the credential
/// generation it was admitted under fixed. Only ``TenantConfiguration/admit(_:id:environment:credentialGeneration:topicRules:)``
/// makes one.
///
/// Everything after the admission takes this value and checks nothing again: the pipeline's
/// middlewares see it as it is (they may refuse it, not change it), the transport writes its
/// headers as they are, and every attempt of a resend goes with the same apns-id.
///
/// ```swift
/// let admitted = try tenant.admit(note, id: ids.nextID(), environment: nil)
/// admitted.topic        // the checked topic (a single-topic certificate tenant's own when the note had none)
/// admitted.environment  // resolved from the tenant's default
/// ```
public struct AdmittedNotification: Sendable, Hashable {
    /// The admitted values, held once: a copy of an admitted notification (into a closure, a
    /// result, a middleware's call) is one reference, not a retain of each of its strings.
    @usableFromInline
    final class Storage: Sendable {
        @usableFromInline let notification: Notification
        @usableFromInline let id: NotificationID
        @usableFromInline let topic: String
        @usableFromInline let environment: APNsEnvironment
        @usableFromInline let credentialGeneration: UInt64

        init(notification: Notification, id: NotificationID, topic: String, environment: APNsEnvironment, credentialGeneration: UInt64) {
            self.notification = notification
            self.id = id
            self.topic = topic
            self.environment = environment
            self.credentialGeneration = credentialGeneration
        }
    }

    @usableFromInline
    let storage: Storage

    /// The notification as it goes on the wire: its ``Notification/id`` and ``Notification/topic``
    /// are set to ``id`` and ``topic``.
    @inlinable public var notification: Notification { storage.notification }
    /// The apns-id every attempt goes with.
    @inlinable public var id: NotificationID { storage.id }
    /// The topic, one of the tenant's, agreeing with ``pushType``.
    @inlinable public var topic: String { storage.topic }
    /// The environment it goes to, one the tenant has an endpoint for.
    @inlinable public var environment: APNsEnvironment { storage.environment }
    /// Which of the tenant's runtimes admitted it: each runtime, and so each credential it
    /// sends with, has a generation of its own (``TenantConfiguration/admit(_:id:environment:credentialGeneration:topicRules:)``).
    @inlinable public var credentialGeneration: UInt64 { storage.credentialGeneration }

    @inlinable public var pushType: PushType { storage.notification.pushType }
    /// The device it goes to; nil for a broadcast.
    @inlinable public var deviceToken: DeviceToken? { storage.notification.deviceToken }
    /// The channel of a broadcast; nil for a device notification.
    @inlinable public var channelID: ChannelID? { storage.notification.channelID }

    /// A notification taken as admitted without the tenant's checks, for tests that put on the
    /// wire what APNs itself must refuse (a bad topic, an oversized payload). Nothing in Herald
    /// makes one this way.
    @_spi(Testing)
    public init(unchecked notification: Notification, id: NotificationID, environment: APNsEnvironment) {
        self.init(
            notification: notification, id: id, topic: notification.topic ?? "", environment: environment, credentialGeneration: 0)
    }

    fileprivate init(notification: Notification, id: NotificationID, topic: String, environment: APNsEnvironment, credentialGeneration: UInt64) {
        var notification = notification
        notification.id = id
        notification.topic = topic
        storage = Storage(
            notification: notification, id: id, topic: topic, environment: environment, credentialGeneration: credentialGeneration)
    }

    public static func == (lhs: AdmittedNotification, rhs: AdmittedNotification) -> Bool {
        lhs.storage === rhs.storage
            || (lhs.notification == rhs.notification && lhs.id == rhs.id && lhs.topic == rhs.topic
                && lhs.environment == rhs.environment && lhs.credentialGeneration == rhs.credentialGeneration)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(notification)
        hasher.combine(id)
        hasher.combine(topic)
        hasher.combine(environment)
        hasher.combine(credentialGeneration)
    }
}

extension TenantConfiguration {
    /// Admits a notification: the tenant's send policy, applied once, and the apns-id it goes
    /// with. A tenant runtime admits every send with it; nothing after checks again.
    ///
    /// The rules, in order (``admissionCheck(_:environment:topicRules:)``): the topic is
    /// defaulted for a single-topic certificate tenant (APNs would use the certificate's topic);
    /// the notification passes APNs' own rules (``Notification/validate(requireTopic:)``); the
    /// topic is one of the tenant's; the push type agrees with the topic's suffix; and the
    /// environment (nil: the tenant's default) has an endpoint.
    ///
    /// - Parameters:
    ///   - id: the apns-id (the caller's own or a new one: the router's for a single send, the
    ///     store's for a batch item); it replaces `notification.id`.
    ///   - credentialGeneration: the generation of the runtime admitting it.
    ///   - topicRules: the tenant's topic checks worked out once (a runtime's); nil works them out.
    /// - Throws: the refusal: ``PushError`` with code `invalid` (APNs' reason and the field),
    ///   `topicDisallowed`, `pushTypeMismatch` or `environmentUnavailable`.
    public func admit(
        _ notification: Notification, id: NotificationID, environment: APNsEnvironment?, credentialGeneration: UInt64 = 0,
        topicRules: TopicRules? = nil
    ) throws(PushError) -> AdmittedNotification {
        let checked = try admissionCheck(notification, environment: environment, topicRules: topicRules)
        // The check returns only with a topic.
        guard let topic = checked.notification.topic else {
            throw PushError.invalid(
                NotificationValidationError(.missingTopic, field: "topic", message: "a topic (apns-topic) is required"))
        }
        return AdmittedNotification(
            notification: checked.notification, id: id, topic: topic, environment: checked.environment,
            credentialGeneration: credentialGeneration)
    }

    /// The rules of ``admit(_:id:environment:credentialGeneration:topicRules:)`` without an
    /// apns-id: the HTTP API applies them up front to every item of a batch (whose apns-ids the
    /// store gives), so that a batch with a bad item is refused whole.
    ///
    /// - Returns: the notification with its topic filled in, and the environment it goes to.
    /// - Throws: as ``admit(_:id:environment:credentialGeneration:topicRules:)``.
    public func admissionCheck(
        _ notification: Notification, environment: APNsEnvironment?, topicRules: TopicRules? = nil
    ) throws(PushError) -> (notification: Notification, environment: APNsEnvironment) {
        if notification.isBroadcast {
            return try broadcastAdmissionCheck(notification, environment: environment)
        }
        var notification = notification
        if notification.topic == nil, auth.kind == .certificate, topics.count == 1 {
            notification.topic = topics[0]
        }
        do {
            try notification.validate(requireTopic: true)
        } catch {
            throw PushError.invalid(error)
        }
        guard let topic = notification.topic else {
            throw PushError.invalid(
                NotificationValidationError(.missingTopic, field: "topic", message: "a topic (apns-topic) is required"))
        }
        let (allowed, agrees) =
            topicRules?.check(topic, notification.pushType)
            ?? (allows(topic: topic), notification.pushType.agrees(withTopic: topic))
        guard allowed else { throw PushError.topicDisallowed(topic, tenant: id) }
        guard agrees else { throw PushError.pushTypeMismatch(notification.pushType, topic: topic) }
        let environment = environment ?? endpoints.defaultEnvironment
        guard endpoints.endpoint(for: environment) != nil else {
            throw PushError.environmentUnavailable(environment, tenant: id)
        }
        try checkSigningKey(environment: environment, topic: topic)
        return (notification, environment)
    }
}

extension TenantConfiguration {
    /// The bundle IDs the tenant may broadcast to: each topic without a push-type suffix, and
    /// each Live Activity topic (`<bundle>.push-type.liveactivity`) without its suffix.
    public var broadcastBundleIDs: [String] {
        var bundles: [String] = []
        let suffix = PushType.liveactivity.requiredTopicSuffix ?? ""
        for topic in topics {
            let bundle: String
            if topic.hasSuffix(suffix) {
                bundle = String(topic.dropLast(suffix.count))
            } else if PushType.alert.agrees(withTopic: topic) {
                bundle = topic
            } else {
                continue
            }
            if !bundle.isEmpty, !bundles.contains(bundle) { bundles.append(bundle) }
        }
        return bundles
    }

    /// A broadcast's admission: APNs' broadcast rules (``Notification/validate(requireTopic:)``),
    /// the bundle ID one of ``broadcastBundleIDs`` (defaulted when the tenant has only one), and
    /// an environment with an endpoint.
    func broadcastAdmissionCheck(
        _ notification: Notification, environment: APNsEnvironment?
    ) throws(PushError) -> (notification: Notification, environment: APNsEnvironment) {
        var notification = notification
        let bundles = broadcastBundleIDs
        if notification.topic == nil, bundles.count == 1 { notification.topic = bundles[0] }
        do {
            try notification.validate(requireTopic: true)
        } catch {
            throw PushError.invalid(error)
        }
        guard let topic = notification.topic, bundles.contains(topic) else {
            throw PushError.topicDisallowed(notification.topic ?? "", tenant: id)
        }
        let environment = environment ?? endpoints.defaultEnvironment
        guard endpoints.endpoint(for: environment) != nil else {
            throw PushError.environmentUnavailable(environment, tenant: id)
        }
        try checkSigningKey(environment: environment, topic: topic)
        return (notification, environment)
    }

    /// A tenant with restricted token keys needs one that fits the send (the transport signs
    /// with it); a send no key fits is refused here, before anything else is tried.
    public func checkSigningKey(environment: APNsEnvironment, topic: String) throws(PushError) {
        guard case .token(let token) = auth, token.isRestricted, token.key(for: environment, topic: topic) == nil else { return }
        throw PushError.noSigningKey(token, environment: environment, topic: topic, tenant: id)
    }
}

/// A tenant's topics with the push types that agree with each
/// (``PushType/agrees(withTopic:)``), worked out once per tenant runtime: a send then finds its
/// topic among a few strings instead of hashing it and matching every push type's suffix
/// against it.
public struct TopicRules: Sendable {
    private let topics: [String]
    /// `agreeing[i]`: the push types that agree with `topics[i]`.
    private let agreeing: [Set<PushType>]
    /// Each topic's index, for tenants with many topics.
    private let index: [String: Int]

    public init(_ tenant: TenantConfiguration) {
        var topics: [String] = []
        for topic in tenant.topics where !topics.contains(topic) { topics.append(topic) }
        self.topics = topics
        agreeing = topics.map { topic in Set(PushType.allCases.filter { $0.agrees(withTopic: topic) }) }
        index = topics.count > 8 ? Dictionary(topics.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first }) : [:]
    }

    /// Whether `topic` is one of the tenant's, and whether `pushType` agrees with it (as
    /// `allows(topic:)` and `agrees(withTopic:)` would say).
    public func check(_ topic: String, _ pushType: PushType) -> (allowed: Bool, agrees: Bool) {
        let position: Int?
        if index.isEmpty {
            position = topics.firstIndex(of: topic)
        } else {
            position = index[topic]
        }
        guard let position else { return (false, pushType.agrees(withTopic: topic)) }
        return (true, agreeing[position].contains(pushType))
    }
}
