import HeraldCore

extension TenantConfiguration {
    /// The tenant's send policy: what Herald refuses before a notification reaches the pipeline.
    ///
    /// In order: the topic is defaulted for a single-topic certificate tenant (APNs would use the
    /// certificate's topic); the notification passes APNs' own rules
    /// (``HeraldCore/Notification/validate(requireTopic:)``); the topic is one of the tenant's;
    /// the push type agrees with the topic's suffix; and the environment (nil: the tenant's
    /// default) has an endpoint. ``TenantRuntime`` applies it to every send; the HTTP API applies
    /// it up front to every item of a batch so that a batch with a bad item is refused whole.
    ///
    /// ```swift
    /// let admitted = try tenant.admit(notification, environment: nil)
    /// // admitted.notification has its topic filled in; admitted.environment is resolved
    /// ```
    ///
    /// - Returns: the notification as it will be sent, and the environment it goes to.
    /// - Throws: the refusal: ``PushError`` with code `invalid` (APNs' reason and the field),
    ///   `topicDisallowed`, `pushTypeMismatch` or `environmentUnavailable`.
    public func admit(
        _ notification: Notification, environment: APNsEnvironment?
    ) throws(PushError) -> (notification: Notification, environment: APNsEnvironment) {
        try admit(notification, environment: environment, topicRules: nil)
    }

    /// ``admit(_:environment:)`` with the topic checks read from `topicRules` (made once per
    /// runtime from this configuration) instead of worked out per send: the same checks, in the
    /// same order, with the same refusals.
    func admit(
        _ notification: Notification, environment: APNsEnvironment?, topicRules: TopicRules?
    ) throws(PushError) -> (notification: Notification, environment: APNsEnvironment) {
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
        return (notification, environment)
    }
}

/// A tenant's topics with the push types that agree with each
/// (``HeraldCore/PushType/agrees(withTopic:)``), worked out once per tenant runtime: a send then
/// finds its topic among a few strings instead of hashing it and matching every push type's
/// suffix against it.
struct TopicRules: Sendable {
    private let topics: [String]
    /// `agreeing[i]`: the push types that agree with `topics[i]`.
    private let agreeing: [Set<PushType>]
    /// Each topic's index, for tenants with many topics.
    private let index: [String: Int]

    init(_ tenant: TenantConfiguration) {
        var topics: [String] = []
        for topic in tenant.topics where !topics.contains(topic) { topics.append(topic) }
        self.topics = topics
        agreeing = topics.map { topic in Set(PushType.allCases.filter { $0.agrees(withTopic: topic) }) }
        index = topics.count > 8 ? Dictionary(topics.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first }) : [:]
    }

    /// Whether `topic` is one of the tenant's, and whether `pushType` agrees with it (as
    /// `allows(topic:)` and `agrees(withTopic:)` would say).
    func check(_ topic: String, _ pushType: PushType) -> (allowed: Bool, agrees: Bool) {
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
