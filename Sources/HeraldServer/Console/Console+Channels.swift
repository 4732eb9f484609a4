import Foundation
import Herald
import HeraldCore
import HeraldStore
import Hummingbird

/// A tenant's broadcast channels on its console page: the kept list, and the forms to create,
/// delete and sync channels and to send a test broadcast, each through the API's own
/// ``Herald/ChannelService`` and written to the audit log.
extension Console {
    /// Channels shown on a tenant's page.
    static let channelLimit = 50

    func channelSection(_ tenant: TenantConfiguration) async -> TenantPage.Channels {
        do {
            let records = try await channels.list(
                tenant: tenant.id, environment: nil, bundleID: nil, after: nil, limit: Self.channelLimit + 1)
            let counts = try await channels.counts(tenant: tenant.id).map {
                "\($0.bundleID) in \($0.environment): \($0.count) of \(channels.limit) channels"
            }
            return TenantPage.Channels(
                rows: records.prefix(Self.channelLimit).map { record in
                    TenantPage.ChannelRow(
                        tenantID: tenant.id.rawValue, id: record.id.rawValue, bundleID: record.bundleID,
                        environment: record.environment.rawValue,
                        storagePolicy: record.storagePolicy == .noMessageStored ? "no message stored" : "most recent message stored",
                        label: record.label, created: Self.timestamp(record.createdAt))
                },
                hasRows: !records.isEmpty, counts: counts, more: records.count > Self.channelLimit, bundles: tenant.broadcastBundleIDs,
                problem: nil)
        } catch {
            logger.warning(
                "console: the channels could not be read", metadata: ["herald.tenant": "\(tenant.id)", "herald.error": "\(error)"])
            return TenantPage.Channels(
                rows: [], hasRows: false, counts: [], more: false, bundles: tenant.broadcastBundleIDs,
                problem: "The store could not be read; channels are not shown.")
        }
    }

