import HeraldCore

/// The checks a tenant's runtime makes before a send, made up front for every item of a batch
/// so that a batch with a bad item is refused whole (400/422) instead of failing item by item.
/// Mirrors `TenantRuntime`'s policy: the topic (defaulted for a single-topic certificate),
/// APNs' rules (``HeraldCore/Notification/validate(requireTopic:)``), the tenant's topics, the
/// push type against the topic, and an endpoint for the environment.
enum TenantPolicy {
    static func check(
        _ notification: HeraldCore.Notification, tenant: TenantConfiguration, environment: APNsEnvironment?
    ) -> Result<HeraldCore.Notification, PushError> {
        var notification = notification
        if notification.topic == nil, tenant.auth.kind == .certificate, tenant.topics.count == 1 {
            notification.topic = tenant.topics[0]
        }
        do {
            try notification.validate(requireTopic: true)
        } catch {
            return .failure(.invalid(error))
        }
        guard let topic = notification.topic else {
            return .failure(.invalid(NotificationValidationError(.missingTopic, field: "topic", message: "a topic (apns-topic) is required")))
        }
        guard tenant.allows(topic: topic) else { return .failure(.topicDisallowed(topic, tenant: tenant.id)) }
        guard notification.pushType.agrees(withTopic: topic) else {
            return .failure(.pushTypeMismatch(notification.pushType, topic: topic))
        }
        let environment = environment ?? tenant.endpoints.defaultEnvironment
        guard tenant.endpoints.endpoint(for: environment) != nil else {
            return .failure(.environmentUnavailable(environment, tenant: tenant.id))
        }
        return .success(notification)
    }
}
