import ArgumentParser
import Foundation
import Herald
import HeraldAPNs
import HeraldConfig
import HeraldCore
import HeraldStore
import Logging

/// `herald send`: one notification (to a device, or a broadcast on a channel) to APNs for one
/// tenant, and APNs' answer.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send one notification for a tenant and print APNs' answer.",
        discussion: """
            Exit status: 0 when APNs accepted it (200), 1 when APNs rejected it or gave no answer \
            (the reason is printed), 2 on a local validation or configuration error (nothing was sent).

            It goes through the tenant's runtime like every other send (its plugins, the retry, its \
            transport), with the store in --data (the provider token `herald serve` shares).

              herald send --tenants tenants --tenant demo-token --device 00fc13ad… --alert "Hello"

            With --channel instead of --device it is a broadcast (a Live Activity update to every \
            device on the channel; APNs checks the channel and its storage policy):

              herald send --tenant demo-token --channel dHN0LXNyY2gtY2hubA== \\
                --payload '{"aps":{"event":"update","timestamp":1764460800,"content-state":{"score":"1-0"}}}'
            """)

    @Option(help: "The tenants directory.")
    var tenants: String = "tenants"

    @Option(help: "The tenant's ID.")
    var tenant: String

    @Option(help: "The device token (hex).")
    var device: String?

    @Option(help: "A broadcast channel's ID (base64), instead of --device: a broadcast on that channel.")
    var channel: String?

    @Option(
        help:
            "apns-topic (default: the tenant's first topic that suits the push type); with --channel the app's bundle ID (default: the tenant's only one).")
    var topic: String?

    @Option(
        name: .customLong("push-type"),
        help: "apns-push-type: alert, background, voip, … (default: alert; liveactivity with --channel).")
    var pushType: String?

    @Option(help: "apns-priority: 10, 5 or 1 (default: APNs' own, 10).")
    var priority: Int?

    @Option(help: "apns-expiration: 0, or a UNIX time in seconds.")
    var expiration: String?

    @Option(name: .customLong("collapse-id"), help: "apns-collapse-id (at most 64 bytes).")
    var collapseID: String?

    @Option(
        name: .customLong("apns-id"),
        help: "apns-id, or a broadcast's apns-request-id (a UUID; default: a new one, made by the router).")
    var apnsID: String?

    @Option(help: "production or development (default: the tenant's default).")
    var environment: String?

    @Option(help: "The alert text: sends {\"aps\":{\"alert\":TEXT}}.")
    var alert: String?

    @Option(help: "The payload, as JSON text.")
    var payload: String?

    @Option(name: .customLong("payload-file"), help: "A file holding the JSON payload.")
    var payloadFile: String?

    @Option(help: "Give up after this many seconds (default: the tenant's request timeout).")
    var timeout: Double?

    @Option(help: "The data directory of the store (the provider token shared with `herald serve`, invalid tokens).")
    var data: String = "data"

    @Flag(help: "Print the outcome as JSON.")
    var json = false

    @Flag(help: "Log the connection's progress to standard error.")
    var verbose = false

    func validate() throws {
        guard (device == nil) != (channel == nil) else { throw ValidationError("give exactly one of --device and --channel") }
        if let timeout, !(timeout.isFinite && timeout > 0 && timeout <= 86_400) {
            throw ValidationError("--timeout must be more than 0 and at most 86400 seconds")
        }
    }

    func run() async throws {
        let prepared: (TenantConfiguration, HeraldCore.Notification, APNsEnvironment?)
        do {
            prepared = try prepare()
        } catch let failure as CLIFailure {
            failure.print()
            throw ExitStatus.invalid
        }
        let (tenantConfiguration, notification, environment) = prepared

        var logger = Logger(label: "herald.send")
        logger.logLevel = verbose ? .debug : .error
        // The same path as every other send: the tenant's runtime (its plugins, retry and
        // transport) in a router, over the store `herald serve` uses (the provider token it
        // shares, the tokens APNs reported invalid).
        let store: SQLitePushStore
        do {
            store = try SQLitePushStore(directory: data)
        } catch {
            CLIFailure("--data: \(error)").print()
            throw ExitStatus.invalid
        }
        var transports = APNsTransportProvider()
        transports.tokenStore = store
        let router = Router(configuration: RouterConfiguration(store: store, transports: transports, logger: logger))
        let report = await router.install([tenantConfiguration])
        if let failure = report.failures.first {
            CLIFailure("\(tenantConfiguration.sourceFile): \(failure.message)").print()
            throw ExitStatus.invalid
        }

        let outcome: SendOutcome
        // The caller's --apns-id, or the one the router gave the send (known once it is answered).
        var apnsID = notification.id
        do {
            let seconds = timeout ?? tenantConfiguration.pool.requestTimeout
            let deadline = PushInstant.now + .milliseconds(Int64(min(max(seconds, 0.001), 86_400) * 1000))
            let result = try await router.send(
                tenant: tenantConfiguration.id, notification: notification, environment: environment, deadline: deadline)
            apnsID = result.notificationID
            outcome = .response(result.response)
        } catch let error as PushError {
            outcome = .noAnswer(error)
        } catch {
            outcome = .noAnswer(PushError.transport("\(error)", surelyNotProcessed: false))
        }
        await router.shutdown()

        let idName = notification.isBroadcast ? "apns-request-id" : "apns-id"
        print(json ? outcome.json(apnsID: apnsID, idName: idName) : outcome.text(apnsID: apnsID, idName: idName))
        switch outcome {
        case .response(let response) where response.status == 200:
            return
        case .noAnswer(let error) where SendOutcome.isLocalRefusal(error):
            throw ExitStatus.invalid
        default:
            throw ExitStatus.rejected
        }
    }

    /// Loads the tenant and builds the notification; every problem is a ``CLIFailure``.
    func prepare() throws -> (TenantConfiguration, HeraldCore.Notification, APNsEnvironment?) {
        let tenantConfiguration = try CLITenants.load(directory: tenants, id: tenant)

        var note: HeraldCore.Notification
        if let channel {
            note = try broadcast(channel, tenant: tenantConfiguration)
        } else {
            note = try deviceNotification(tenant: tenantConfiguration)
        }
        do {
            try note.validate(requireTopic: tenantConfiguration.auth.kind == .token || note.isBroadcast)
        } catch {
            throw CLIFailure("\(error.field): \(error.message) (APNs would answer \(error.reason.wireValue))")
        }

        var environment: APNsEnvironment? = nil
        if let name = self.environment {
            guard let parsed = APNsEnvironment(rawValue: name) else {
                throw CLIFailure("--environment: '\(name)' must be production or development")
            }
            guard tenantConfiguration.endpoints.endpoint(for: parsed) != nil else {
                throw CLIFailure("--environment: tenant '\(tenant)' has no \(parsed) endpoint")
            }
            environment = parsed
        }
        return (tenantConfiguration, note, environment)
    }

    /// The notification to `--device`, with its headers.
    private func deviceNotification(tenant tenantConfiguration: TenantConfiguration) throws -> HeraldCore.Notification {
        let token: DeviceToken
        do { token = try DeviceToken(hex: device ?? "") } catch { throw CLIFailure("--device: \(error.message)") }
        let name = pushType ?? PushType.alert.rawValue
        guard let type = PushType(rawValue: name) else {
            throw CLIFailure("--push-type: '\(name)' is not one of \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var note = HeraldCore.Notification(deviceToken: token, pushType: type, payload: try payloadBytes())
        try applyHeaders(&note)
        note.collapseID = collapseID
        if let topic {
            guard tenantConfiguration.allows(topic: topic) else {
                throw CLIFailure("--topic: '\(topic)' is not one of tenant '\(tenant)''s topics (\(tenantConfiguration.topics.joined(separator: ", ")))")
            }
            note.topic = topic
        } else {
            note.topic = tenantConfiguration.topics.first { type.agrees(withTopic: $0) } ?? tenantConfiguration.topics.first
        }
        if let topic = note.topic, !type.agrees(withTopic: topic) {
            throw CLIFailure("--push-type: \(type.rawValue) notifications need a topic ending in \(type.requiredTopicSuffix ?? "no push-type suffix"), not '\(topic)'")
        }
        return note
    }

    /// A broadcast on `--channel`: push type liveactivity, the app's bundle ID as its topic,
    /// priority 10 and expiration 0 unless given.
    private func broadcast(_ channel: String, tenant tenantConfiguration: TenantConfiguration) throws -> HeraldCore.Notification {
        let id: ChannelID
        do { id = try ChannelID(channel) } catch { throw CLIFailure("--channel: \(error.message)") }
        if let pushType, pushType != PushType.liveactivity.rawValue {
            throw CLIFailure("--push-type: a broadcast's push type is liveactivity, not '\(pushType)'")
        }
        if collapseID != nil { throw CLIFailure("--collapse-id: a broadcast takes no collapse ID") }
        var note = HeraldCore.Notification(channel: id, payload: try payloadBytes())
        try applyHeaders(&note)
        note.priority = note.priority ?? .immediate
        note.expiration = note.expiration ?? .immediately
        let bundles = tenantConfiguration.broadcastBundleIDs
        if let topic {
            guard bundles.contains(topic) else {
                throw CLIFailure("--topic: '\(topic)' is not a bundle ID tenant '\(tenant)' may broadcast to (\(bundles.joined(separator: ", ")))")
            }
            note.topic = topic
        } else {
            guard bundles.count == 1 else {
                throw CLIFailure("--topic: name the bundle ID to broadcast to (\(bundles.isEmpty ? "tenant '\(tenant)' has none" : bundles.joined(separator: ", ")))")
            }
            note.topic = bundles[0]
        }
        return note
    }

    /// --priority, --expiration and --apns-id.
    private func applyHeaders(_ note: inout HeraldCore.Notification) throws {
        if let priority {
            do { note.priority = try Priority(value: priority) } catch { throw CLIFailure("--priority: \(error.message)") }
        }
        if let expiration {
            do { note.expiration = try Expiration(headerValue: expiration) } catch { throw CLIFailure("--expiration: \(error.message)") }
        }
        if let apnsID {
            do { note.id = try NotificationID(apnsID) } catch { throw CLIFailure("--apns-id: \(error.message)") }
        }
    }

    private func payloadBytes() throws -> [UInt8] {
        let given = [alert != nil, payload != nil, payloadFile != nil].filter { $0 }.count
        guard given == 1 else { throw CLIFailure("give exactly one of --alert, --payload and --payload-file") }
        if let alert {
            return Payload(aps: APS(alert: .text(alert))).encoded()
        }
        let bytes: [UInt8]
        let source: String
        if let payload {
            bytes = Array(payload.utf8)
            source = "--payload"
        } else {
            let path = payloadFile!
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CLIFailure("--payload-file: \(path) cannot be read")
            }
            bytes = Array(data)
            source = path
        }
        do {
            return try Payload(rawJSON: bytes).encoded()
        } catch {
            throw CLIFailure("\(source): \(error.message)")
        }
    }
}

