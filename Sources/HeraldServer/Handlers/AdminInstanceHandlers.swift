import Foundation
import Herald
import HeraldCore
import HeraldStore
import Hummingbird
import Logging

/// What `GET /admin/instances` reads: the store's instance registry, this instance's id, and
/// how old a heartbeat may be for its instance to count as live.
public struct InstanceDirectory: Sendable {
    let registry: any InstanceRegistry
    /// This process's instance id.
    let instance: String
    /// An instance whose last heartbeat is older than this is not listed (it is taken for dead).
    let timeout: Duration

    public init(registry: any InstanceRegistry, instance: String, timeout: Duration) {
        self.registry = registry
        self.instance = instance
        self.timeout = timeout
    }
}

/// `GET /admin/instances`: the live instances sharing the store, their last heartbeat and the
/// job items each holds under a lease now.
struct AdminInstanceHandlers: Sendable {
    let directory: InstanceDirectory
    let clock: any PushClock
    let logger: Logger

    struct InstancesAnswer: ResponseEncodable {
        /// The id of the instance that answered.
        var instance: String
        var instances: [InstanceView]
    }

    struct InstanceView: Encodable, Sendable {
        var id: String
        var claimant: String
        var host: String
        var pid: Int
        var startedAt: Date
        var lastHeartbeat: Date
        var heartbeatAgeSeconds: Double
        var itemsHeld: Int
        /// True for the instance that answered (`self` in JSON).
        var isSelf: Bool

        enum CodingKeys: String, CodingKey {
            case id, claimant, host, pid, startedAt, lastHeartbeat, heartbeatAgeSeconds, itemsHeld
            case isSelf = "self"
        }
    }

    func list(_ request: Request, context: some RequestContext) async throws(APIError) -> InstancesAnswer {
        let now = clock.date
        let records: [InstanceRecord]
        let held: [String: Int]
        do {
            records = try await directory.registry.instances()
            held = try await directory.registry.leasedItemCounts(now: now)
        } catch {
            RequestID.logger(logger).error("cannot read the instance registry", metadata: ["herald.error": "\(error)"])
            throw APIError.unavailable("store_unavailable", "the instance registry could not be read")
        }
        let cutoff = now.addingTimeInterval(-directory.timeout.secondsValue)
        let live = records.filter { $0.id == directory.instance || $0.lastHeartbeat >= cutoff }
        return InstancesAnswer(
            instance: directory.instance,
            instances: live.map { record in
                InstanceView(
                    id: record.id, claimant: record.claimant, host: record.host, pid: record.pid,
                    startedAt: record.startedAt, lastHeartbeat: record.lastHeartbeat,
                    heartbeatAgeSeconds: max(0, now.timeIntervalSince(record.lastHeartbeat)),
                    itemsHeld: held[record.claimant] ?? 0, isSelf: record.id == directory.instance)
            })
    }
}
