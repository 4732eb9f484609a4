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

        init(
            notification: consuming Notification, id: NotificationID, topic: String, environment: APNsEnvironment,
            credentialGeneration: UInt64
        ) {
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
        var notification = notification
        let topic = notification.topic ?? ""
        notification.id = id
        notification.topic = topic
        self.init(admitted: notification, id: id, topic: topic, environment: environment, credentialGeneration: 0)
    }

    /// - Parameter notification: the notification with ``Notification/id`` and
    ///   ``Notification/topic`` already set to `id` and `topic`.
    fileprivate init(
        admitted notification: consuming Notification, id: NotificationID, topic: String, environment: APNsEnvironment,
        credentialGeneration: UInt64
    ) {
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
        _ notification: consuming Notification, id: NotificationID, environment: APNsEnvironment?, credentialGeneration: UInt64 = 0,
        topicRules: TopicRules? = nil
    ) throws(PushError) -> AdmittedNotification {
        // Checked and completed in place: a caller that hands its notification over makes no copy.
        let environment = try admit(&notification, environment: environment, topicRules: topicRules)
        // The check returns only with a topic.
        guard let topic = notification.topic else {
            throw PushError.invalid(
                NotificationValidationError(.missingTopic, field: "topic", message: "a topic (apns-topic) is required"))
        }
        notification.id = id
        return AdmittedNotification(
            admitted: notification, id: id, topic: topic, environment: environment, credentialGeneration: credentialGeneration)
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
        var notification = notification
        let environment = try admit(&notification, environment: environment, topicRules: topicRules)
        return (notification, environment)
    }

    /// The admission rules applied to `notification` in place: its topic is filled in when the
    /// tenant's certificate implies it.
    /// - Returns: the environment it goes to.
    private func admit(
        _ notification: inout Notification, environment: APNsEnvironment?, topicRules: TopicRules?
    ) throws(PushError) -> APNsEnvironment {
        if notification.isBroadcast {
            return try broadcastAdmission(&notification, environment: environment)
        }
        if notification.topic == nil, auth.kind == .certificate, topics.count == 1 {
            notification.topic = topics[0]
        }
        // One of the tenant's topics, well formed: its syntax needs no second look.
        let rule = notification.topic.flatMap { topicRules?.rule(for: $0) }
        do {
            try notification.validate(requireTopic: true, topicIsWellFormed: rule != nil)
        } catch {
            throw PushError.invalid(error)
        }
        guard let topic = notification.topic else {
            throw PushError.invalid(
                NotificationValidationError(.missingTopic, field: "topic", message: "a topic (apns-topic) is required"))
        }
        let pushType = notification.pushType
        let allowed = rule != nil || (topicRules == nil && allows(topic: topic))
        guard allowed else { throw PushError.topicDisallowed(topic, tenant: id) }
        guard rule?.agrees(with: pushType) ?? pushType.agrees(withTopic: topic) else {
            throw PushError.pushTypeMismatch(pushType, topic: topic)
        }
        let environment = environment ?? endpoints.defaultEnvironment
        guard endpoints.endpoint(for: environment) != nil else {
            throw PushError.environmentUnavailable(environment, tenant: id)
        }
        try checkSigningKey(environment: environment, topic: topic)
        return environment
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

    /// A broadcast's admission, in place: APNs' broadcast rules
    /// (``Notification/validate(requireTopic:)``), the bundle ID one of ``broadcastBundleIDs``
    /// (defaulted when the tenant has only one), and an environment with an endpoint.
    func broadcastAdmission(_ notification: inout Notification, environment: APNsEnvironment?) throws(PushError) -> APNsEnvironment {
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
        return environment
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
/// topic among a few strings instead of hashing it, matching every push type's suffix against
/// it and checking its syntax again.
public struct TopicRules: Sendable {
    /// What is known of one of the tenant's topics.
    public struct Rule: Sendable {
        /// Bit `i`: `PushType.allCases[i]` agrees with the topic.
        fileprivate let agreeing: UInt32

        /// Whether `pushType` agrees with the topic (as ``PushType/agrees(withTopic:)`` says).
        public func agrees(with pushType: PushType) -> Bool {
            agreeing & Self.bit(pushType) != 0
        }

        fileprivate static func bit(_ pushType: PushType) -> UInt32 {
            guard let index = PushType.allCases.firstIndex(of: pushType), index < 32 else { return 0 }
            return 1 << UInt32(index)
        }
    }

    private let topics: [String]
    /// `rules[i]`: the rule of `topics[i]`; nil for a topic that is not well formed
    /// (``Notification/validateTopic(_:)``).
    private let rules: [Rule?]
    /// Each topic's index, for tenants with many topics.
    private let index: [String: Int]

    public init(_ tenant: TenantConfiguration) {
        var topics: [String] = []
        for topic in tenant.topics where !topics.contains(topic) { topics.append(topic) }
        self.topics = topics
        rules = topics.map { topic in
            guard (try? Notification.validateTopic(topic)) != nil else { return nil }
            var agreeing: UInt32 = 0
            for pushType in PushType.allCases where pushType.agrees(withTopic: topic) { agreeing |= Rule.bit(pushType) }
            return Rule(agreeing: agreeing)
        }
        index = topics.count > 8 ? Dictionary(topics.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first }) : [:]
    }

    /// The rule of `topic` when it is one of the tenant's and well formed; nil otherwise.
    public func rule(for topic: String) -> Rule? {
        let position: Int?
        if index.isEmpty {
            position = topics.firstIndex(of: topic)
        } else {
            position = index[topic]
        }
        guard let position else { return nil }
        return rules[position]
    }
}
