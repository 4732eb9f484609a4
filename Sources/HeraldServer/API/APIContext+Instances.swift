import Foundation
import Herald
import HeraldCore
import HeraldStore
import Hummingbird

/// What `GET /admin/instances` reads: the store's instance registry, this instance's id, and
/// how old a heartbeat may be for its instance to count as live.
struct InstanceDirectory: Sendable {
    let registry: any InstanceRegistry
    /// This process's instance id.
    let instance: String
    /// An instance whose last heartbeat is older than this is not listed (it is taken for dead).
    let timeout: Duration
}

// GET /admin/instances: the live instances sharing the store, their last heartbeat and the job
// items each holds under a lease now.
extension APIContext {
    func adminInstances() async throws -> Response {
        let now = router.configuration.clock.date
        let records: [InstanceRecord]
        let held: [String: Int]
        do {
            records = try await instances.registry.instances()
            held = try await instances.registry.leasedItemCounts(now: now)
        } catch {
            requestLogger.error("cannot read the instance registry", metadata: ["herald.error": "\(error)"])
            throw APIError.unavailable("store_unavailable", "the instance registry could not be read")
        }
        let cutoff = now.addingTimeInterval(-instances.timeout.secondsValue)
        let live = records.filter { $0.id == instances.instance || $0.lastHeartbeat >= cutoff }
        return JSONResponse.make(
            .object([
                ("instance", .string(instances.instance)),
                (
                    "instances",
                    .array(
                        live.map { record in
                            .object([
                                ("id", .string(record.id)),
                                ("claimant", .string(record.claimant)),
                                ("host", .string(record.host)),
                                ("pid", .count(record.pid)),
                                ("started_at", .date(record.startedAt)),
                                ("last_heartbeat", .date(record.lastHeartbeat)),
                                ("heartbeat_age_seconds", .double(max(0, now.timeIntervalSince(record.lastHeartbeat)))),
                                ("items_held", .count(held[record.claimant] ?? 0)),
                                ("self", .bool(record.id == instances.instance)),
                            ])
                        })
                ),
            ]))
    }
}
