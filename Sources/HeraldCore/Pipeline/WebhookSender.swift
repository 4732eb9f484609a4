/// An HTTP POST a plugin wants made (e.g. the feedback plugin's webhook).
public struct WebhookRequest: Sendable, Hashable {
    /// `http://` or `https://`.
    public var url: String
    public var headers: [String: String]
    public var body: [UInt8]
    /// How long one attempt may take.
    public var timeout: Duration
    /// Whether the URL may resolve to a loopback, link-local or private address (the tenant
    /// file allowed it explicitly). Otherwise such an address is refused before any connection.
    public var allowPrivateAddresses: Bool

    public init(
        url: String, headers: [String: String] = [:], body: [UInt8], timeout: Duration = .seconds(10),
        allowPrivateAddresses: Bool = false
    ) {
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.allowPrivateAddresses = allowPrivateAddresses
    }
}

/// A durable, bounded queue of webhook deliveries: the request is stored, then a fixed number
/// of senders posts it with its retries (Herald's `WebhookOutbox`).
public protocol WebhookQueue: Sendable {
    /// Stores the delivery for the senders.
    /// - Throws: when the tenant's share of the queue is full or the store fails (the
    ///   delivery is not queued; the caller logs it).
    func enqueue(_ request: WebhookRequest, tenant: TenantID, attempts: Int, initialBackoff: Duration) async throws
}

/// Makes one HTTP POST; retries are the caller's. Provided by Herald, so plugins need no
/// network library of their own.
public protocol WebhookSender: Sendable {
    /// - Returns: the response's HTTP status.
    /// - Throws: when no response came (connection refused, timeout, …).
    func post(_ request: WebhookRequest) async throws -> Int
}
