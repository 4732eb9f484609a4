import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldStore
import Hummingbird
import Logging

/// Broadcast channels and broadcasts: a tenant's own (`/v1/channels…`, `POST /v1/broadcasts`)
/// and any tenant's for operators (`/admin/tenants/{id}/channels…`). Every call goes through
/// ``Herald/ChannelService``: a tenant sees only its own channels, and another tenant's ID is
/// "not found" like a missing one.
///
/// A channel ID is base64 (`+`, `/`, `=`): in a path it is given in base64url (`-`, `_`,
/// padding optional) or percent-encoded.
struct ChannelHandlers: Sendable {
    let channels: ChannelService
    let limits: ServerConfiguration.APISettings
    let audit: AuditTrail
    let logger: Logger

    static let createFields = ["bundle_id", "environment", "storage_policy", "label"]
    static let syncFields = ["bundle_id", "environment"]
    static let broadcastFields = [
        "channel_id", "environment", "priority", "expiration", "apns_request_id", "payload", "aps", "custom",
    ]

    // MARK: Answers

    struct ChannelAnswer: ResponseEncodable {
        var channelID: String
        var bundleID: String
        var environment: String
        var storagePolicy: Int
        @Nullable var label: String?
        var createdAt: Date

        init(_ record: ChannelRecord) {
            channelID = record.id.rawValue
            bundleID = record.bundleID
            environment = record.environment.rawValue
            storagePolicy = record.storagePolicy.rawValue
            label = record.label
            createdAt = record.createdAt
        }
    }

    struct ListAnswer: ResponseEncodable {
        struct Count: Encodable, Sendable {
            var bundleID: String
            var environment: String
            var count: Int
            var limit: Int
        }
        var channels: [ChannelAnswer]
        /// The `after` of the next page; null on the last.
        @Nullable var next: String?
        /// Each app's channels in each environment, against APNs' limit.
        var counts: [Count]
    }

    struct SyncAnswer: ResponseEncodable {
        var bundleID: String
        var environment: String
        var channels: Int
        var added: Int
        var removed: Int
        var limit: Int
    }

    struct BroadcastAnswer: ResponseEncodable {
        var success: Bool
        var status: Int
        /// The `apns-request-id` the broadcast went with.
        var apnsRequestID: String
        /// `apns-unique-id`, APNs' ID of the broadcast (on success).
        @Nullable var apnsUniqueID: String?
        @Nullable var reason: String?
        var channelID: String
        var environment: String
        var attempts: Int
    }

    // MARK: Tenant routes

    func list(_ request: Request, context: TenantRequestContext) async throws -> ListAnswer {
        try await list(request, tenant: context.tenant.id)
    }

    func create(_ request: Request, context: TenantRequestContext) async throws -> EditedResponse<ChannelAnswer> {
        Self.created(try await create(request, tenant: context.tenant.id))
    }

    func show(_ request: Request, context: TenantRequestContext) async throws -> ChannelAnswer {
        try await show(request, tenant: context.tenant.id, channel: try Self.channelParameter(context))
    }

    func delete(_ request: Request, context: TenantRequestContext) async throws -> Response {
        try await delete(request, tenant: context.tenant.id, channel: try Self.channelParameter(context))
    }

    func sync(_ request: Request, context: TenantRequestContext) async throws -> SyncAnswer {
        try await sync(request, tenant: context.tenant.id)
    }

    // MARK: POST /v1/broadcasts

