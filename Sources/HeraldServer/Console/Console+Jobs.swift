import Foundation
import HeraldCore
import HeraldStore
import Hummingbird

extension Console {
    /// A row of a tenant's "Recent jobs": a cancelled job's items without an outcome are counted
    /// as cancelled, not pending (nothing will send them), as the API's report does.
    static func jobRow(_ job: Job, progress: JobProgress?) -> TenantPage.JobRow {
        let unsent = progress?.pending ?? 0
        let cancelled = job.state == .cancelled ? unsent : 0
        let done = (progress?.sent ?? 0) + (progress?.failed ?? 0) + (progress?.unknown ?? 0) + cancelled
        return TenantPage.JobRow(
            id: job.id.rawValue, tenantID: job.tenant.rawValue, state: job.state.rawValue, created: timestamp(job.createdAt),
            items: job.itemCount, sent: progress?.sent ?? 0, failed: progress?.failed ?? 0, pending: unsent - cancelled,
            cancelled: cancelled, percent: job.itemCount > 0 ? min(100, done * 100 / job.itemCount) : 100,
            cancellable: !job.state.isFinal)
    }

    /// `POST /console/tenants/{id}/jobs/cancel` (field `job`): the operator stops one of the
    /// tenant's jobs, through the admin API's cancel (``JobCancellation``).
    func cancelJob(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let job: Job
        do throws(ConsoleError) {
            let raw = try form.required("job")
            guard let jobID = try? JobID(raw) else { throw ConsoleError.field("job", "is not a job id") }
            do {
                guard let found = try await store.job(tenant: tenant.id, id: jobID) else {
                    throw ConsoleError.field("job", "names no job of tenant \(tenant.id)")
                }
                job = try await cancellation.cancel(found, by: "the console")
                await audit.record(.jobCancel, tenant: tenant.id.rawValue, object: jobID.rawValue)
            } catch let error as ConsoleError {
                throw error
            } catch {
                logger.warning(
                    "console: a job could not be cancelled",
                    metadata: ["herald.tenant": "\(tenant.id)", "herald.job": "\(jobID)", "herald.error": "\(error)"])
                throw ConsoleError(
                    status: .serviceUnavailable, message: "The store did not answer; job \(jobID) was not cancelled. Try again.")
            }
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        guard job.state == .cancelled else {
            return try await tenantPage(
                session, id: id,
                error: ConsoleError(status: .conflict, message: "Job \(job.id) is finished: every item has its outcome."))
        }
        return try await tenantPage(
            session, id: id,
            notice: "Job \(job.id) is cancelled: the sends on the wire finish, no other item of it is sent.")
    }
}
