import HeraldCore
import Logging

/// The wire, as a tenant runtime sees it: sends one notification to APNs and returns its answer.
///
/// A transport belongs to one tenant (its credentials, its connections). It must open nothing
/// (no connection, no task) until its first `send`, so that idle tenants cost little.
///
/// Failures without an APNs answer are thrown as ``PushError`` with code `.transport` (or
/// `.deadlineExceeded`), with `mayHaveReachedAPNs` false only when APNs surely did not process
/// the request. The built-in retry relies on that.
public protocol PushTransport: Sendable {
    func send(_ notification: Notification, environment: APNsEnvironment, deadline: ContinuousClock.Instant) async throws -> APNsResponse
    /// Stops taking sends, lets in-flight ones finish, then closes every connection.
    func shutdown() async
}

/// Makes a tenant's transport when the tenant loads.
public protocol TransportProvider: Sendable {
    /// Checks the tenant's credentials and returns its transport, unopened.
    /// - Throws: an error describing the credential problem (never the secret itself); the
    ///   tenant then fails to load.
    func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport
}
