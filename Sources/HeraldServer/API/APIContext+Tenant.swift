import Foundation
import Herald
import HeraldCore
import HeraldStore
import Hummingbird

// The tenant routes: sends, batches, jobs, devices. Every store call is scoped by the tenant
// the API key belongs to, so another tenant's objects answer 404 exactly like absent ones.
extension APIContext {
    static let batchFields = ["job_id", "environment", "notification", "device_tokens", "notifications"]
    /// At most this many bad items are listed in a refused batch's `details`.
    static let batchErrorLimit = 20

    // MARK: POST /v1/notifications

    func sendNotification(_ request: Request, tenant: TenantConfiguration) async throws -> Response {
        let (body, root) = try await jsonBody(request, limit: settings.api.maxBodyBytes)
        let reader = try JSONObjectReader(root, path: "", allowed: NotificationDecoding.notificationFields)
        let token = try NotificationDecoding.deviceToken(reader)
        let environment = try NotificationDecoding.environment(reader)
        let notification = try NotificationDecoding.template(reader, body: body).notification(for: token)
        let result: PushResult
        do {
            result = try await router.sendThroughCircuit(tenant: tenant.id, notification: notification, environment: environment)
        } catch let error as PushError {
            throw APIError.push(error)
        }
        return JSONResponse.make(
            .object([
                ("success", .bool(result.isSuccess)),
                ("status", .count(result.status)),
                ("apns_id", .string(result.notificationID.rawValue)),
                ("reason", .optional(result.reason?.wireValue)),
                ("timestamp", .optional(result.response.timestamp)),
                ("environment", .string(result.environment.rawValue)),
                ("attempts", .count(result.attempts)),
            ]))
    }

    // MARK: POST /v1/notifications/batch

