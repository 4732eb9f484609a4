import Foundation
import HeraldCore

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Posts plugin webhooks with Foundation's `URLSession` (http and https).
public final class URLSessionWebhookSender: WebhookSender {
    private let session: URLSession

    public init() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    public func post(_ request: WebhookRequest) async throws -> Int {
        guard let url = URL(string: request.url) else {
            throw WebhookError("the webhook URL is not a URL")
        }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = "POST"
        urlRequest.timeoutInterval = max(0.1, request.timeout.secondsValue)
        for (name, value) in request.headers {
            urlRequest.setValue(value, forHTTPHeaderField: name)
        }
        urlRequest.httpBody = Data(request.body)
        let (_, response) = try await session.data(for: urlRequest)
        guard let http = response as? HTTPURLResponse else {
            throw WebhookError("the webhook answer was not HTTP")
        }
        return http.statusCode
    }
}

public struct WebhookError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
