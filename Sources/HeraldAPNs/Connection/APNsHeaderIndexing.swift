import NIOHPACK

/// Builds a request's HEADERS with the HPACK indexing Apple asks for, per connection:
///
/// - `:path` and `authorization`: literal without indexing (they change every request or hold a secret);
/// - `apns-id`, `apns-expiration`, `apns-collapse-id`: with incremental indexing the first time on the
///   connection (so their names enter the dynamic table), literal without indexing afterwards;
/// - everything else: with incremental indexing.
///
/// One value per connection, because the dynamic table is per connection.
struct APNsHeaderIndexing {
    private var sentAPNsID = false
    private var sentExpiration = false
    private var sentCollapseID = false

    init() {}

    mutating func headers(for request: APNsRequest, host: String) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: request.path, indexing: .nonIndexable)
        headers.add(name: "host", value: host)
        if let authorization = request.authorization {
            headers.add(name: "authorization", value: authorization, indexing: .nonIndexable)
        }
        headers.add(name: "apns-id", value: request.apnsID.rawValue, indexing: Self.firstTime(&sentAPNsID))
        headers.add(name: "apns-push-type", value: request.pushType)
        if let topic = request.topic {
            headers.add(name: "apns-topic", value: topic)
        }
        if let priority = request.priority {
            headers.add(name: "apns-priority", value: priority)
        }
        if let expiration = request.expiration {
            headers.add(name: "apns-expiration", value: expiration, indexing: Self.firstTime(&sentExpiration))
        }
        if let collapseID = request.collapseID {
            headers.add(name: "apns-collapse-id", value: collapseID, indexing: Self.firstTime(&sentCollapseID))
        }
        headers.add(name: "content-length", value: String(request.payload.readableBytes))
        return headers
    }

    private static func firstTime(_ sent: inout Bool) -> HPACKIndexing {
        if sent { return .nonIndexable }
        sent = true
        return .indexable
    }
}
