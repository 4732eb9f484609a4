/// An HTTP POST a plugin wants made (e.g. the feedback plugin's webhook).
public struct WebhookRequest: Sendable, Hashable {
    /// `http://` or `https://`.
    public var url: String
    public var headers: [String: String]
    public var body: [UInt8]
    /// How long one attempt may take.
    public var timeout: Duration

    public init(url: String, headers: [String: String] = [:], body: [UInt8], timeout: Duration = .seconds(10)) {
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// Makes one HTTP POST; retries are the caller's. Provided by Herald, so plugins need no
/// network library of their own.
public protocol WebhookSender: Sendable {
    /// - Returns: the response's HTTP status.
    /// - Throws: when no response came (connection refused, timeout, …).
    func post(_ request: WebhookRequest) async throws -> Int
}
