import HeraldCore
import Logging

/// Makes a tenant's transport when the tenant loads.
public protocol TransportProvider: Sendable {
    /// Checks the tenant's credentials and returns its transport, unopened.
    /// - Throws: an error describing the credential problem (never the secret itself); the
    ///   tenant then fails to load.
    func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport
}