    func sendBatch(_ request: Request, tenant: TenantConfiguration) async throws -> Response {
        let contentType = request.headers[.contentType]
        guard let contentType, Self.isJSON(contentType) else { throw APIError.unsupportedMediaType(contentType) }
        let body = try await body(request, limit: settings.api.maxBatchBodyBytes)
        // Parsing and checking 100,000 items is CPU work: off the cooperative pool.
        let batch = try await batchDecoder.run(tenant: tenant.id) { try self.decodeBatch(body, tenant: tenant) }
        let (jobID, environment, notifications) = (batch.jobID, batch.environment, batch.notifications)

        let creation: JobCreation
        do {
            creation = try await store.createJob(
                tenant: tenant.id, id: jobID, environment: environment, notifications: notifications,
                createdAt: router.configuration.clock.date, limits: jobLimits)
        } catch let error as StoreError where error.isQuotaExceeded {
            logger.notice("batch job refused by a quota", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
            throw APIError.quotaExceeded(error.message)
        } catch {
            requestLogger.error("cannot store a batch job", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
            throw APIError.unavailable("store_unavailable", "the job could not be stored; nothing was accepted")
        }
        let job = creation.job
        var status = HTTPResponse.Status.accepted
        switch creation {
        case .created:
            requestLogger.info(
                "batch job accepted",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.job": "\(job.id)", "herald.items": "\(job.itemCount)"])
            runner.jobAccepted(job)
        case .existing:
            status = .ok
        }
        var headers = HTTPFields()
        headers[.location] = "/v1/jobs/\(job.id)"
        return JSONResponse.make(
            .object([
                ("job_id", .string(job.id.rawValue)),
                ("state", .string(job.state.rawValue)),
                ("items", .count(job.itemCount)),
                ("existing", .bool(creation == .existing(job))),
                ("href", .string("/v1/jobs/\(job.id)")),
            ]), status: status, headers: headers)
    }

    /// A batch POST's body, parsed and checked: the job's id, environment and notifications.
    struct DecodedBatch: Sendable {
        var jobID: JobID
        var environment: APNsEnvironment?
        var notifications: [HeraldCore.Notification]
    }

    /// Parses and checks a batch body (run on the blocking pool: see ``BatchDecoder``).
    func decodeBatch(_ body: [UInt8], tenant: TenantConfiguration) throws(APIError) -> DecodedBatch {
        let root: JSONNode
        do {
            root = try StrictJSONParser.parse(body)
        } catch {
            throw APIError.malformedJSON(error)
        }
        let reader = try JSONObjectReader(root, path: "", allowed: Self.batchFields)
        let environment = try NotificationDecoding.environment(reader)
        if let environment, tenant.endpoints.endpoint(for: environment) == nil {
            throw APIError.push(.environmentUnavailable(environment, tenant: tenant.id))
        }
        var jobID = JobID.random()
        if let raw = try reader.string("job_id") {
            do {
                jobID = try JobID(raw)
            } catch {
                throw APIError.invalidField("job_id", error.description)
            }
        }
        let notifications: [HeraldCore.Notification]
        switch (reader["notification"], reader.has("notifications")) {
        case (let template?, false):
            notifications = try templateBatch(reader, template: template, body: body, tenant: tenant, environment: environment)
        case (nil, true):
            notifications = try listBatch(reader, body: body, tenant: tenant, environment: environment)
        case (_?, true):
            throw APIError.invalidField("notifications", "give notification with device_tokens, or notifications, not both")
        case (nil, false):
            throw APIError.missingField("notification", "give notification with device_tokens, or a notifications list")
        }
        return DecodedBatch(jobID: jobID, environment: environment, notifications: notifications)
    }

    /// The per-tenant job limits of `jobs:` (checked by the store in the job's own transaction).
    var jobLimits: JobLimits {
        JobLimits(maxActiveJobs: settings.jobs.maxActiveJobsPerTenant, maxPendingItems: settings.jobs.maxPendingItemsPerTenant)
    }

    private func checkItemCount(_ count: Int, field: String) throws(APIError) {
        guard count > 0 else { throw APIError.invalidField(field, "must hold at least one item") }
        guard count <= settings.api.maxBatchItems else {
            throw APIError.invalidField(field, "holds \(count) items; a batch may hold at most \(settings.api.maxBatchItems)")
        }
    }

    private func templateBatch(
        _ reader: JSONObjectReader, template node: JSONNode, body: [UInt8], tenant: TenantConfiguration, environment: APNsEnvironment?
    ) throws(APIError) -> [HeraldCore.Notification] {
        guard let tokens = try reader.array("device_tokens") else {
            throw APIError.missingField("device_tokens", "a batch with a shared notification needs device_tokens")
        }
        try checkItemCount(tokens.count, field: "device_tokens")
        let templateReader = try JSONObjectReader(node, path: "notification", allowed: NotificationDecoding.templateFields)
        var template = try NotificationDecoding.template(templateReader, body: body)
        // The shared fields are checked once, against a stand-in token.
        do {
            template.topic = try tenant.admit(template.notification(for: DeviceToken(bytes: [0])), environment: environment)
                .notification.topic
        } catch {
            throw APIError.push(error, prefix: "notification")
        }
        var notifications: [HeraldCore.Notification] = []
        notifications.reserveCapacity(tokens.count)
        var errors: [APIError] = []
        // The item's path is spelled only for an error (100,000 interpolated strings otherwise).
        for (index, node) in tokens.enumerated() {
            guard case .string(let hex) = node.value else {
                errors.append(APIError.invalidField("device_tokens[\(index)]", "must be a string, not \(node.kind)"))
                if errors.count >= Self.batchErrorLimit { break } else { continue }
            }
            do throws(NotificationValidationError) {
                notifications.append(template.notification(for: try DeviceToken(hex: hex)))
            } catch {
                errors.append(NotificationDecoding.deviceTokenError(error, path: "device_tokens[\(index)]"))
                if errors.count >= Self.batchErrorLimit { break }
            }
        }
        try throwIfAny(errors)
        return notifications
    }

    private func listBatch(
        _ reader: JSONObjectReader, body: [UInt8], tenant: TenantConfiguration, environment: APNsEnvironment?
    ) throws(APIError) -> [HeraldCore.Notification] {
        if reader.has("device_tokens") {
            throw APIError.invalidField("device_tokens", "goes with notification; each item of notifications has its own device_token")
        }
        guard let items = try reader.array("notifications") else { throw APIError.missingField("notifications") }
        try checkItemCount(items.count, field: "notifications")
        var notifications: [HeraldCore.Notification] = []
        notifications.reserveCapacity(items.count)
        var errors: [APIError] = []
        for (index, node) in items.enumerated() {
            let path = "notifications[\(index)]"
            do throws(APIError) {
                let item = try JSONObjectReader(node, path: path, allowed: NotificationDecoding.batchItemFields)
                let token = try NotificationDecoding.deviceToken(item)
                let notification = try NotificationDecoding.template(item, body: body).notification(for: token)
                do {
                    notifications.append(try tenant.admit(notification, environment: environment).notification)
                } catch {
                    throw APIError.push(error, prefix: path)
                }
            } catch {
                errors.append(error)
                if errors.count >= Self.batchErrorLimit { break }
            }
        }
        try throwIfAny(errors)
        return notifications
    }

    private func throwIfAny(_ errors: [APIError]) throws(APIError) {
        guard var first = errors.first else { return }
        first.message += errors.count > 1 ? " (and \(errors.count - 1) more bad items listed in details; nothing was accepted)" : " (nothing was accepted)"
        first.details = errors
        throw first
    }

    // MARK: GET /v1/jobs/{id}

    func job(_ request: Request, tenant: TenantConfiguration, id: String) async throws -> Response {
        // An id that cannot exist, another tenant's job and a missing job all answer the same.
        guard let jobID = try? JobID(id), let job = try await store.job(tenant: tenant.id, id: jobID) else {
            throw APIError.notFound("job")
        }
        let query = request.uri.queryParameters
        let after = try Self.queryInteger(query["failed_after"].map(String.init), name: "failed_after", in: -1...Int.max) ?? -1
        let limit = try Self.queryInteger(query["limit"].map(String.init), name: "limit", in: 1...1000) ?? 100

        let outcomes = try await reports.outcomes(tenant: tenant.id, job: jobID)
        var pending = 0
        var retrying = 0
        var sent = 0
        var failed = 0
        var unknown = 0
        for outcome in outcomes {
            switch outcome.state {
            case .pending: pending += outcome.count
            case .retrying: retrying += outcome.count
            case .sent: sent += outcome.count
            case .failed: failed += outcome.count
            case .unknown: unknown += outcome.count
            }
        }
        let nextAttempt = retrying > 0 ? try await store.nextAttempt(tenant: tenant.id, job: jobID) : nil
        var failedItems = try await reports.failedItems(tenant: tenant.id, job: jobID, afterIndex: after, limit: limit + 1)
        var next: JSONValue = .null
        if failedItems.count > limit {
            failedItems.removeLast(failedItems.count - limit)
            next = .count(failedItems[failedItems.count - 1].index)
        }
        return JSONResponse.make(
            .object([
                ("job_id", .string(job.id.rawValue)),
                ("state", .string(job.state.rawValue)),
                ("environment", .optional(job.environment?.rawValue)),
                ("items", .count(job.itemCount)),
                ("created_at", .date(job.createdAt)),
                ("updated_at", .date(job.updatedAt)),
                (
                    "counts",
                    .object([
                        ("pending", .count(pending)), ("retrying", .count(retrying)), ("sent", .count(sent)),
                        ("failed", .count(failed)), ("unknown", .count(unknown)),
                    ])
                ),
                ("next_attempt_at", .optional(nextAttempt)),
                (
                    "outcomes",
                    .array(
                        outcomes.filter { $0.state.isFinal }.map { outcome in
                            .object([
                                ("state", .string(outcome.state.rawValue)), ("status", .optional(outcome.status)),
                                ("reason", .optional(outcome.reason)), ("count", .count(outcome.count)),
                            ])
                        })
                ),
                (
                    "failed_items",
                    .array(
                        failedItems.map { item in
                            .object([
                                ("index", .count(item.index)),
                                ("device_token", .string(item.notification.deviceToken.hex)),
                                ("apns_id", .optional(item.result?.apnsID?.rawValue ?? item.notification.id?.rawValue)),
                                ("status", .optional(item.result?.status)),
                                ("reason", .optional(item.result?.reason)),
                                ("message", .optional(item.result?.message)),
                                ("timestamp", .optional(item.result?.apnsTimestamp)),
                                ("finished_at", .optional(item.result?.finishedAt)),
                                ("attempts", .count(item.attempts)),
                                ("last_error", .optional(item.lastError)),
                            ])
                        })
                ),
                ("next_failed_after", next),
            ]))
    }

    // MARK: GET /v1/devices/invalid

    func invalidDevices(_ request: Request, tenant: TenantConfiguration) async throws -> Response {
        let query = request.uri.queryParameters
        var since: Date? = nil
        if let text = query["since"].map(String.init) {
            guard let date = Timestamps.parseQuery(text) else {
                throw APIError.invalidQuery("since", "must be an RFC 3339 date (2025-01-31T12:00:00Z) or UNIX seconds (up to 11 digits)")
            }
            since = date
        }
        let limit = try Self.queryInteger(query["limit"].map(String.init), name: "limit", in: 1...10_000) ?? 1000
        let records = try await store.invalidTokens(tenant: tenant.id, limit: limit)
        let shown = records.filter { since == nil || $0.recordedAt >= since! }
        return JSONResponse.make(
            .object([
                (
                    "devices",
                    .array(
                        shown.map { record in
                            .object([
                                ("device_token", .string(record.token.hex)),
                                ("topic", .string(record.topic)),
                                ("environment", .string(record.environment.rawValue)),
                                ("reason", .string(record.reason.wireValue)),
                                ("apns_timestamp", .optional(record.apnsTimestamp)),
                                ("recorded_at", .date(record.recordedAt)),
                                ("registered_at", .optional(record.registeredAt)),
                            ])
                        })
                ),
                // The newest `limit` records were read: older ones may exist when this is true.
                ("truncated", .bool(records.count == limit && shown.count == records.count)),
            ]))
    }

    // MARK: PUT /v1/devices/{token}

    func registerDevice(_ request: Request, tenant: TenantConfiguration, token raw: String) async throws -> Response {
        let token = try NotificationDecoding.deviceToken(raw, path: "device_token")
        var registeredAt = router.configuration.clock.date
        var topic: String? = nil
        let hasBody = request.headers[.contentLength].map { $0 != "0" } ?? (request.headers[.transferEncoding] != nil)
        if hasBody {
            let (_, root) = try await jsonBody(request, limit: settings.api.maxBodyBytes)
            let reader = try JSONObjectReader(root, path: "", allowed: ["registered_at", "topic"])
            if let node = reader["registered_at"] {
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
                // A well-formed date in the future would lift a feedback refusal forever: a
                // refusal by rule (422), like the tenant-policy ones.
                let now = router.configuration.clock.date
                guard Timestamps.callerDates(now: now).contains(date) else {
                    var error = APIError.invalidField(
                        "registered_at",
                        "must be from \(Timestamps.iso8601(Timestamps.earliestCallerDate)) to at most "
                            + "\(Int(Timestamps.futureAllowance)) seconds from now (\(Timestamps.iso8601(now)))")
                    error.status = .unprocessableContent
                    throw error
                }
                registeredAt = date
            }
            if let value = try reader.string("topic") {
                guard tenant.allows(topic: value) else { throw APIError.push(.topicDisallowed(value, tenant: tenant.id)) }
                topic = value
            }
        }
        let updated = try await store.registerToken(tenant: tenant.id, token: token, topic: topic, registeredAt: registeredAt)
        return JSONResponse.make(
            .object([
                ("device_token", .string(token.hex)),
                ("topic", .optional(topic)),
                ("registered_at", .date(registeredAt)),
                ("records_updated", .count(updated)),
            ]))
    }

    static func queryInteger(_ text: String?, name: String, in range: ClosedRange<Int>) throws(APIError) -> Int? {
        guard let text else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw APIError.invalidQuery(name, "must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }
}
