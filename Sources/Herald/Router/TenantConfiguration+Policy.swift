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
        guard allows(topic: topic) else { throw PushError.topicDisallowed(topic, tenant: id) }
        guard notification.pushType.agrees(withTopic: topic) else {
            throw PushError.pushTypeMismatch(notification.pushType, topic: topic)
        }
        let environment = environment ?? endpoints.defaultEnvironment
        guard endpoints.endpoint(for: environment) != nil else {
            throw PushError.environmentUnavailable(environment, tenant: id)
        }
        return (notification, environment)
    }
}
