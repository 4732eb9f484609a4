import FeedbackPlugin
import Foundation
import HeraldCore
import Logging

/// The tenant's one configured callback: the `webhook` of its `feedback` plugin, with its secret
/// resolved (`env:` / `file:` beside the tenant file). Herald's own events about a tenant
/// (`credential.expiring`, `job.finished`, `job.cancelled`) go there, signed like the plugin's.
enum FeedbackWebhookTarget {
    /// The tenant's feedback webhook; nil when it has none, or when it cannot be read (logged:
    /// the event is not sent).
    static func webhook(of tenant: TenantConfiguration, environment: [String: String], logger: Logger, event: String)
        -> FeedbackConfiguration.Webhook?
    {
        guard let plugin = tenant.plugins.first(where: { $0.name == "feedback" }) else { return nil }
        do {
            let secrets = FileSecretResolver(baseDirectory: Router.directory(of: tenant.sourceFile), environment: environment)
            return try FeedbackConfiguration(options: plugin.options, secrets: secrets).webhook
        } catch {
            logger.warning(
                "the feedback webhook could not be read; the event is not sent",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.event": "\(event)", "herald.error": "\(error)"])
            return nil
        }
    }
}
