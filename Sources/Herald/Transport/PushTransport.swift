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
    /// Stops taking sends and closes every connection at once: in-flight sends fail without an
    /// answer (used when the credential was revoked). Defaults to ``shutdown()``.
    func close() async
    /// Identifies the credential the transport authenticates with (never secret), or nil when
    /// it has none; a reload compares it to tell a rotation from another change.
    var credentialIdentity: String? { get }
}

extension PushTransport {
    public func close() async { await shutdown() }
    public var credentialIdentity: String? { nil }
}

/// Makes a tenant's transport when the tenant loads.
public protocol TransportProvider: Sendable {
    /// Checks the tenant's credentials and returns its transport, unopened.
    /// - Throws: an error describing the credential problem (never the secret itself); the
    ///   tenant then fails to load.
    func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport
}
