import HeraldCore
import HeraldStore

/// What an outcome write did, with the item as the store holds it afterwards.
enum RecordOutcome: Sendable, Hashable {
    case recorded(JobItem)
    /// The item already had an outcome; this is it, unchanged.
    case alreadyRecorded(JobItem)

    var item: JobItem {
        switch self {
        case .recorded(let item), .alreadyRecorded(let item): return item
        }
    }
}

extension PushStore {
    /// Records an item's outcome (``PushStore/recordOutcome(tenant:job:index:result:)``), then
    /// reads the item back: an outcome, once written, never changes, so every caller for one
    /// item reads the same one, whichever call recorded it.
    func recordAndReadBack(tenant: TenantID, job: JobID, index: Int, result: JobItemResult) async throws -> RecordOutcome {
        let recorded = try await recordOutcome(tenant: tenant, job: job, index: index, result: result)
        guard let item = try await items(tenant: tenant, job: job, fromIndex: index, limit: 1).first, item.index == index
        else { throw StoreError.notFound("item \(index) of job \(job)") }
        return recorded ? .recorded(item) : .alreadyRecorded(item)
    }
}