    func broadcast(_ request: Request, context: TenantRequestContext) async throws -> BroadcastAnswer {
        let tenant = context.tenant.id
        let (body, root) = try await RequestBodies.json(request, limit: limits.maxBodyBytes)
        let reader = try JSONObjectReader(root, path: "", allowed: Self.broadcastFields)
        guard let channelText = try reader.string("channel_id", required: true) else { throw APIError.missingField("channel_id") }
        let channel = try Self.channelID(channelText, field: "channel_id")
        let environment = try NotificationDecoding.environment(reader)
        var priority: Priority? = nil
        if let value = try reader.integer("priority", in: 0...100) {
            do {
                priority = try Priority(value: Int(value))
            } catch {
                throw APIError.invalidField("priority", error.message, apnsReason: error.reason.wireValue)
            }
        }
        var expiration: Expiration? = nil
        if let value = try reader.integer("expiration", in: 0...Int64(UInt32.max)) {
            expiration = value == 0 ? .immediately : .at(UInt32(value))
        }
        var id: NotificationID? = nil
        if let text = try reader.string("apns_request_id") {
            do {
                id = try NotificationID(text)
            } catch {
                throw APIError.invalidField("apns_request_id", error.message, apnsReason: error.reason.wireValue)
            }
        }
        let payload = try NotificationDecoding.payload(reader, body: body)
        let notification = HeraldCore.Notification(
            channel: channel, priority: priority, expiration: expiration, id: id, payload: payload)
        let result: PushResult
        do {
            result = try await channels.broadcast(tenant: tenant, notification: notification, environment: environment)
        } catch let error as ChannelError {
            throw Self.apiError(error)
        } catch let error as PushError
            where error.code == .invalidNotification && (error.reason == .badRequestParams || error.reason == .badRequestPayload)
        {
            // Well-formed JSON that is not a Live Activity update: APNs' semantics, not the API's
            // schema (which takes any payload object).
            throw APIError(
                status: .unprocessableContent, code: "invalid_field", message: error.message, field: error.field,
                apnsReason: error.reason?.wireValue)
        } catch let error as PushError {
            throw APIError.push(error)
        }
        return BroadcastAnswer(
            success: result.isSuccess, status: result.status, apnsRequestID: result.notificationID.rawValue,
            apnsUniqueID: result.response.uniqueID?.rawValue, reason: result.reason?.wireValue, channelID: channel.rawValue,
            environment: result.environment.rawValue, attempts: result.attempts)
    }

    // MARK: Admin routes (any tenant)

    func adminList(_ request: Request, context: some RequestContext) async throws -> ListAnswer {
        try await list(request, tenant: try TenantPath.id(context))
    }

    func adminCreate(_ request: Request, context: some RequestContext) async throws -> EditedResponse<ChannelAnswer> {
        let tenant = try TenantPath.id(context)
        let record = try await create(request, tenant: tenant)
        await audit.record(
            .channelCreate, tenant: tenant.rawValue, object: record.id.rawValue,
            details: ["environment": record.environment.rawValue, "bundle_id": record.bundleID])
        return Self.created(record)
    }

    func adminShow(_ request: Request, context: some RequestContext) async throws -> ChannelAnswer {
        try await show(request, tenant: try TenantPath.id(context), channel: try Self.channelParameter(context))
    }

    func adminDelete(_ request: Request, context: some RequestContext) async throws -> Response {
        let tenant = try TenantPath.id(context)
        let channel = try Self.channelParameter(context)
        let response = try await delete(request, tenant: tenant, channel: channel)
        await audit.record(.channelDelete, tenant: tenant.rawValue, object: channel.rawValue)
        return response
    }

    func adminSync(_ request: Request, context: some RequestContext) async throws -> SyncAnswer {
        let tenant = try TenantPath.id(context)
        let answer = try await sync(request, tenant: tenant)
        await audit.record(
            .channelSync, tenant: tenant.rawValue, object: answer.bundleID,
            details: ["environment": answer.environment, "added": String(answer.added), "removed": String(answer.removed)])
        return answer
    }

    // MARK: Shared

