@_spi(Testing) import HeraldCore
import NIOCore
import HTTP2Engine
import Testing

@testable import HeraldAPNs

@Suite("APNs HEADERS and HPACK indexing")
struct APNsHeaderIndexingTests {
    func request(expiration: Expiration? = .at(1_900_000_000), collapseID: String? = "group", authorization: String? = "bearer abc") throws -> APNsRequest {
        let note = Notification(
            deviceToken: try DeviceToken(hex: "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0"),
            topic: "com.example.app", pushType: .alert, priority: .immediate, expiration: expiration,
            collapseID: collapseID, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        var ids = NotificationIDGenerator()
        return APNsRequest(
            notification: AdmittedNotification(unchecked: note, id: ids.nextID(), environment: .production),
            authorization: authorization, deadline: .now() + .seconds(5)
        ) { _ in }
    }

    func indexing(_ headers: [HTTP2Header]) -> [String: HTTP2HeaderIndexing] {
        var result: [String: HTTP2HeaderIndexing] = [:]
        for header in headers { result[header.name] = header.indexing }
        return result
    }

    @Test("authorization is never indexed (path is left to the deflater, which never indexes it); apns-id, expiration, collapse-id only the first time")
    func indexingAsAppleAsks() throws {
        var encoder = APNsHeaderIndexing()
        let first = indexing(encoder.headers(for: try request(), host: "api.push.apple.com"))
        #expect(first[":path"] == .automatic)
        #expect(first["authorization"] == .neverIndexed)
        #expect(first["apns-id"] == .automatic)
        #expect(first["apns-expiration"] == .automatic)
        #expect(first["apns-collapse-id"] == .automatic)
        for name in [":method", ":scheme", "host", "apns-topic", "apns-push-type", "apns-priority", "content-length"] {
            #expect(first[name] == .automatic, "\(name)")
        }
        let second = indexing(encoder.headers(for: try request(), host: "api.push.apple.com"))
        #expect(second[":path"] == .automatic)
        #expect(second["authorization"] == .neverIndexed)
        #expect(second["apns-id"] == .neverIndexed)
        #expect(second["apns-expiration"] == .neverIndexed)
        #expect(second["apns-collapse-id"] == .neverIndexed)
        #expect(second["apns-topic"] == .automatic)
    }

    @Test("each header's first use counts separately, per connection")
    func firstUsePerHeader() throws {
        var encoder = APNsHeaderIndexing()
        let plain = indexing(encoder.headers(for: try request(expiration: nil, collapseID: nil, authorization: nil), host: "h"))
        #expect(plain["apns-expiration"] == nil)
        #expect(plain["authorization"] == nil)
        #expect(plain["apns-id"] == .automatic)
        let withCollapse = indexing(encoder.headers(for: try request(expiration: nil), host: "h"))
        #expect(withCollapse["apns-id"] == .neverIndexed)
        #expect(withCollapse["apns-collapse-id"] == .automatic)
        var other = APNsHeaderIndexing()
        #expect(indexing(other.headers(for: try request(), host: "h"))["apns-id"] == .automatic)
    }

    @Test("the request carries the headers APNs reads")
    func headerValues() throws {
        var encoder = APNsHeaderIndexing()
        let req = try request()
        let headers = encoder.headers(for: req, host: "api.push.apple.com")
        func first(_ name: String) -> String? { headers.first { $0.name == name }?.value }
        #expect(first(":method") == "POST")
        #expect(first(":path") == "/3/device/00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
        #expect(first("apns-id") == req.apnsID.rawValue)
        #expect(first("apns-priority") == "10")
        #expect(first("apns-expiration") == "1900000000")
        #expect(first("content-length") == String(req.payload?.count ?? -1))
        // Pseudo-headers come first.
        let names = headers.map(\.name)
        #expect(names.prefix(3).allSatisfy { $0.hasPrefix(":") })
    }
}
