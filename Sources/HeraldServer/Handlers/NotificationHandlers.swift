import Foundation
import Herald
import HeraldConfig
import HeraldCore
import HeraldStore
import Hummingbird
import Logging

/// `POST /v1/notifications` and `POST /v1/notifications/batch`: a single send answered with
/// APNs' answer, and a batch stored as a job for the runner.
struct NotificationHandlers: Sendable {
    let router: Herald.Router
    let store: any PushStore
    let runner: JobRunner
    let limits: ServerConfiguration.APISettings
    let jobLimits: JobLimits
    let logger: Logger
    /// Batch bodies are decoded on the blocking pool, one at a time per tenant (shared by every
    /// request: the handlers are made once per server).
    let batchDecoder = BatchDecoder()

    static let batchFields = ["job_id", "environment", "notification", "device_tokens", "notifications"]
    /// At most this many bad items are listed in a refused batch's `details`.
    static let batchErrorLimit = 20

    // MARK: POST /v1/notifications

    struct SendAnswer: ResponseEncodable {
        var success: Bool
        var status: Int
        var apnsID: String
        /// `apns-unique-id`: APNs gives it in the development environment only.
        @Nullable var apnsUniqueID: String?
        @Nullable var reason: String?
        @Nullable var timestamp: Date?
        var environment: String
        var attempts: Int
    }

    func send(_ request: Request, context: TenantRequestContext) async throws -> SendAnswer {
        let tenant = context.tenant
        let (body, root) = try await RequestBodies.json(request, limit: limits.maxBodyBytes)
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
        return SendAnswer(
            success: result.isSuccess, status: result.status, apnsID: result.notificationID.rawValue,
            apnsUniqueID: result.response.uniqueID?.rawValue, reason: result.reason?.wireValue, timestamp: result.response.timestamp,
            environment: result.environment.rawValue, attempts: result.attempts)
    }

    // MARK: POST /v1/notifications/batch

    struct BatchAnswer: ResponseEncodable {
        var jobID: String
        var state: String
        var items: Int
        var existing: Bool
        var href: String
    }

    func sendBatch(_ request: Request, context: TenantRequestContext) async throws -> EditedResponse<BatchAnswer> {
        let tenant = context.tenant
        let contentType = request.headers[.contentType]
        guard let contentType, RequestBodies.isJSON(contentType) else { throw APIError.unsupportedMediaType(contentType) }
        let body = try await RequestBodies.raw(request, limit: limits.maxBatchBodyBytes)
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
        } catch let error as StoreError where error.leftOutcomeUnknown {
            // The store may have committed the job all the same (after the bound, or before the
            // connection went): the answer names the id, whether the caller gave it or not, so
            // that a GET tells and a repeat with that job_id reads the job back instead of
            // making a second.
            RequestID.logger(logger).error(
                "a batch job's store call ended without an answer",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.job": "\(jobID)", "herald.error": "\(error)"])
            var answer = APIError.storeUnavailable(
                "the store did not answer; the job may have been stored as \(jobID): GET /v1/jobs/\(jobID) tells, "
                    + "and repeating the request with job_id \(jobID) stores it at most once",
                detail: error)
            answer.jobID = jobID.rawValue
            throw answer
        } catch {
            RequestID.logger(logger).error(
                "cannot store a batch job", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
            throw APIError.unavailable("store_unavailable", "the job could not be stored; nothing was accepted")
        }
        let job = creation.job
        var status = HTTPResponse.Status.accepted
        switch creation {
        case .created:
            RequestID.logger(logger).info(
                "batch job accepted",
                metadata: ["herald.tenant": "\(tenant.id)", "herald.job": "\(job.id)", "herald.items": "\(job.itemCount)"])
            router.usage.add(.accepted, tenant: tenant.id, at: job.createdAt, count: Int64(job.itemCount))
            runner.jobAccepted(job)
        case .existing:
            status = .ok
        }
        var headers = HTTPFields()
        headers[.location] = "/v1/jobs/\(job.id)"
        return EditedResponse(
            status: status, headers: headers,
            response: BatchAnswer(
                jobID: job.id.rawValue, state: job.state.rawValue, items: job.itemCount,
                existing: creation == .existing(job), href: "/v1/jobs/\(job.id)"))
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

    private func checkItemCount(_ count: Int, field: String) throws(APIError) {
        guard count > 0 else { throw APIError.invalidField(field, "must hold at least one item") }
        guard count <= limits.maxBatchItems else {
            throw APIError.invalidField(field, "holds \(count) items; a batch may hold at most \(limits.maxBatchItems)")
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
            template.topic = try tenant.admissionCheck(template.notification(for: DeviceToken(bytes: [0])), environment: environment)
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
        try Self.throwIfAny(errors)
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
                    notifications.append(try tenant.admissionCheck(notification, environment: environment).notification)
                } catch {
                    throw APIError.push(error, prefix: path)
                }
            } catch {
                errors.append(error)
                if errors.count >= Self.batchErrorLimit { break }
            }
        }
        try Self.throwIfAny(errors)
        return notifications
    }

    private static func throwIfAny(_ errors: [APIError]) throws(APIError) {
        guard var first = errors.first else { return }
        first.message += errors.count > 1 ? " (and \(errors.count - 1) more bad items listed in details; nothing was accepted)" : " (nothing was accepted)"
        first.details = errors
        throw first
    }
}