/// The answer to `herald send`, for printing.
enum SendOutcome {
    case response(APNsResponse)
    case noAnswer(PushError)

    /// Refusals of the notification itself by Herald's checks (nothing was sent).
    static func isLocalRefusal(_ error: PushError) -> Bool {
        let local: [PushError.Code] = [
            .invalidNotification, .topicDisallowed, .pushTypeMismatch, .environmentUnavailable, .unknownTenant, .noSigningKey,
        ]
        return local.contains(error.code)
    }

    /// `idName`: the header the ID went in (`apns-id`, or a broadcast's `apns-request-id`).
    func text(apnsID: NotificationID?, idName: String = "apns-id") -> String {
        switch self {
        case .response(let response):
            var lines = ["status: \(response.status)", "\(idName): \(response.apnsID?.rawValue ?? apnsID?.rawValue ?? "-")"]
            if let uniqueID = response.uniqueID { lines.append("apns-unique-id: \(uniqueID)") }
            if let reason = response.reason { lines.append("reason: \(reason.wireValue)") }
            if let timestamp = response.timestamp {
                lines.append("timestamp: \(Int64((timestamp.timeIntervalSince1970 * 1000).rounded())) (\(ISO8601DateFormatter().string(from: timestamp)))")
            }
            return lines.joined(separator: "\n")
        case .noAnswer(let error):
            return [
                "status: none (no answer from APNs)", "\(idName): \(apnsID?.rawValue ?? "-")", "error: \(error)",
                "may have been processed: \(error.mayHaveReachedAPNs ? "yes" : "no")",
            ].joined(separator: "\n")
        }
    }

