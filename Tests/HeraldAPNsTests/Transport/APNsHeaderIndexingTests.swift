import HeraldCore
import NIOCore
import NIOHPACK
import Testing

@testable import HeraldAPNs

@Suite("APNs HEADERS and HPACK indexing")
struct APNsHeaderIndexingTests {
    func request(expiration: Expiration? = .at(1_900_000_000), collapseID: String? = "group", authorization: String? = "bearer abc") throws -> APNsRequest {
        let note = Notification(
            deviceToken: try DeviceToken(hex: "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0"),
            topic: "com.example.app", pushType: .alert, priority: .immediate, expiration: expiration,
            collapseID: collapseID, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8))
        return APNsRequest(
            notification: note, apnsID: NotificationID.random(), authorization: authorization, deadline: .now() + .seconds(5)
        ) { _ in }
    }

    func indexing(_ headers: HPACKHeaders) -> [String: HPACKIndexing] {
        var result: [String: HPACKIndexing] = [:]
        for (name, _, indexing) in headers { result[name] = indexing }
        return result
    }

    @Test("path and authorization are never indexed; apns-id, expiration, collapse-id only the first time")
    func indexingAsAppleAsks() throws {
        var encoder = APNsHeaderIndexing()
        let first = indexing(encoder.headers(for: try request(), host: "api.push.apple.com"))
        #expect(first[":path"] == .nonIndexable)
        #expect(first["authorization"] == .nonIndexable)
        #expect(first["apns-id"] == .indexable)
        #expect(first["apns-expiration"] == .indexable)
        #expect(first["apns-collapse-id"] == .indexable)
        for name in [":method", ":scheme", "host", "apns-topic", "apns-push-type", "apns-priority", "content-length"] {
            #expect(first[name] == .indexable, "\(name)")
        }
        let second = indexing(encoder.headers(for: try request(), host: "api.push.apple.com"))
        #expect(second[":path"] == .nonIndexable)
        #expect(second["authorization"] == .nonIndexable)
        #expect(second["apns-id"] == .nonIndexable)
        #expect(second["apns-expiration"] == .nonIndexable)
        #expect(second["apns-collapse-id"] == .nonIndexable)
        #expect(second["apns-topic"] == .indexable)
    }

    @Test("each header's first use counts separately, per connection")
    func firstUsePerHeader() throws {
        var encoder = APNsHeaderIndexing()
        let plain = indexing(encoder.headers(for: try request(expiration: nil, collapseID: nil, authorization: nil), host: "h"))
        #expect(plain["apns-expiration"] == nil)
        #expect(plain["authorization"] == nil)
        #expect(plain["apns-id"] == .indexable)
        let withCollapse = indexing(encoder.headers(for: try request(expiration: nil), host: "h"))
        #expect(withCollapse["apns-id"] == .nonIndexable)
        #expect(withCollapse["apns-collapse-id"] == .indexable)
        var other = APNsHeaderIndexing()
        #expect(indexing(other.headers(for: try request(), host: "h"))["apns-id"] == .indexable)
    }

    @Test("the request carries the headers APNs reads")
    func headerValues() throws {
        var encoder = APNsHeaderIndexing()
        let req = try request()
        let headers = encoder.headers(for: req, host: "api.push.apple.com")
        #expect(headers.first(name: ":method") == "POST")
        #expect(headers.first(name: ":path") == "/3/device/00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
        #expect(headers.first(name: "apns-id") == req.apnsID.rawValue)
        #expect(headers.first(name: "apns-priority") == "10")
        #expect(headers.first(name: "apns-expiration") == "1900000000")
        #expect(headers.first(name: "content-length") == String(req.payload.readableBytes))
        // Pseudo-headers come first.
        let names = headers.map(\.name)
        #expect(names.prefix(3).allSatisfy { $0.hasPrefix(":") })
    }
}
