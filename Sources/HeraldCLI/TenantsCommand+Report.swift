import Foundation
import HeraldAPNs
import HeraldConfig
import HeraldCore

/// The tenants of a directory after loading and credential checks, rendered for `herald tenants`.
struct TenantReport {
    struct Valid {
        var tenant: TenantConfiguration
        var credential: CredentialSummary
    }

    enum Entry {
        case valid(Valid)
        case invalid(TenantLoadFailure)

        var file: String {
            switch self {
            case .valid(let valid): return valid.tenant.sourceFile
            case .invalid(let failure): return failure.file
            }
        }
    }

    /// Every tenant file, valid or not, in file-name order.
    var entries: [Entry]
    /// Problems that did not stop a file from loading (a key file others can read).
    var warnings: [ConfigError]
    let now: Date

    /// A certificate that expires sooner than this (seconds) is flagged.
    static let expiryWarning: TimeInterval = 30 * 24 * 3600

    /// - Parameter plugins: a later check of a tenant whose credential loads (its plugins built
    /// from their options), returning the field and message of what is wrong; nil: none.
    init(
        load: TenantDirectoryLoad, clock: any WallClock,
        plugins: ((TenantConfiguration) -> (field: String, message: String)?)? = nil
    ) {
        now = clock.now
        warnings = load.warnings
        var summaries: [TenantID: CredentialSummary] = [:]
        let checked = load.checking { tenant in
            do {
                summaries[tenant.id] = try CredentialProviders.make(for: tenant, clock: clock).summary
                return plugins?(tenant)
            } catch let error as CredentialError {
                return (error.field, error.message)
            } catch {
                let field = tenant.auth.kind == .token ? "auth.token" : "auth.certificate"
                return (field, "the credential cannot be loaded: \(error)")
            }
        }
        var entries: [Entry] = checked.failures.map(Entry.invalid)
        for tenant in checked.tenants {
            guard let summary = summaries[tenant.id] else { continue }
            entries.append(.valid(Valid(tenant: tenant, credential: summary)))
        }
        self.entries = entries.sorted { $0.file < $1.file }
    }

    var validCount: Int { entries.filter { if case .valid = $0 { true } else { false } }.count }
    var invalidCount: Int { entries.count - validCount }
    /// True when there is at least one tenant and every tenant is valid.
    var allValid: Bool { !entries.isEmpty && invalidCount == 0 }

    // MARK: validate

    func validationText(source: String) -> String {
        var out = ""
        for entry in entries {
            switch entry {
            case .valid(let valid):
                let tenant = valid.tenant
                out += "ok       \(tenant.id)  \(tenant.sourceFile)\n"
                for (label, value) in details(valid) {
                    out += "  " + label.padding(toLength: 13, withPad: " ", startingAt: 0) + value + "\n"
                }
                for warning in warnings where warning.location.file == tenant.sourceFile {
                    out += "  warning: \(warning)\n"
                }
            case .invalid(let failure):
                let id = failure.tenantID.map { " (id \($0))" } ?? ""
                out += "INVALID  \(failure.file)\(id)\n"
                for error in failure.errors {
                    out += "  \(error)\n"
                }
            }
        }
        if entries.isEmpty {
            out += "no tenant files (*.yaml, *.yml) in \(source)\n"
        } else {
            out +=
                "\n\(validCount) valid, \(invalidCount) invalid (\(entries.count) tenant file\(entries.count == 1 ? "" : "s") in \(source))\n"
        }
        return out
    }

