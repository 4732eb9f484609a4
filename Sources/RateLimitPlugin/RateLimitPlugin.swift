import HeraldCore
import Synchronization

/// `rate-limit`: a per-tenant token bucket, and optionally one per topic. A send over the limit
/// is given its slot (``HeraldCore/PushDecision/notBefore(_:)``: the pipeline waits for it, the
/// middleware never sleeps) if that comes before its deadline (and within `max_wait_ms`), and
/// fails with `RateLimited` otherwise, without reaching APNs.
///
/// ```yaml
/// plugins:
///   - name: rate-limit
///     options: { per_second: 500, burst: 1000, per_topic: { per_second: 100 }, max_wait_ms: 2000 }
/// ```
public struct RateLimitPluginFactory: PluginFactory {
    public let name = "rate-limit"

    public init() {}

    public func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware
    {
        RateLimitMiddleware(configuration: try RateLimitConfiguration(options: options), clock: environment.clock)
    }
}

public struct RateLimitConfiguration: Sendable, Hashable {
    public var perSecond: Double
    public var burst: Double
    public var perTopic: (perSecond: Double, burst: Double)?
    /// The longest a send waits for its slot, even when its deadline is later; nil: up to the deadline.
    public var maxWait: Duration?

    public init(
        perSecond: Double, burst: Double? = nil, perTopic: (perSecond: Double, burst: Double)? = nil,
        maxWait: Duration? = nil
    ) {
        self.perSecond = perSecond
        self.burst = burst ?? max(1, perSecond)
        self.perTopic = perTopic
        self.maxWait = maxWait
    }

    public init(options: JSONValue) throws(PluginOptionError) {
        let reader = try PluginOptions(options, allowed: ["per_second", "burst", "per_topic", "max_wait_ms"])
        let rate = try reader.double("per_second", greaterThan: 0)
        let burst = try reader.int("burst", default: max(1, Int(rate.rounded(.up))), range: 1...10_000_000)
        var perTopic: (Double, Double)? = nil
        if let topic = try reader.object("per_topic", allowed: ["per_second", "burst"]) {
            let topicRate = try topic.double("per_second", greaterThan: 0)
            let topicBurst = try topic.int("burst", default: max(1, Int(topicRate.rounded(.up))), range: 1...10_000_000)
            perTopic = (topicRate, Double(topicBurst))
        }
        var maxWait: Duration? = nil
        if reader.contains("max_wait_ms") {
            maxWait = .milliseconds(try reader.int("max_wait_ms", range: 0...3_600_000))
        }
        self.init(perSecond: rate, burst: Double(burst), perTopic: perTopic, maxWait: maxWait)
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.perSecond == rhs.perSecond && lhs.burst == rhs.burst && lhs.maxWait == rhs.maxWait
            && lhs.perTopic?.perSecond == rhs.perTopic?.perSecond && lhs.perTopic?.burst == rhs.perTopic?.burst
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(perSecond)
        hasher.combine(burst)
        hasher.combine(perTopic?.perSecond)
        hasher.combine(perTopic?.burst)
        hasher.combine(maxWait)
    }
}

/// The `rate-limit` middleware. Its buckets belong to one tenant runtime.
public final class RateLimitMiddleware: PushMiddleware {
    public let configuration: RateLimitConfiguration
    private let clock: any PushClock
    private let state: Mutex<RateLimiterState>

    public init(configuration: RateLimitConfiguration, clock: any PushClock) {
        self.configuration = configuration
        self.clock = clock
        let now = clock.now
        self.state = Mutex(
            RateLimiterState(
                tenant: TokenBucket(rate: configuration.perSecond, burst: configuration.burst, now: now),
                topicRate: configuration.perTopic.map { ($0.perSecond, $0.burst) }))
    }

    public func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
        let now = clock.now
        var latest = context.deadline
        if let maxWait = configuration.maxWait { latest = min(latest, now.advanced(by: maxWait)) }
        let reservation = state.withLock { $0.reserve(topic: notification.topic, now: now, latest: latest) }
        switch reservation {
        case .refused(let nextSlot):
            context.logger.debug("rate limited", metadata: ["herald.wait-ms": "\(Int(nextSlot.secondsValue * 1000))"])
            throw PushError(
                code: .rateLimited,
                message:
                    "over tenant '\(context.tenant)''s rate limit (\(Self.format(configuration.perSecond))/s, burst \(Int(configuration.burst))"
                    + (configuration.perTopic.map { ", \(Self.format($0.perSecond))/s per topic" } ?? "")
                    + "): the next slot is \(Int((nextSlot.secondsValue * 1000).rounded(.up))) ms away, past the send's deadline"
                    + (configuration.maxWait == nil ? "" : " or max_wait_ms"))
        case .granted(let slot):
            return slot > now ? .notBefore(slot) : .proceed
        }
    }

    static func format(_ rate: Double) -> String {
        rate.rounded() == rate ? String(Int64(rate)) : String(rate)
    }
}
