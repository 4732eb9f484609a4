import ArgumentParser
import Foundation
import HeraldAPNs
import HeraldConfig
import HeraldCore
import Logging

/// `herald send`: one notification to APNs for one tenant, and APNs' answer.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send one notification for a tenant and print APNs' answer.",
        discussion: """
            Exit status: 0 when APNs accepted it (200), 1 when APNs rejected it or gave no answer \
            (the reason is printed), 2 on a local validation or configuration error (nothing was sent).

              herald send --tenants tenants --tenant demo-token --device 00fc13ad… --alert "Hello"
            """)

    @Option(help: "The tenants directory.")
    var tenants: String = "tenants"

    @Option(help: "The tenant's ID.")
    var tenant: String

    @Option(help: "The device token (hex).")
    var device: String

    @Option(help: "apns-topic (default: the tenant's first topic that suits the push type).")
    var topic: String?

    @Option(name: .customLong("push-type"), help: "apns-push-type: alert, background, voip, … (default: alert).")
    var pushType: String = "alert"

    @Option(help: "apns-priority: 10, 5 or 1 (default: APNs' own, 10).")
    var priority: Int?

    @Option(help: "apns-expiration: 0, or a UNIX time in seconds.")
    var expiration: String?

    @Option(name: .customLong("collapse-id"), help: "apns-collapse-id (at most 64 bytes).")
    var collapseID: String?

    @Option(name: .customLong("apns-id"), help: "apns-id (a UUID; default: a new one).")
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

    @Flag(help: "Print the outcome as JSON.")
    var json = false

    @Flag(help: "Log the connection's progress to standard error.")
    var verbose = false

    func validate() throws {
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
        let transport: TenantTransport
        do {
            let credentials = try CredentialProviders.make(for: tenantConfiguration, clock: SystemWallClock())
            transport = try TenantTransport(tenant: tenantConfiguration, credentials: credentials, logger: logger)
        } catch {
            CLIFailure("\(tenantConfiguration.sourceFile): \(error)").print()
            throw ExitStatus.invalid
        }

        let outcome: SendOutcome
        do {
            let response: APNsResponse
            if let timeout {
                response = try await transport.send(notification, environment: environment, deadline: ContinuousClock.now + .milliseconds(Int64(timeout * 1000)))
            } else {
                response = try await transport.send(notification, environment: environment)
            }
            outcome = .response(response)
        } catch let error as APNsTransportError {
            outcome = .noAnswer(error)
        } catch {
            outcome = .noAnswer(APNsTransportError.protocolError("\(error)", mayHaveBeenProcessed: true))
        }
        await transport.close()

        print(json ? outcome.json(apnsID: notification.id) : outcome.text(apnsID: notification.id))
        switch outcome {
        case .response(let response) where response.status == 200:
            return
        case .noAnswer(let error) where error.isTopicNotAllowed:
            throw ExitStatus.invalid
        default:
            throw ExitStatus.rejected
        }
    }

    /// Loads the tenant and builds the notification; every problem is a ``CLIFailure``.
    func prepare() throws -> (TenantConfiguration, HeraldCore.Notification, APNsEnvironment?) {
        let tenantConfiguration = try CLITenants.load(directory: tenants, id: tenant)

        let token: DeviceToken
        do { token = try DeviceToken(hex: device) } catch { throw CLIFailure("--device: \(error.message)") }
        guard let type = PushType(rawValue: pushType) else {
            throw CLIFailure("--push-type: '\(pushType)' is not one of \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var note = HeraldCore.Notification(deviceToken: token, pushType: type, payload: try payloadBytes())
        if let priority {
            do { note.priority = try Priority(value: priority) } catch { throw CLIFailure("--priority: \(error.message)") }
        }
        if let expiration {
            do { note.expiration = try Expiration(headerValue: expiration) } catch { throw CLIFailure("--expiration: \(error.message)") }
        }
        note.collapseID = collapseID
        if let apnsID {
            do { note.id = try NotificationID(apnsID) } catch { throw CLIFailure("--apns-id: \(error.message)") }
        } else {
            note.id = NotificationID.random()
        }
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
        do {
            try note.validate(requireTopic: tenantConfiguration.auth.kind == .token)
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
    case noAnswer(APNsTransportError)

    func text(apnsID: NotificationID?) -> String {
        switch self {
        case .response(let response):
            var lines = ["status: \(response.status)", "apns-id: \(response.apnsID?.rawValue ?? apnsID?.rawValue ?? "-")"]
            if let reason = response.reason { lines.append("reason: \(reason.wireValue)") }
            if let timestamp = response.timestamp {
                lines.append("timestamp: \(Int64((timestamp.timeIntervalSince1970 * 1000).rounded())) (\(ISO8601DateFormatter().string(from: timestamp)))")
            }
            return lines.joined(separator: "\n")
        case .noAnswer(let error):
            return [
                "status: none (no answer from APNs)", "apns-id: \(apnsID?.rawValue ?? "-")", "error: \(error)",
                "may have been processed: \(error.mayHaveBeenProcessed ? "yes" : "no")",
            ].joined(separator: "\n")
        }
    }

    func json(apnsID: NotificationID?) -> String {
        var members: [(String, JSONValue)] = []
        switch self {
        case .response(let response):
            members.append(("status", .int(Int64(response.status))))
            members.append(("apns_id", (response.apnsID ?? apnsID).map { .string($0.rawValue) } ?? .null))
            members.append(("reason", response.reason.map { .string($0.wireValue) } ?? .null))
            members.append(("timestamp", response.timestamp.map { .int(Int64(($0.timeIntervalSince1970 * 1000).rounded())) } ?? .null))
        case .noAnswer(let error):
            members.append(("status", .null))
            members.append(("apns_id", apnsID.map { .string($0.rawValue) } ?? .null))
            members.append(("error", .string(error.metricLabel)))
            members.append(("message", .string(error.description)))
            members.append(("may_have_been_processed", .bool(error.mayHaveBeenProcessed)))
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
