import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldStore
import Hummingbird

/// `GET /v1/devices/invalid` (the tenant's device tokens APNs called invalid) and
/// `PUT /v1/devices/{token}` (a device registered again, which lifts a feedback refusal).
struct DeviceHandlers: Sendable {
    let store: any PushStore
    let clock: any PushClock
    let limits: ServerConfiguration.APISettings

    // MARK: GET /v1/devices/invalid

    struct InvalidDevicesAnswer: ResponseEncodable {
        struct Device: Encodable, Sendable {
            var deviceToken: String
            var topic: String
            var environment: String
            var reason: String
            @Nullable var apnsTimestamp: Date?
            var recordedAt: Date
            @Nullable var registeredAt: Date?
        }

        var devices: [Device]
        /// The newest `limit` records were read: older ones may exist when this is true.
        var truncated: Bool
    }

    func invalidDevices(_ request: Request, context: TenantRequestContext) async throws -> InvalidDevicesAnswer {
        let query = request.uri.queryParameters
        var since: Date? = nil
        if let text = query["since"].map(String.init) {
            guard let date = Timestamps.parseQuery(text) else {
                throw APIError.invalidQuery("since", "must be an RFC 3339 date (2025-01-31T12:00:00Z) or UNIX seconds (up to 11 digits)")
            }
            since = date
        }
        let limit = try QueryParameters.integer(query["limit"].map(String.init), name: "limit", in: 1...10_000) ?? 1000
        let records = try await store.invalidTokens(tenant: context.tenant.id, limit: limit)
        let shown = records.filter { record in since.map { record.recordedAt >= $0 } ?? true }
        return InvalidDevicesAnswer(
            devices: shown.map { record in
                InvalidDevicesAnswer.Device(
                    deviceToken: record.token.hex, topic: record.topic, environment: record.environment.rawValue,
                    reason: record.reason.wireValue, apnsTimestamp: record.apnsTimestamp, recordedAt: record.recordedAt,
                    registeredAt: record.registeredAt)
            },
            truncated: records.count == limit && shown.count == records.count)
    }

    // MARK: PUT /v1/devices/{token}

    struct RegisteredAnswer: ResponseEncodable {
        var deviceToken: String
        @Nullable var topic: String?
        var registeredAt: Date
        var recordsUpdated: Int
    }

    func registerDevice(_ request: Request, context: TenantRequestContext) async throws -> RegisteredAnswer {
        let tenant = context.tenant
        let token = try NotificationDecoding.deviceToken(context.parameters.get("token") ?? "", path: "device_token")
        var registeredAt = clock.date
        var topic: String? = nil
        let hasBody = request.headers[.contentLength].map { $0 != "0" } ?? (request.headers[.transferEncoding] != nil)
        if hasBody {
            let (_, root) = try await RequestBodies.json(request, limit: limits.maxBodyBytes)
            let reader = try JSONObjectReader(root, path: "", allowed: ["registered_at", "topic"])
            if let node = reader["registered_at"] {
                registeredAt = try Self.registrationDate(node, now: clock.date)
            }
            if let value = try reader.string("topic") {
                guard tenant.allows(topic: value) else { throw APIError.push(.topicDisallowed(value, tenant: tenant.id)) }
                topic = value
            }
        }
        let updated = try await store.registerToken(tenant: tenant.id, token: token, topic: topic, registeredAt: registeredAt)
        return RegisteredAnswer(deviceToken: token.hex, topic: topic, registeredAt: registeredAt, recordsUpdated: updated)
    }

    /// `registered_at`: an RFC 3339 date-time or UNIX seconds, from 2000 to a little past now.
    private static func registrationDate(_ node: JSONNode, now: Date) throws(APIError) -> Date {
        let parsed: Date?
        switch node.value {
        case .string(let text): parsed = Timestamps.parseRFC3339(text)
        case .number(let text): parsed = Timestamps.parseSeconds(jsonNumber: text)
        default: throw APIError.invalidField("registered_at", "must be an RFC 3339 date or UNIX seconds, not \(node.kind)")
        }
        guard let date = parsed else {
            throw APIError.invalidField(
                "registered_at", "must be an RFC 3339 date-time (2025-01-31T12:00:00Z) or a number of UNIX seconds, up to the year 9999")
        }
        // A well-formed date in the future would lift a feedback refusal forever: a refusal by
        // rule (422), like the tenant-policy ones.
        guard Timestamps.callerDates(now: now).contains(date) else {
            var error = APIError.invalidField(
                "registered_at",
                "must be from \(Timestamps.iso8601(Timestamps.earliestCallerDate)) to at most "
                    + "\(Int(Timestamps.futureAllowance)) seconds from now (\(Timestamps.iso8601(now)))")
            error.status = .unprocessableContent
            throw error
        }
        return date
    }
}