    /// `POST /console/tenants/{id}/channels` (`bundle_id`, `environment`, `storage_policy`, `label`).
    func createChannel(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let record: ChannelRecord
        do throws(ConsoleError) {
            let environment = try Self.environment(form)
            let policy: ChannelStoragePolicy
            switch try form.text("storage_policy") ?? "1" {
            case "0": policy = .noMessageStored
            case "1": policy = .mostRecentMessageStored
            default: throw ConsoleError.field("storage_policy", "is 0 or 1")
            }
            let label = try form.text("label")
            if let label, label.unicodeScalars.count > ChannelRecord.maximumLabelLength
                || label.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
            {
                throw ConsoleError.field("label", "is at most \(ChannelRecord.maximumLabelLength) characters, without control characters")
            }
            record = try await Self.channelCall {
                try await channels.create(
                    tenant: tenant.id, bundleID: try form.text("bundle_id"), environment: environment, storagePolicy: policy,
                    label: label)
            }
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        await audit.record(
            .channelCreate, tenant: tenant.id.rawValue, object: record.id.rawValue,
            details: ["environment": record.environment.rawValue, "bundle_id": record.bundleID])
        return try await tenantPage(session, id: id, notice: "Channel \(record.id) was created on APNs.")
    }

    /// `POST /console/tenants/{id}/channels/delete` (`channel`, `environment`).
    func deleteChannel(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let channel: ChannelID
        do throws(ConsoleError) {
            channel = try Self.channel(form)
            let environment = try Self.environment(form)
            _ = try await Self.channelCall { try await channels.delete(tenant: tenant.id, environment: environment, id: channel) }
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        await audit.record(.channelDelete, tenant: tenant.id.rawValue, object: channel.rawValue)
        return try await tenantPage(session, id: id, notice: "Channel \(channel) was deleted on APNs.")
    }

    /// `POST /console/tenants/{id}/channels/sync` (`environment`, `bundle_id`).
    func syncChannels(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let report: ChannelService.SyncReport
        do throws(ConsoleError) {
            let environment = try Self.environment(form)
            report = try await Self.channelCall {
                try await channels.sync(tenant: tenant.id, bundleID: try form.text("bundle_id"), environment: environment)
            }
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        await audit.record(
            .channelSync, tenant: tenant.id.rawValue, object: report.bundleID,
            details: [
                "environment": report.environment.rawValue, "added": String(report.added), "removed": String(report.removed),
            ])
        return try await tenantPage(
            session, id: id,
            notice: "APNs lists \(report.channels) channels for \(report.bundleID) in \(report.environment): \(report.added) imported, \(report.removed) dropped.")
    }

    /// `POST /console/tenants/{id}/broadcast` (`channel` as `<environment> <id>`, `event`,
    /// `content_state` JSON): one broadcast through the API's path, and APNs' answer.
    func sendTestBroadcast(_ session: ConsoleSessions.Session, id: String, form: ConsoleForm) async throws -> Response {
        let tenant = try runningTenant(id)
        let result: PushResult
        let channel: ChannelID
        let environment: APNsEnvironment
        do throws(ConsoleError) {
            let picked = try form.required("channel").split(separator: " ", maxSplits: 1).map(String.init)
            guard picked.count == 2, let parsed = APNsEnvironment(rawValue: picked[0]), let id = try? ChannelID(picked[1]) else {
                throw ConsoleError.field("channel", "names none of the tenant's channels")
            }
            (channel, environment) = (id, parsed)
            let event = try form.text("event") ?? "update"
            guard event == "update" || event == "end" else { throw ConsoleError.field("event", "is update or end") }
            var aps: [String: Any] = ["event": event, "timestamp": Int(router.configuration.clock.date.timeIntervalSince1970)]
            if let text = try form.text("content_state") {
                guard let state = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
                    throw ConsoleError.field("content_state", "is a JSON object")
                }
                aps["content-state"] = state
            }
            let payload: [UInt8]
            do {
                payload = Array(try JSONSerialization.data(withJSONObject: ["aps": aps]))
            } catch {
                throw ConsoleError.badRequest("the test broadcast could not be encoded")
            }
            let notification = HeraldCore.Notification(channel: channel, payload: payload)
            result = try await Self.channelCall {
                try await channels.broadcast(tenant: tenant.id, notification: notification, environment: environment)
            }
        } catch {
            return try await tenantPage(session, id: id, error: error)
        }
        await audit.record(
            .testBroadcast, tenant: tenant.id.rawValue, object: channel.rawValue,
            details: ["status": String(result.status), "apns_request_id": result.notificationID.rawValue])
        return try await tenantPage(
            session, id: id,
            broadcastResult: TenantPage.BroadcastResult(
                status: result.status, reason: result.reason?.wireValue, requestID: result.notificationID.rawValue,
                uniqueID: result.response.uniqueID?.rawValue, channel: channel.rawValue, environment: environment.rawValue,
                attempts: result.attempts))
    }

    private static func environment(_ form: ConsoleForm) throws(ConsoleError) -> APNsEnvironment? {
        guard let text = try form.text("environment") else { return nil }
        guard let environment = APNsEnvironment(rawValue: text) else {
            throw ConsoleError.field("environment", "is production or development")
        }
        return environment
    }

    private static func channel(_ form: ConsoleForm) throws(ConsoleError) -> ChannelID {
        do {
            return try ChannelID(try form.required("channel"))
        } catch let error as ConsoleError {
            throw error
        } catch {
            throw ConsoleError.field("channel", "is not a channel ID")
        }
    }

    /// Runs a channel call; its refusals and failures become the page's error.
    private static func channelCall<T>(_ body: () async throws -> T) async throws(ConsoleError) -> T {
        do {
            return try await body()
        } catch let error as ConsoleError {
            throw error
        } catch let error as ChannelError {
            let status: HTTPResponse.Status = error.code == .notFound ? .notFound : .unprocessableContent
            throw ConsoleError(status: status, message: error.message, field: error.field)
        } catch let error as PushError {
            throw ConsoleError(status: .unprocessableContent, message: error.description, field: error.field)
        } catch {
            throw ConsoleError(status: .serviceUnavailable, message: "the channel call failed: the store or APNs did not answer", field: nil)
        }
    }
}
