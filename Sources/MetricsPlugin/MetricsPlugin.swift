import HeraldCore
import Metrics
import Synchronization

/// `metrics`: swift-metrics counters and timers for every attempt that passes through it.
///
/// - `herald_notifications_total` (counter): `tenant`, `topic`, `push_type`, `status`, `reason`
/// - `herald_send_duration` (timer): `tenant`, `push_type`, `status`
///
/// Label values are bounded: topics outside the tenant's list read `other`, statuses outside
/// Apple's table `other`, reasons use ``APNsReason/metricLabel`` and failures that never got an
/// answer have status `error` with Herald's error code as the reason.
///
/// ```yaml
/// plugins:
///   - name: metrics
///     options: { topic_label: true }
/// ```
public struct MetricsPluginFactory: PluginFactory {
    public let name = "metrics"
    private let factory: (any MetricsFactory)?

    /// - Parameter factory: the metrics backend; nil uses the one bootstrapped in `MetricsSystem`.
    public init(factory: (any MetricsFactory)? = nil) {
        self.factory = factory
    }

    public func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware
    {
        let reader = try PluginOptions(options, allowed: ["topic_label"])
        let topicLabel = try reader.bool("topic_label", default: true)
        return MetricsMiddleware(
            factory: factory ?? MetricsSystem.factory, tenant: environment.tenant, topics: Set(environment.topics),
            topicLabel: topicLabel, clock: environment.clock)
    }
}

/// The `metrics` middleware for one tenant.
public final class MetricsMiddleware: PushMiddleware {
    public static let counterLabel = "herald_notifications_total"
    public static let timerLabel = "herald_send_duration"
    static let knownStatuses: Set<Int> = [200, 400, 403, 404, 405, 410, 413, 429, 500, 503]

    private struct CounterKey: Hashable {
        var topic: String
        var pushType: PushType
        var status: String
        var reason: String
    }
    private struct TimerKey: Hashable {
        var pushType: PushType
        var status: String
    }
    private struct Cache {
        var counters: [CounterKey: Counter] = [:]
        var timers: [TimerKey: CoreMetrics.Timer] = [:]
    }

    private let factory: any MetricsFactory
    private let tenant: TenantID
    private let topics: Set<String>
    private let topicLabel: Bool
    private let clock: any PushClock
    private let cache = Mutex(Cache())

    public init(
        factory: any MetricsFactory, tenant: TenantID, topics: Set<String>, topicLabel: Bool = true,
        clock: any PushClock
    ) {
        self.factory = factory
        self.tenant = tenant
        self.topics = topics
        self.topicLabel = topicLabel
        self.clock = clock
    }

    public func send(_ notification: Notification, context: PushContext, next: PushHandler) async throws -> PushResult {
        let start = clock.now
        do {
            let result = try await next.send(notification, context: context)
            let status = Self.knownStatuses.contains(result.status) ? String(result.status) : "other"
            observe(
                notification, status: status, reason: result.reason?.metricLabel ?? "none",
                elapsed: start.duration(to: clock.now))
            return result
        } catch {
            let reason = (error as? PushError)?.code.description ?? (error is CancellationError ? "Cancelled" : "Error")
            observe(notification, status: "error", reason: reason, elapsed: start.duration(to: clock.now))
            throw error
        }
    }

    private func observe(_ notification: Notification, status: String, reason: String, elapsed: Duration) {
        let topic: String
        if !topicLabel {
            topic = "all"
        } else if let name = notification.topic, topics.contains(name) {
            topic = name
        } else {
            topic = "other"
        }
        let counterKey = CounterKey(topic: topic, pushType: notification.pushType, status: status, reason: reason)
        let timerKey = TimerKey(pushType: notification.pushType, status: status)
        let (counter, timer) = cache.withLock { cache in
            let counter =
                cache.counters[counterKey]
                ?? {
                    let made = Counter(
                        label: Self.counterLabel,
                        dimensions: [
                            ("tenant", tenant.rawValue), ("topic", topic),
                            ("push_type", notification.pushType.rawValue),
                            ("status", status), ("reason", reason),
                        ],
                        factory: factory)
                    cache.counters[counterKey] = made
                    return made
                }()
            let timer =
                cache.timers[timerKey]
                ?? {
                    let made = CoreMetrics.Timer(
                        label: Self.timerLabel,
                        dimensions: [
                            ("tenant", tenant.rawValue), ("push_type", notification.pushType.rawValue),
                            ("status", status),
                        ],
                        factory: factory)
                    cache.timers[timerKey] = made
                    return made
                }()
            return (counter, timer)
        }
        counter.increment()
        let parts = elapsed.components
        timer.recordNanoseconds(parts.seconds * 1_000_000_000 + parts.attoseconds / 1_000_000_000)
    }
}