    private func list(_ request: Request, tenant: TenantID) async throws -> ListAnswer {
        let query = request.uri.queryParameters
        let environment = try Self.environmentQuery(query["environment"].map(String.init))
        let bundle = query["bundle_id"].map(String.init)
        if let bundle, bundle.unicodeScalars.count > 255 {
            throw APIError.invalidQuery("bundle_id", "must be at most 255 characters")
        }
        let after = try query["after"].map { try Self.channelID(String($0), field: "after", query: true) }
        let limit = try QueryParameters.integer(query["limit"].map(String.init), name: "limit", in: 1...1000) ?? 100
        let records: [ChannelRecord]
        do {
            records = try await channels.list(tenant: tenant, environment: environment, bundleID: bundle, after: after, limit: limit)
        } catch let error as PushError {
            throw APIError.push(error)
        }
        let counts: [ListAnswer.Count]
        do {
            counts = try await channels.counts(tenant: tenant).map {
                ListAnswer.Count(bundleID: $0.bundleID, environment: $0.environment.rawValue, count: $0.count, limit: channels.limit)
            }
        } catch let error as PushError {
            throw APIError.push(error)
        }
        return ListAnswer(
            channels: records.map(ChannelAnswer.init), next: records.count == limit ? records.last?.id.rawValue : nil,
            counts: counts)
    }

    private static func created(_ record: ChannelRecord) -> EditedResponse<ChannelAnswer> {
        var headers = HTTPFields()
        headers[.location] = "/v1/channels/\(pathForm(record.id))?environment=\(record.environment.rawValue)"
        return EditedResponse(status: .created, headers: headers, response: ChannelAnswer(record))
    }

    private func create(_ request: Request, tenant: TenantID) async throws -> ChannelRecord {
        let (_, root) = try await RequestBodies.json(request, limit: 4096)
        let reader = try JSONObjectReader(root, path: "", allowed: Self.createFields)
        let bundle = try reader.string("bundle_id")
        if let bundle, bundle.unicodeScalars.count > 255 {
            throw APIError.invalidField("bundle_id", "must be at most 255 characters")
        }
        let environment = try NotificationDecoding.environment(reader)
        let policyValue = try reader.integer("storage_policy", in: 0...1) ?? 1
        let policy = ChannelStoragePolicy(rawValue: Int(policyValue)) ?? .mostRecentMessageStored
        let label = try reader.string("label")
        if let label {
            guard !label.isEmpty, label.unicodeScalars.count <= ChannelRecord.maximumLabelLength,
                !label.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
            else {
                throw APIError.invalidField(
                    "label", "must be 1 to \(ChannelRecord.maximumLabelLength) characters, without control characters")
            }
        }
        let record: ChannelRecord
        do {
            record = try await channels.create(
                tenant: tenant, bundleID: bundle, environment: environment, storagePolicy: policy, label: label)
        } catch let error as ChannelError {
            throw Self.apiError(error)
        } catch let error as PushError {
            throw APIError.push(error)
        }
        RequestID.logger(logger).info(
            "broadcast channel created",
            metadata: ["herald.tenant": "\(tenant)", "herald.channel": "\(record.id)", "herald.environment": "\(record.environment)"])
        return record
    }

    private func show(_ request: Request, tenant: TenantID, channel: ChannelID) async throws -> ChannelAnswer {
        let environment = try Self.environmentQuery(request.uri.queryParameters["environment"].map(String.init))
        do {
            return ChannelAnswer(try await channels.read(tenant: tenant, environment: environment, id: channel))
        } catch let error as ChannelError {
            throw Self.apiError(error)
        } catch let error as PushError {
            throw APIError.push(error)
        }
    }

    private func delete(_ request: Request, tenant: TenantID, channel: ChannelID) async throws -> Response {
        let environment = try Self.environmentQuery(request.uri.queryParameters["environment"].map(String.init))
        do {
            _ = try await channels.delete(tenant: tenant, environment: environment, id: channel)
        } catch let error as ChannelError {
            throw Self.apiError(error)
        } catch let error as PushError {
            throw APIError.push(error)
        }
        RequestID.logger(logger).info(
            "broadcast channel deleted", metadata: ["herald.tenant": "\(tenant)", "herald.channel": "\(channel)"])
        return Response(status: .noContent)
    }

