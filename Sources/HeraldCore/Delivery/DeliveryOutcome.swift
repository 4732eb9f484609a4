/// What one attempt at sending a batch item came to, for the retry path: whether the item is
/// done, tried again later, or given up, and what the attempt says about the endpoint's health.
///
/// ```swift
/// switch DeliveryOutcome(result) { case .delivered: … case .transient(let reason, _): … }
/// ```
public enum DeliveryOutcome: Sendable, Hashable {
    /// APNs answered 200.
    case delivered
    /// APNs rejected it for a reason a resend cannot change (other 4xx, 410), or Herald refused
    /// it as invalid (topic, push type, device token reported invalid): the item fails.
    case permanent(reason: String)
    /// APNs could not take it now (500, 503, 429 TooManyRequests, an expired or too-often
    /// updated provider token) or it surely never reached APNs (connection refused or failed,
    /// TLS failure, a stream refused after GOAWAY): retried with backoff.
    case transient(reason: String, endpointFailure: Bool)
    /// It may have reached APNs and no answer came (the connection dropped or was reset while it
    /// was in flight, a timeout after it was written). At-least-once resends it with the same
    /// apns-id; at-most-once reports it `Unknown`.
    case unknown(reason: String)
    /// Herald did not send it, for a reason that is not the notification's fault (rate limit,
    /// full pool queue, the tenant being reloaded): deferred, never failed.
    case deferred(reason: String)

    /// Classifies an APNs answer.
    public init(_ response: borrowing APNsResponse) {
        if response.isSuccess {
            self = .delivered
            return
        }
        let reason = response.reason?.wireValue ?? "Status\(response.status)"
        switch (response.status, response.reason) {
        case (500, _), (503, _):
            self = .transient(reason: reason, endpointFailure: true)
        case (429, .tooManyRequests?):
            // One device's rate: says nothing about the endpoint.
            self = .transient(reason: reason, endpointFailure: false)
        case (429, .tooManyProviderTokenUpdates?), (403, .expiredProviderToken?):
            // The provider token, not the notification: a resend with a fresh token succeeds.
            self = .transient(reason: reason, endpointFailure: false)
        default:
            self = .permanent(reason: reason)
        }
    }

    /// Classifies a failure without an APNs answer (a ``PushError``; anything else is permanent).
    public init(_ error: any Error) {
        guard let error = error as? PushError else {
            self = .permanent(reason: "InternalError")
            return
        }
        let reason = error.code.description
        switch error.code {
        case .transport:
            self = error.mayHaveReachedAPNs ? .unknown(reason: reason) : .transient(reason: reason, endpointFailure: true)
        case .credentialRevoked:
            // Cut off by the tenant's own credential change, not the endpoint's failure: sent
            // again on the new credential as the guarantee allows.
            self = error.mayHaveReachedAPNs ? .unknown(reason: reason) : .deferred(reason: reason)
        case .deadlineExceeded:
            // Timed out waiting for a stream (never written) is backpressure, not the endpoint's
            // failure; timed out after it was written is unknown.
            self = error.mayHaveReachedAPNs ? .unknown(reason: reason) : .deferred(reason: reason)
        case .rateLimited, .queueFull, .shuttingDown, .unknownTenant, .circuitOpen:
            self = .deferred(reason: reason)
        default:
            self = .permanent(reason: error.reason?.wireValue ?? reason)
        }
    }

    /// What the attempt says about the endpoint, for its circuit: nil when it says nothing
    /// (deferred locally, one device's rate, an unknown outcome).
    public var endpointHealthy: Bool? {
        switch self {
        case .delivered, .permanent: return true
        case .transient(_, let endpointFailure): return endpointFailure ? false : nil
        case .unknown, .deferred: return nil
        }
    }
}
