import HeraldCore
import Metrics
import Synchronization

/// `metrics`: swift-metrics counters and timers for every attempt that passes through it.
///
/// - `herald_notifications_total` (counter): `tenant`, `kind`, `topic`, `push_type`, `status`, `reason`
/// - `herald_send_duration` (timer): `tenant`, `kind`, `push_type`, `status`
///
/// `kind` is `device` (a notification to one device) or `broadcast` (a broadcast on a channel;
/// its topic is the app's bundle ID).
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
    /// The statuses APNs answers with, each a label of its own (any other is `other`).
    static func isKnown(status: Int) -> Bool {
        switch status {
        case 200, 400, 403, 404, 405, 410, 413, 429, 500, 503: true
        default: false
        }
    }

    /// A counter's labels, as cheap values: the topic as its place in the tenant's list (hashing
    /// an Int, not the topic's string, on every send), the status as its number.
    private struct CounterKey: Hashable {
        /// The topic's index in ``topicList``; ``otherTopic`` or ``allTopics`` for the labels
        /// `other` and `all`.
        var topic: Int
        var broadcast: Bool
        var pushType: PushType
        /// The status code; ``otherStatus`` or ``errorStatus`` for `other` and `error`.
        var status: Int
        var reason: String
    }
    private struct TimerKey: Hashable {
        var broadcast: Bool
        var pushType: PushType
        var status: Int
    }
    private struct Cache {
        var counters: [CounterKey: Counter] = [:]
        var timers: [TimerKey: CoreMetrics.Timer] = [:]
        /// The last send's labels and metrics: most sends have the same as the one before, and
        /// comparing two keys costs less than hashing one.
        var last: Last?
    }

    /// The last send's keys and metrics, compared where they are kept (a copy of the keys would
    /// retain their strings on every send).
    private struct Last {
        let counterKey: CounterKey
        let counter: Counter
        let timerKey: TimerKey
        let timer: CoreMetrics.Timer

        func matches(_ counterKey: CounterKey, _ timerKey: TimerKey) -> Bool {
            self.counterKey == counterKey && self.timerKey == timerKey
        }
    }
    private static let otherTopic = -1
    private static let allTopics = -2
    private static let otherStatus = -1
    private static let errorStatus = -2

    private let factory: any MetricsFactory
    private let tenant: TenantID
    private let topics: Set<String>
    /// The tenant's topics in a fixed order (a label's index).
    private let topicList: [String]
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
        self.topicList = topics.sorted()
        self.topicLabel = topicLabel
        self.clock = clock
    }

    /// Counts the attempt and times it from when the pipeline began.
    public func didSend(
        _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp? {
        observe(notification, outcome: outcome, startedAt: startedAt)
        return nil
    }

    private func observe(_ notification: AdmittedNotification, outcome: Result<PushResult, any Error>, startedAt: PushInstant) {
        let elapsed = startedAt.nanoseconds(to: clock.now)
        switch outcome {
        case .success(let result):
            let status = Self.isKnown(status: result.status) ? result.status : Self.otherStatus
            observe(notification, status: status, reason: result.reason?.metricLabel ?? "none", elapsed: elapsed)
        case .failure(let error):
            let reason = (error as? PushError)?.code.description ?? (error is CancellationError ? "Cancelled" : "Error")
            observe(notification, status: Self.errorStatus, reason: reason, elapsed: elapsed)
        }
    }

    /// The `topic` label's index: the topic's place in the tenant's list, or `other`, or `all`.
    private func topicIndex(_ topic: String?) -> Int {
        guard topicLabel else { return Self.allTopics }
        guard let topic else { return Self.otherTopic }
        if topicList.count <= 8 {
            for (index, known) in topicList.enumerated() where known == topic { return index }
            return Self.otherTopic
        }
        guard topics.contains(topic), let index = topicList.firstIndex(of: topic) else { return Self.otherTopic }
        return index
    }

    private func label(topic index: Int) -> String {
        switch index {
        case Self.allTopics: "all"
        case Self.otherTopic: "other"
        default: topicList[index]
        }
    }

    private static func label(status: Int) -> String {
        switch status {
        case otherStatus: "other"
        case errorStatus: "error"
        default: String(status)
        }
    }

    private func observe(_ notification: AdmittedNotification, status: Int, reason: String, elapsed: Int64) {
        let broadcast = notification.notification.isBroadcast
        let counterKey = CounterKey(
            topic: topicIndex(notification.topic), broadcast: broadcast, pushType: notification.pushType, status: status,
            reason: reason)
        let timerKey = TimerKey(broadcast: broadcast, pushType: notification.pushType, status: status)
        let kind = broadcast ? "broadcast" : "device"
        let (counter, timer) = cache.withLock { cache in
            if cache.last?.matches(counterKey, timerKey) == true, let counter = cache.last?.counter, let timer = cache.last?.timer {
                return (counter, timer)
            }
            let counter =
                cache.counters[counterKey]
                ?? {
                    let made = Counter(
                        label: Self.counterLabel,
                        dimensions: [
                            ("tenant", tenant.rawValue), ("kind", kind), ("topic", label(topic: counterKey.topic)),
                            ("push_type", notification.pushType.rawValue),
                            ("status", Self.label(status: status)), ("reason", reason),
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
                            ("tenant", tenant.rawValue), ("kind", kind), ("push_type", notification.pushType.rawValue),
                            ("status", Self.label(status: status)),
                        ],
                        factory: factory)
                    cache.timers[timerKey] = made
                    return made
                }()
            cache.last = Last(counterKey: counterKey, counter: counter, timerKey: timerKey, timer: timer)
            return (counter, timer)
        }
        counter.increment()
        timer.recordNanoseconds(elapsed)
    }
}
