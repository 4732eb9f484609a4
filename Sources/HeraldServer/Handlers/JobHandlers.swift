import Foundation
import Herald
import HeraldCore
import HeraldStore
import Hummingbird
import Logging

/// `GET /v1/jobs`: the tenant's jobs, newest first (paged);
/// `GET /v1/jobs/{id}`: a batch job's progress, outcomes and failed items (paged);
/// `POST /v1/jobs/{id}/cancel`: stops it. Every store call is scoped by the request's tenant, so
/// another tenant's job answers 404 like an absent one.
struct JobHandlers: Sendable {
    let store: any PushStore
    let reports: any JobReports
    /// The cancel's one path (shared with the console).
    let cancellation: JobCancellation
    /// Where an operator's cancel is recorded.
    let audit: AuditTrail

    init(store: any PushStore, reports: any JobReports, cancellation: JobCancellation, audit: AuditTrail) {
        self.store = store
        self.reports = reports
        self.cancellation = cancellation
        self.audit = audit
    }

    struct JobAnswer: ResponseEncodable {
        struct Counts: Encodable, Sendable {
            var pending: Int
            var retrying: Int
            var sent: Int
            var failed: Int
            var unknown: Int
            /// A cancelled job's items without an outcome: never sent (pending and retrying are 0).
            var cancelled: Int
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
            @Nullable var apnsUniqueID: String?
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

    struct JobListAnswer: ResponseEncodable {
        struct Entry: Encodable, Sendable {
            var jobID: String
            var state: String
            @Nullable var environment: String?
            var items: Int
            var createdAt: Date
            var updatedAt: Date
        }

        var jobs: [Entry]
        /// The next page's `before` (nil on the last page).
        @Nullable var nextBefore: String?
    }

    /// `GET /v1/jobs`: the tenant's jobs, newest first, paged (`before`: the previous page's
    /// `next_before`), optionally only those in some states (`state`: a comma-separated list).
    /// Their counts are `GET /v1/jobs/{id}`'s.
    func list(_ request: Request, context: TenantRequestContext) async throws -> JobListAnswer {
        try await list(of: context.tenant.id, request)
    }

    /// `GET /admin/tenants/{id}/jobs`: the operator's view of a tenant's jobs, as the tenant's own
    /// `GET /v1/jobs` lists them. Any tenant id the store may hold jobs for (a removed tenant's
    /// stay in the store until their retention ends).
    func adminList(_ request: Request, context: some RequestContext) async throws -> JobListAnswer {
        guard let raw = context.parameters.get("id"), let tenant = try? TenantID(raw) else {
            throw APIError.notFound("tenant")
        }
        return try await list(of: tenant, request)
    }

    private func list(of tenant: TenantID, _ request: Request) async throws -> JobListAnswer {
        let query = request.uri.queryParameters
        let limit = try QueryParameters.integer(query["limit"].map(String.init), name: "limit", in: 1...100) ?? 20
        let states = try query["state"].map { try Self.states(String($0)) }
        let after = try query["before"].map { try Self.position(String($0)) }
        // One more than asked: whether a next page exists, without a call that finds it empty.
        var jobs = try await store.jobs(tenant: tenant, states: states, limit: limit + 1, after: after)
        var next: String? = nil
        if jobs.count > limit {
            jobs.removeLast(jobs.count - limit)
            next = Self.cursor(JobListPosition(after: jobs[jobs.count - 1]))
        }
        return JobListAnswer(
            jobs: jobs.map { job in
                JobListAnswer.Entry(
                    jobID: job.id.rawValue, state: job.state.rawValue, environment: job.environment?.rawValue,
                    items: job.itemCount, createdAt: job.createdAt, updatedAt: job.updatedAt)
            },
            nextBefore: next)
    }

    /// `state=running,accepted`: job states (a repeat changes nothing).
    static func states(_ text: String) throws(APIError) -> Set<JobState> {
        var states = Set<JobState>()
        for name in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard let state = JobState(rawValue: String(name)) else {
                throw APIError.invalidQuery("state", "must be job states separated by commas: accepted, running, finished, cancelled")
            }
            states.insert(state)
        }
        return states
    }

    /// A page's position as `next_before` gives it: `<created at, milliseconds>.<job id>`. Callers
    /// pass it back as they got it.
    static func cursor(_ position: JobListPosition) -> String {
        "\(position.createdAtMillis).\(position.id.rawValue)"
    }

