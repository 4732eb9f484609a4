import HTTP2Engine
import HeraldCore

/// Builds a request's HEADERS with the HPACK indexing Apple asks for, per connection:
///
/// - `:path`: nghttp2's deflater never indexes it by itself (a literal without indexing);
/// - `authorization`: never indexed (nghttp2's deflater does so by itself; the flag is set
///   anyway, so the secret never enters a dynamic table whatever the library version does);
/// - `apns-id` (`apns-request-id` for broadcasts and channel management), `apns-expiration`,
///   `apns-collapse-id`: left to the deflater (indexed) the first time on the connection, so
///   their names enter the dynamic table; never indexed afterwards;
/// - everything else: left to the deflater (indexed).
///
/// One value per connection, because the dynamic table is per connection.
struct APNsHeaderIndexing {
    private var sentAPNsID = false
    private var sentExpiration = false
    private var sentCollapseID = false
    /// The last request's `:path`, written again in place for the next: once the headers that
    /// carried it are emptied, this holds the only reference to its storage, so no string is
    /// allocated for a request's path (one of 74 bytes takes a 128-byte block).
    private var path = ""
    /// The last request's apns-id, written again in place from the next one's bytes (kept
    /// unshared the same way as `path`): no string is made for a request's apns-id.
    private var apnsIDText: [UInt8] = []

    init() {}

    mutating func headers(for request: APNsRequest, host: String) -> [HTTP2Header] {
        var headers: [HTTP2Header] = []
        fill(&headers, for: request, host: host)
        return headers
    }

    /// The same fields, written into `headers` (emptied first, its storage kept: a connection
    /// reuses one array for every request instead of allocating one each).
    mutating func fill(_ headers: inout [HTTP2Header], for request: APNsRequest, host: String) {
        headers.removeAll(keepingCapacity: true)
        headers.reserveCapacity(12)
        let (prefix, rest) = request.pathParts
        path.removeAll(keepingCapacity: true)
        path += prefix
        path += rest
        headers.append(HTTP2Header(name: ":method", value: request.method))
        headers.append(HTTP2Header(name: ":scheme", value: "https"))
        headers.append(HTTP2Header(name: ":path", value: path))
        headers.append(HTTP2Header(name: "host", value: host))
        if let authorization = request.authorization {
            headers.append(HTTP2Header(name: "authorization", value: authorization, indexing: .neverIndexed))
        }
        if apnsIDText.count != UUIDText.length { apnsIDText = Array(repeating: 0, count: UUIDText.length) }
        apnsIDText.withUnsafeMutableBufferPointer { text in
            if let base = text.baseAddress { request.apnsID.writeText(to: base) }
        }
        headers.append(
            HTTP2Header(
                name: request.sendsRequestID ? "apns-request-id" : "apns-id", utf8: apnsIDText,
                indexing: Self.firstTime(&sentAPNsID)))
        if let channelID = request.channelID {
            headers.append(HTTP2Header(name: "apns-channel-id", value: channelID))
        }
        if let pushType = request.pushType {
            headers.append(HTTP2Header(name: "apns-push-type", value: pushType))
        }
        if let topic = request.topic {
            headers.append(HTTP2Header(name: "apns-topic", value: topic))
        }
        if let priority = request.priority {
            headers.append(HTTP2Header(name: "apns-priority", value: priority))
        }
        if let expiration = request.expiration {
            headers.append(HTTP2Header(name: "apns-expiration", value: expiration, indexing: Self.firstTime(&sentExpiration)))
        }
        if let collapseID = request.collapseID {
            headers.append(HTTP2Header(name: "apns-collapse-id", value: collapseID, indexing: Self.firstTime(&sentCollapseID)))
        }
        if let payload = request.payload {
            headers.append(HTTP2Header(name: "content-length", value: String(payload.count)))
        }
    }

    private static func firstTime(_ sent: inout Bool) -> HTTP2HeaderIndexing {
        if sent { return .neverIndexed }
        sent = true
        return .automatic
    }
}