    private func details(_ valid: Valid) -> [(String, String)] {
        let tenant = valid.tenant
        let credential = valid.credential
        var lines: [(String, String)] = []
        switch tenant.auth {
        case .token(let token) where token.keys.count > 1:
            lines.append(("auth", "token, team \(tenant.teamID), \(token.keys.count) keys, the first that fits signs a send"))
            for key in token.keys {
                lines.append(("", "key ID \(key.keyID) (\(key.restrictionText)), key from \(key.privateKey.origin)"))
            }
        case .token(let token):
            let restriction = token.isRestricted ? " (\(token.keys.first?.restrictionText ?? ""))" : ""
            lines.append(
                ("auth", "token, key ID \(token.keyID)\(restriction), team \(tenant.teamID), key from \(token.privateKey.origin)"))
        case .certificate(let certificate):
            var text = "certificate, team \(tenant.teamID), from \(certificate.origin)"
            if let subject = credential.certificateSubject { text += "\n" + indent + "subject \(subject)" }
            if let notAfter = credential.notAfter {
                text += "\n" + indent + "expires \(notAfter.ISO8601Format()) (\(relative(notAfter)))"
            }
            lines.append(("auth", text))
            if let topics = credential.certificateTopics {
                lines.append(("cert topics", topics.joined(separator: ", ")))
            }
            if let notAfter = credential.notAfter, notAfter.timeIntervalSince(now) < Self.expiryWarning {
                lines.append(("WARNING", "the certificate expires \(relative(notAfter)); renew it"))
            }
        }
        lines.append(("topics", tenant.topics.joined(separator: ", ")))
        lines.append(("endpoints", endpointsText(tenant.endpoints)))
        if let origin = tenant.endpoints.trustRootsOrigin { lines.append(("trust", "extra CA from \(origin)")) }
        if tenant.pool != PoolConfiguration() {
            let pool = tenant.pool
            lines.append(
                (
                    "pool",
                    "\(pool.connections) connections, \(pool.maxQueued) queued, request timeout \(seconds(pool.requestTimeout)), "
                        + "idle timeout \(seconds(pool.idleTimeout)), ping every \(seconds(pool.pingInterval))"
                        + (pool.openNextAt > 0 ? ", next connection at \(pool.openNextAt) in flight each" : "")
                        + (pool.maxStreams < 1000 ? ", at most \(pool.maxStreams) streams a connection" : "")
                ))
        }
        if !tenant.plugins.isEmpty { lines.append(("plugins", tenant.plugins.map(\.name).joined(separator: ", "))) }
        if let webhook = tenant.webhook { lines.append(("webhook", "\(webhook.url), signed with the secret from \(webhook.secret.origin)")) }
        if !tenant.apiKeys.isEmpty { lines.append(("api keys", tenant.apiKeys.map(\.name).joined(separator: ", "))) }
        return lines
    }

    private var indent: String { String(repeating: " ", count: 15) }

    private func endpointsText(_ endpoints: EndpointsConfiguration) -> String {
        APNsEnvironment.allCases.reversed().compactMap { environment -> String? in
            guard let endpoint = endpoints.endpoint(for: environment) else { return nil }
            let mark = environment == endpoints.defaultEnvironment ? " (default)" : ""
            return "\(environment) \(endpoint.url)\(mark)"
        }.joined(separator: ", ")
    }

    private func relative(_ date: Date) -> String {
        let days = Int((date.timeIntervalSince(now) / 86_400).rounded(.down))
        if date < now { return "EXPIRED" }
        return days == 0 ? "in less than a day" : "in \(days) day\(days == 1 ? "" : "s")"
    }

    private func seconds(_ value: Double) -> String {
        value.rounded() == value ? "\(Int(value))s" : "\(value)s"
    }

    // MARK: list