    private func sync(_ request: Request, tenant: TenantID) async throws -> SyncAnswer {
        var bundle: String? = nil
        var environment: APNsEnvironment? = nil
        if let root = try await RequestBodies.optionalJSON(request, limit: 4096) {
            let reader = try JSONObjectReader(root, path: "", allowed: Self.syncFields)
            bundle = try reader.string("bundle_id")
            if let bundle, bundle.unicodeScalars.count > 255 {
                throw APIError.invalidField("bundle_id", "must be at most 255 characters")
            }
            environment = try NotificationDecoding.environment(reader)
        }
        do {
            let report = try await channels.sync(tenant: tenant, bundleID: bundle, environment: environment)
            return SyncAnswer(
                bundleID: report.bundleID, environment: report.environment.rawValue, channels: report.channels,
                added: report.added, removed: report.removed, limit: channels.limit)
        } catch let error as ChannelError {
            throw Self.apiError(error)
        } catch let error as PushError {
            throw APIError.push(error)
        }
    }

    // MARK: Reading and refusing

    /// A channel ID from the path: base64url (`-`, `_`, padding optional) or percent-encoded base64.
    static func channelParameter(_ context: some RequestContext) throws(APIError) -> ChannelID {
        guard let text = context.parameters.get("channel") else { throw APIError.notFound("channel") }
        return try channelID(text.removingPercentEncoding ?? text, field: "channel", path: true)
    }

    /// Reads a channel ID given as base64 or base64url.
    static func channelID(_ text: String, field: String, query: Bool = false, path: Bool = false) throws(APIError) -> ChannelID {
        var standard = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        if !standard.contains("="), standard.utf8.count % 4 != 0 {
            standard += String(repeating: "=", count: 4 - standard.utf8.count % 4)
        }
        do {
            return try ChannelID(standard, field: field)
        } catch {
            if query { throw APIError.invalidQuery(field, error.message) }
            if path { throw APIError.notFound("channel") }
            throw APIError.invalidField(field, error.message, apnsReason: error.reason.wireValue)
        }
    }

    /// A channel ID as a path segment: base64url without padding.
    static func pathForm(_ id: ChannelID) -> String {
        String(id.rawValue.compactMap { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 == "=" ? nil : $0 })
    }

    static func environmentQuery(_ text: String?) throws(APIError) -> APNsEnvironment? {
        guard let text else { return nil }
        guard let environment = APNsEnvironment(rawValue: text) else {
            throw APIError.invalidQuery("environment", "must be production or development")
        }
        return environment
    }

    static func apiError(_ error: ChannelError) -> APIError {
        let reason = error.reason?.wireValue
        switch error.code {
        case .notFound:
            return APIError(status: .notFound, code: "channel_not_found", message: error.message, apnsReason: reason)
        case .bundleNotAllowed:
            return APIError(
                status: .unprocessableContent, code: "bundle_not_allowed", message: error.message, field: error.field ?? "bundle_id")
        case .environmentUnavailable:
            return APIError(
                status: .unprocessableContent, code: "environment_unavailable", message: error.message,
                field: error.field ?? "environment")
        case .limitReached:
            return APIError(status: .conflict, code: "channel_limit_reached", message: error.message, apnsReason: "CannotCreateChannelConfig")
        case .expirationNotAllowed:
            return APIError(
                status: .unprocessableContent, code: "expiration_not_allowed", message: error.message,
                field: error.field ?? "expiration", apnsReason: reason)
        case .refusedByAPNs:
            // APNs' own refusal: a 4xx is about the request or the tenant's credential, a 5xx
            // is APNs' trouble.
            let status: HTTPResponse.Status = (error.status ?? 500) >= 500 ? .badGateway : .unprocessableContent
            return APIError(status: status, code: "apns_refused", message: error.message, apnsReason: reason)
        case .badAnswer:
            return APIError(status: .badGateway, code: "bad_apns_answer", message: error.message)
        }
    }
}
