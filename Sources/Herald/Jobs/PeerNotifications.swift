import HeraldCore
import HeraldStore
import Logging

/// What instances tell each other through the shared store.
public enum PeerNotifications {
    /// The payload of a ``HeraldStore/StoreChannel/tenants`` notification: the sender's instance
    /// id, and ` revoke` when the change revoked a credential (the others cut its connections too).
    public static func tenantsPayload(instance: String, revoked: Bool) -> String {
        revoked ? instance + " revoke" : instance
    }

    /// Reads a ``tenantsPayload(instance:revoked:)``.
    public static func parseTenants(_ payload: String) -> (instance: String, revoke: Bool) {
        let parts = payload.split(separator: " ", maxSplits: 1)
        return (parts.first.map(String.init) ?? "", parts.count == 2 && parts[1] == "revoke")
    }

    /// Reads a ``HeraldStore/StoreChannel/jobs`` payload, `<tenant>/<job id>`; nil when it is not one.
    public static func parseJob(_ payload: String) -> (TenantID, JobID)? {
        guard let slash = payload.firstIndex(of: "/"),
            let tenant = try? TenantID(String(payload[..<slash])),
            let job = try? JobID(String(payload[payload.index(after: slash)...]))
        else { return nil }
        return (tenant, job)
    }

    /// Tells the other instances that a job was cancelled (they stop working on it now). A
    /// failure is logged: their next claim or lease check finds the job cancelled.
    public static func tellJobCancelled(_ notifier: any StoreNotifier, tenant: TenantID, job: JobID, logger: Logger) async {
        do {
            try await notifier.notify(.cancelledJobs, payload: tenant.rawValue + "/" + job.rawValue)
        } catch {
            logger.warning(
                "cannot tell the other instances that a job was cancelled; they stop at their next claim",
                metadata: ["herald.tenant": "\(tenant)", "herald.job": "\(job)", "herald.error": "\(error)"])
        }
    }

    /// Tells the other instances that this one changed the tenants (after an admin reload,
    /// upload or revoke). A failure is logged: the others' directory watchers still see the
    /// shared files change.
    public static func tellTenantsChanged(_ notifier: any StoreNotifier, instance: String, revoked: Bool, logger: Logger) {
        Task {
            do {
                try await notifier.notify(.tenants, payload: tenantsPayload(instance: instance, revoked: revoked))
            } catch {
                logger.warning(
                    "cannot tell the other instances that the tenants changed",
                    metadata: ["herald.error": "\(error)"])
            }
        }
    }
}
