import Foundation
import HeraldCore
import HeraldStore
import Hummingbird

/// `GET /v1/jobs/{id}`: a batch job's progress, outcomes and failed items (paged). Every store
/// call is scoped by the request's tenant, so another tenant's job answers 404 like an absent one.
struct JobHandlers: Sendable {
    let store: any PushStore
    let reports: any JobReports

    struct JobAnswer: ResponseEncodable {
        struct Counts: Encodable, Sendable {
            var pending: Int
            var retrying: Int
            var sent: Int
            var failed: Int
            var unknown: Int
        }

        struct Outcome: Encodable, Sendable {
            var state: String
            @Nullable var status: Int?
            @Nullable var reason: String?
            var count: Int
        }

        struct FailedItem: Encodable, Sendable {
            var index: Int
            var deviceToken: String
            @Nullable var apnsID: String?
            @Nullable var status: Int?
            @Nullable var reason: String?
            @Nullable var message: String?
            @Nullable var timestamp: Date?
            @Nullable var finishedAt: Date?
            var attempts: Int
            @Nullable var lastError: String?
        }

        var jobID: String
        var state: String
        @Nullable var environment: String?
        var items: Int
        var createdAt: Date
        var updatedAt: Date
        var counts: Counts
        @Nullable var nextAttemptAt: Date?
        var outcomes: [Outcome]
        var failedItems: [FailedItem]
        @Nullable var nextFailedAfter: Int?
    }

    func job(_ request: Request, context: TenantRequestContext) async throws -> JobAnswer {
        let tenant = context.tenant.id
        // An id that cannot exist, another tenant's job and a missing job all answer the same.
        guard let raw = context.parameters.get("id"), let jobID = try? JobID(raw),
            let job = try await store.job(tenant: tenant, id: jobID)
        else {
            throw APIError.notFound("job")
        }
        let query = request.uri.queryParameters
        let after = try QueryParameters.integer(query["failed_after"].map(String.init), name: "failed_after", in: -1...Int.max) ?? -1
        let limit = try QueryParameters.integer(query["limit"].map(String.init), name: "limit", in: 1...1000) ?? 100

        let outcomes = try await reports.outcomes(tenant: tenant, job: jobID)
        var counts = JobAnswer.Counts(pending: 0, retrying: 0, sent: 0, failed: 0, unknown: 0)
        for outcome in outcomes {
            switch outcome.state {
            case .pending: counts.pending += outcome.count
            case .retrying: counts.retrying += outcome.count
            case .sent: counts.sent += outcome.count
            case .failed: counts.failed += outcome.count
            case .unknown: counts.unknown += outcome.count
            }
        }
        let nextAttempt = counts.retrying > 0 ? try await store.nextAttempt(tenant: tenant, job: jobID) : nil
        var failedItems = try await reports.failedItems(tenant: tenant, job: jobID, afterIndex: after, limit: limit + 1)
        var next: Int? = nil
        if failedItems.count > limit {
            failedItems.removeLast(failedItems.count - limit)
            next = failedItems[failedItems.count - 1].index
        }
        return JobAnswer(
            jobID: job.id.rawValue, state: job.state.rawValue, environment: job.environment?.rawValue, items: job.itemCount,
            createdAt: job.createdAt, updatedAt: job.updatedAt, counts: counts, nextAttemptAt: nextAttempt,
            outcomes: outcomes.filter { $0.state.isFinal }.map { outcome in
                JobAnswer.Outcome(state: outcome.state.rawValue, status: outcome.status, reason: outcome.reason, count: outcome.count)
            },
            failedItems: failedItems.map { item in
                JobAnswer.FailedItem(
                    index: item.index, deviceToken: item.notification.deviceToken.hex,
                    apnsID: item.result?.apnsID?.rawValue ?? item.notification.id?.rawValue, status: item.result?.status,
                    reason: item.result?.reason, message: item.result?.message, timestamp: item.result?.apnsTimestamp,
                    finishedAt: item.result?.finishedAt, attempts: item.attempts, lastError: item.lastError)
            },
            nextFailedAfter: next)
    }
}

/// Query parameters, checked.
enum QueryParameters {
    static func integer(_ text: String?, name: String, in range: ClosedRange<Int>) throws(APIError) -> Int? {
        guard let text else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw APIError.invalidQuery(name, "must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}