    static func position(_ text: String) throws(APIError) -> JobListPosition {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].utf8.count <= 15, parts[0].utf8.allSatisfy({ (48...57).contains($0) }),
            let millis = Int64(parts[0]), let id = try? JobID(String(parts[1]))
        else {
            throw APIError.invalidQuery("before", "must be a next_before value from a previous page of GET /v1/jobs")
        }
        return JobListPosition(createdAtMillis: millis, id: id)
    }

    func job(_ request: Request, context: TenantRequestContext) async throws -> JobAnswer {
        let job = try await requestedJob(context)
        let query = request.uri.queryParameters
        let after = try QueryParameters.integer(query["failed_after"].map(String.init), name: "failed_after", in: -1...Int.max) ?? -1
        let limit = try QueryParameters.integer(query["limit"].map(String.init), name: "limit", in: 1...1000) ?? 100
        return try await answer(for: job, failedAfter: after, limit: limit)
    }

    /// `POST /v1/jobs/{id}/cancel`: no item of the job is sent from now on. The sends on the wire
    /// finish and their outcomes are recorded; every other item without an outcome is reported
    /// as `cancelled`. Answers the job as `GET` does (the first page of failed items); a job
    /// cancelled already answers the same (a repeat is harmless); a finished one is a 409.
    func cancel(_ request: Request, context: TenantRequestContext) async throws -> JobAnswer {
        try await cancel(try await requestedJob(context), by: "the tenant's API")
    }

    /// `POST /admin/tenants/{id}/jobs/{job}/cancel`: the operator's cancel of a tenant's job
    /// (a runaway batch), the same as the tenant's own. Any tenant id the store may hold jobs
    /// for (a removed tenant's stay in the store); 404 for a job it does not have.
    func adminCancel(_ request: Request, context: some RequestContext) async throws -> JobAnswer {
        guard let rawTenant = context.parameters.get("id"), let tenant = try? TenantID(rawTenant),
            let rawJob = context.parameters.get("job"), let jobID = try? JobID(rawJob),
            let job = try await store.job(tenant: tenant, id: jobID)
        else {
            throw APIError.notFound("job")
        }
        let answer = try await cancel(job, by: "the admin API")
        await audit.record(.jobCancel, tenant: tenant.rawValue, object: jobID.rawValue)
        return answer
    }

    /// Cancels `job` (``JobCancellation``) and answers it as `GET` does; 409 when it finished
    /// (first).
    private func cancel(_ job: Job, by whom: String) async throws -> JobAnswer {
        let current = try await cancellation.cancel(job, by: whom)
        guard current.state != .finished else {
            throw APIError(
                status: .conflict, code: "conflict", message: "job \(job.id) is finished: every item has its outcome")
        }
        return try await answer(for: current, failedAfter: -1, limit: 100)
    }

    /// The request's job (`{id}`) of the request's tenant. An id that cannot exist, another
    /// tenant's job and a missing job all answer the same 404.
    private func requestedJob(_ context: TenantRequestContext) async throws -> Job {
        guard let raw = context.parameters.get("id"), let jobID = try? JobID(raw),
            let job = try await store.job(tenant: context.tenant.id, id: jobID)
        else {
            throw APIError.notFound("job")
        }
        return job
    }

    /// The job's report, its failed items from after `failedAfter`, at most `limit` of them.
    private func answer(for job: Job, failedAfter after: Int, limit: Int) async throws -> JobAnswer {
        let tenant = job.tenant
        let jobID = job.id
        let outcomes = try await reports.outcomes(tenant: tenant, job: jobID)
        var counts = JobAnswer.Counts(pending: 0, retrying: 0, sent: 0, failed: 0, unknown: 0, cancelled: 0)
        for outcome in outcomes {
            switch outcome.state {
            case .pending: counts.pending += outcome.count
            case .retrying: counts.retrying += outcome.count
            case .sent: counts.sent += outcome.count
            case .failed: counts.failed += outcome.count
            case .unknown: counts.unknown += outcome.count
            }
        }
        // A cancelled job sends none of them: they are reported as cancelled, not as waiting.
        if job.state == .cancelled {
            counts.cancelled = counts.pending + counts.retrying
            counts.pending = 0
            counts.retrying = 0
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
            } + (counts.cancelled > 0 ? [JobAnswer.Outcome(state: "cancelled", status: nil, reason: nil, count: counts.cancelled)] : []),
            failedItems: failedItems.map { item in
                JobAnswer.FailedItem(
                    index: item.index, deviceToken: item.notification.deviceToken?.hex ?? "",
                    apnsID: item.result?.apnsID?.rawValue ?? item.notification.id?.rawValue,
                    apnsUniqueID: item.result?.uniqueID?.rawValue, status: item.result?.status,
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