    func tableText() -> String {
        var rows: [[String]] = [["ID", "STATUS", "AUTH", "KEY ID / CERT EXPIRY", "TOPICS", "DEFAULT", "FILE"]]
        for entry in entries {
            switch entry {
            case .valid(let valid):
                let tenant = valid.tenant
                let credential: String
                switch tenant.auth {
                case .token(let token): credential = token.keys.map(\.keyID).joined(separator: ",")
                case .certificate:
                    credential =
                        valid.credential.notAfter.map { "until " + $0.ISO8601Format(.iso8601.year().month().day()) }
                        ?? "-"
                }
                rows.append([
                    tenant.id.rawValue, "valid", tenant.auth.kind.rawValue, credential,
                    tenant.topics.joined(separator: ","), tenant.endpoints.defaultEnvironment.rawValue,
                    tenant.sourceFile,
                ])
            case .invalid(let failure):
                let count = failure.errors.count
                rows.append([
                    failure.tenantID?.rawValue ?? "-", "INVALID", "-", "\(count) error\(count == 1 ? "" : "s")", "-",
                    "-",
                    failure.file,
                ])
            }
        }
        let widths = (0..<rows[0].count).map { column in rows.map { $0[column].count }.max() ?? 0 }
        var out = ""
        for row in rows {
            let cells = row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }
            out += cells.joined(separator: "  ") + "\n"
        }
        if invalidCount > 0 {
            out +=
                "\n\(invalidCount) invalid tenant file\(invalidCount == 1 ? "" : "s"); run `herald tenants validate` for the errors\n"
        }
        return out
    }

    /// The tenants as a JSON array (secrets never included: key origins, not keys; API key names, not hashes).
    func jsonText() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.dateEncodingStrategy = .iso8601
        let items = entries.map(JSONTenant.init)
        return String(decoding: try encoder.encode(items), as: UTF8.self)
    }
}

/// One element of `herald tenants list --json`.
struct JSONTenant: Encodable {
    struct Auth: Encodable {
        var kind: String
        var teamId: String
        var keyId: String?
        var keyOrigin: String?
        var certificateOrigin: String?
        var certificateSubject: String?
        var certificateNotAfter: Date?
        var certificateTopics: [String]?
    }

    struct Endpoints: Encodable {
        var production: String?
        var development: String?
        var `default`: String
        var caFile: String?
    }

    struct Pool: Encodable {
        var connections: Int
        var maxQueued: Int
        var requestTimeout: Double
        var idleTimeout: Double
        var pingInterval: Double
        var openNextAt: Int
        var maxStreams: Int
    }

    struct Error: Encodable {
        var file: String
        var line: Int
        var column: Int
        var field: String
        var message: String
        var description: String
    }

    var id: String?
    var file: String
    var valid: Bool
    var auth: Auth?
    var topics: [String]?
    var endpoints: Endpoints?
    var pool: Pool?
    var plugins: [String]?
    var apiKeys: [String]?
    var errors: [Error]?

    init(_ entry: TenantReport.Entry) {
        switch entry {
        case .valid(let valid):
            let tenant = valid.tenant
            let summary = valid.credential
            id = tenant.id.rawValue
            file = tenant.sourceFile
            self.valid = true
            switch tenant.auth {
            case .token(let token):
                auth = Auth(
                    kind: "token", teamId: tenant.teamID, keyId: token.keyID, keyOrigin: token.privateKey.origin)
            case .certificate(let certificate):
                auth = Auth(
                    kind: "certificate", teamId: tenant.teamID, certificateOrigin: certificate.origin,
                    certificateSubject: summary.certificateSubject, certificateNotAfter: summary.notAfter,
                    certificateTopics: summary.certificateTopics)
            }
            topics = tenant.topics
            endpoints = Endpoints(
                production: tenant.endpoints.production?.url, development: tenant.endpoints.development?.url,
                default: tenant.endpoints.defaultEnvironment.rawValue, caFile: tenant.endpoints.trustRootsOrigin)
            let p = tenant.pool
            pool = Pool(
                connections: p.connections, maxQueued: p.maxQueued, requestTimeout: p.requestTimeout,
                idleTimeout: p.idleTimeout, pingInterval: p.pingInterval, openNextAt: p.openNextAt,
                maxStreams: p.maxStreams)
            plugins = tenant.plugins.map(\.name)
            apiKeys = tenant.apiKeys.map(\.name)
        case .invalid(let failure):
            id = failure.tenantID?.rawValue
            file = failure.file
            valid = false
            errors = failure.errors.map {
                Error(
                    file: $0.location.file, line: $0.location.line, column: $0.location.column, field: $0.field,
                    message: $0.message, description: $0.description)
            }
        }
    }
}