    func json(apnsID: NotificationID?, idName: String = "apns-id") -> String {
        var members: [(String, JSONValue)] = []
        let idKey = idName.replacingOccurrences(of: "-", with: "_")
        switch self {
        case .response(let response):
            members.append(("status", .int(Int64(response.status))))
            members.append((idKey, (response.apnsID ?? apnsID).map { .string($0.rawValue) } ?? .null))
            members.append(("apns_unique_id", response.uniqueID.map { .string($0.rawValue) } ?? .null))
            members.append(("reason", response.reason.map { .string($0.wireValue) } ?? .null))
            members.append(("timestamp", response.timestamp.map { .int(Int64(($0.timeIntervalSince1970 * 1000).rounded())) } ?? .null))
        case .noAnswer(let error):
            members.append(("status", .null))
            members.append((idKey, apnsID.map { .string($0.rawValue) } ?? .null))
            members.append(("error", .string(error.code.description)))
            members.append(("message", .string(error.description)))
            members.append(("may_have_been_processed", .bool(error.mayHaveReachedAPNs)))
        }
        return JSONValue.object(members).jsonText
    }
}

/// A local problem: printed to standard error, nothing is sent.
struct CLIFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }

    func print() {
        FileHandle.standardError.write(Data("herald: \(description)\n".utf8))
    }
}

/// Loading one tenant for the commands that act as that tenant.
enum CLITenants {
    /// The tenant `id` from `directory`, or a failure naming the file, line and field.
    static func load(directory: String, id: String) throws -> TenantConfiguration {
        let load: TenantDirectoryLoad
        do {
            load = try TenantLoader().loadDirectory(directory)
        } catch {
            throw CLIFailure("\(error)")
        }
        if let tenant = load.tenants.first(where: { $0.id.rawValue == id }) {
            return tenant
        }
        if let failure = load.failures.first(where: { $0.tenantID?.rawValue == id }) {
            throw CLIFailure("tenant '\(id)' does not load:\n\(failure)")
        }
        let known = load.tenants.map(\.id.rawValue).sorted().joined(separator: ", ")
        throw CLIFailure("no tenant '\(id)' in \(directory) (tenants: \(known.isEmpty ? "none" : known))")
    }
}
