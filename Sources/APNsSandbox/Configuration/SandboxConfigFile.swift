import Crypto
import Foundation
import HeraldCore
import Yams

/// `config/sandbox.yaml`: the sandbox's configuration file (documented in docs/configuration.md).
///
/// Relative paths are resolved against the file's own directory.
public struct SandboxConfigFile: Sendable {
    /// The configuration to start with.
    public var configuration: SandboxConfiguration
    /// Where the CA certificate clients should trust is (or was written).
    public var caCertificatePath: String?
    /// The file the CA certificate should be written to at start, when it was generated.
    public var writeCATo: String?

    /// Reads and checks a sandbox configuration file.
    public static func load(path: String) throws -> SandboxConfigFile {
        let url = URL(fileURLWithPath: path)
        let text: String
        do {
            text = try String(contentsOf: url, encoding: .utf8)
        } catch {
            throw SandboxError.configuration("cannot read \(path): \(error.localizedDescription)")
        }
        return try parse(text, baseDirectory: url.deletingLastPathComponent(), name: path)
    }

    /// Parses configuration text; `baseDirectory` resolves the relative paths in it.
    public static func parse(_ text: String, baseDirectory: URL, name: String = "sandbox.yaml") throws -> SandboxConfigFile {
        let raw: Raw
        do {
            raw = try YAMLDecoder().decode(Raw.self, from: text)
        } catch let error as DecodingError {
            throw SandboxError.configuration("\(name): \(Self.describe(error))")
        } catch {
            throw SandboxError.configuration("\(name): \(error)")
        }
        func resolve(_ path: String) -> String {
            path.hasPrefix("/") ? path : baseDirectory.appendingPathComponent(path).standardizedFileURL.path
        }
        func read(_ path: String, field: String) throws -> String {
            do {
                return try String(contentsOfFile: resolve(path), encoding: .utf8)
            } catch {
                throw SandboxError.configuration("\(name): \(field): cannot read \(resolve(path))")
            }
        }

        // TLS: a CA from files, or a fresh one.
        let ca: SandboxCertificateAuthority
        var caPath: String? = nil
        switch (raw.tls?.caCertificate, raw.tls?.caPrivateKey) {
        case (let cert?, let key?):
            do {
                ca = try SandboxCertificateAuthority(
                    certificatePEM: try read(cert, field: "tls.ca_certificate"),
                    privateKeyPEM: try read(key, field: "tls.ca_private_key"))
            } catch let error as SandboxError {
                throw error
            } catch {
                throw SandboxError.configuration("\(name): tls: the CA certificate or key is not usable: \(error)")
            }
            caPath = resolve(cert)
        case (nil, nil):
            ca = try SandboxCertificateAuthority.generate()
        default:
            throw SandboxError.configuration("\(name): tls: give both ca_certificate and ca_private_key, or neither")
        }

        var configuration = SandboxConfiguration(certificateAuthority: ca)
        if let environment = raw.environment {
            guard let value = APNsEnvironment(rawValue: environment) else {
                throw SandboxError.configuration("\(name): environment: development or production, got '\(environment)'")
            }
            configuration.environment = value
        }
        if let listen = raw.listen {
            if let host = listen.host { configuration.host = host }
            if let port = listen.port {
                guard (0...65_535).contains(port) else {
                    throw SandboxError.configuration("\(name): listen.port: \(port) is not a port number")
                }
                configuration.port = port
            }
            if let port = listen.channelsPort {
                guard (0...65_535).contains(port) else {
                    throw SandboxError.configuration("\(name): listen.channels_port: \(port) is not a port number")
                }
                configuration.channelsPort = port
            }
        }
        if let broadcasts = raw.broadcasts {
            if let limit = broadcasts.channelsPerApp {
                guard (0...1_000_000).contains(limit) else {
                    throw SandboxError.configuration("\(name): broadcasts.channels_per_app: from 0 to 1,000,000")
                }
                configuration.channelsPerApp = limit
            }
            configuration.broadcastDisabledTopics = Set(broadcasts.disabledTopics ?? [])
        }
        if let directory = raw.stateDirectory {
            configuration.stateDirectory = URL(fileURLWithPath: resolve(directory), isDirectory: true)
        }

        for (i, key) in (raw.tokenKeys ?? []).enumerated() {
            let field = "token_keys[\(i)]"
            guard key.teamID.utf8.count == 10, key.keyID.utf8.count == 10 else {
                throw SandboxError.configuration("\(name): \(field): team_id and key_id must be 10 characters")
            }
            let publicKey: P256.Signing.PublicKey
            do {
                if let path = key.publicKey {
                    publicKey = try P256.Signing.PublicKey(
                        pemRepresentation: SandboxPEM.firstBlock(in: try read(path, field: field + ".public_key")))
                } else if let path = key.privateKey {
                    publicKey = try P256.Signing.PrivateKey(
                        pemRepresentation: SandboxPEM.firstBlock(in: try read(path, field: field + ".private_key"))
                    ).publicKey
                } else {
                    throw SandboxError.configuration("\(name): \(field): give public_key (or private_key)")
                }
            } catch let error as SandboxError {
                throw error
            } catch {
                throw SandboxError.configuration("\(name): \(field): not a P-256 key in PEM")
            }
            guard !key.topics.isEmpty else {
                throw SandboxError.configuration("\(name): \(field).topics: list at least one topic")
            }
            var environment: APNsEnvironment? = nil
            if let text = key.environment {
                guard let parsed = APNsEnvironment(rawValue: text) else {
                    throw SandboxError.configuration("\(name): \(field).environment: development or production, got '\(text)'")
                }
                environment = parsed
            }
            configuration.tokenKeys.append(
                SandboxTokenKey(
                    teamID: key.teamID, keyID: key.keyID, publicKey: publicKey, topics: key.topics, environment: environment))
        }

        if let limits = raw.limits {
            if let n = limits.maxConcurrentStreams {
                guard n >= 1 else {
                    throw SandboxError.configuration("\(name): limits.max_concurrent_streams must be at least 1")
                }
                configuration.maxConcurrentStreams = n
            }
            if let seconds = limits.tokenUpdateMinInterval { configuration.tokenUpdateMinimumInterval = seconds }
            if let scope = limits.tokenUpdateScope {
                guard let value = SandboxTokenUpdateScope(rawValue: scope) else {
                    throw SandboxError.configuration("\(name): limits.token_update_scope must be key, connection or strict")
                }
                configuration.tokenUpdateScope = value
            }
            if let seconds = limits.tokenLifetime { configuration.tokenLifetime = seconds }
            if let drop = limits.dropStreamLimitAfterRejection { configuration.dropStreamLimitAfterRejection = drop }
            configuration.deviceRequestsPerSecond = limits.deviceRequestsPerSecond
            if let size = limits.maxHeaderListSize { configuration.maximumHeaderListSize = size }
        }

        for (i, device) in (raw.devices ?? []).enumerated() {
            let field = "devices[\(i)]"
            guard case .ok = SandboxRules.deviceToken(fromPath: SandboxRules.devicePathPrefix + device.token) else {
                throw SandboxError.configuration("\(name): \(field).token: not a hex device token")
            }
            switch (device.unregisteredSince, device.expiredSince, device.topic) {
            case (let since?, nil, nil), (nil, let since?, nil):
                let key = device.unregisteredSince != nil ? "unregistered_since" : "expired_since"
                guard let date = Self.date(since) else {
                    throw SandboxError.configuration("\(name): \(field).\(key): an ISO 8601 date or UNIX milliseconds")
                }
                configuration.devices.append(
                    device.unregisteredSince != nil ? .unregistered(device.token, since: date) : .expired(device.token, since: date))
            case (nil, nil, let topic?):
                configuration.devices.append(.bound(device.token, topic: topic))
            default:
                throw SandboxError.configuration("\(name): \(field): give one of unregistered_since, expired_since or topic")
            }
        }

        if let faults = raw.faults {
            var value = SandboxFaults()
            value.seed = faults.seed ?? 0
            value.fraction500 = faults.fraction500 ?? 0
            value.fraction503 = faults.fraction503 ?? 0
            guard (0...1).contains(value.fraction500), (0...1).contains(value.fraction503),
                value.fraction500 + value.fraction503 <= 1
            else {
                throw SandboxError.configuration("\(name): faults: fraction_500 and fraction_503 are fractions of 1")
            }
            value.addedLatency = (faults.addedLatencyMs ?? 0) / 1000
            value.goawayAfter = faults.goawayAfter
            value.goawayReason = faults.goawayReason.map { APNsReason(wireValue: $0) } ?? .shutdown
            value.dropAfter = faults.dropAfter
            for (field, count) in [("goaway_after", value.goawayAfter), ("drop_after", value.dropAfter)] {
                if let count, count < 1 {
                    throw SandboxError.configuration("\(name): faults.\(field): a number of answers, at least 1 (or null)")
                }
            }
            if let scope = faults.scope {
                guard let parsed = SandboxFaultScope(rawValue: scope) else {
                    throw SandboxError.configuration("\(name): faults.scope: connection or sandbox")
                }
                value.scope = parsed
            }
            let startedAt = configuration.clock.now
            for (i, outage) in (faults.outages ?? []).enumerated() {
                let field = "faults.outages[\(i)]"
                guard outage.duration.isFinite, outage.duration > 0, outage.duration <= 31 * 86_400 else {
                    throw SandboxError.configuration("\(name): \(field).duration: seconds, more than 0 and at most 31 days")
                }
                let start: Date
                switch (outage.start, outage.after) {
                case (let text?, nil):
                    guard let date = Self.date(text) else {
                        throw SandboxError.configuration("\(name): \(field).start: an ISO 8601 date or UNIX milliseconds")
                    }
                    start = date
                case (nil, let after?):
                    guard after.isFinite, after >= 0, after <= 31 * 86_400 else {
                        throw SandboxError.configuration(
                            "\(name): \(field).after: seconds after the sandbox starts, from 0 to 31 days")
                    }
                    start = startedAt.addingTimeInterval(after)
                default:
                    throw SandboxError.configuration(
                        "\(name): \(field): give either start (a date) or after (seconds after the sandbox starts)")
                }
                value.outages.append(SandboxOutage(start: start, duration: outage.duration))
            }
            configuration.faults = value
        }

        if let record = raw.record {
            configuration.recordInMemory = record.inMemory ?? false
            configuration.recordFile = record.file.map { URL(fileURLWithPath: resolve($0)) }
        } else {
            configuration.recordInMemory = false
        }

        return SandboxConfigFile(
            configuration: configuration, caCertificatePath: caPath, writeCATo: raw.tls?.writeCATo.map(resolve))
    }

    static func date(_ text: String) -> Date? {
        if let millis = Int64(text) { return Date(timeIntervalSince1970: Double(millis) / 1000) }
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(path(context)).\(key.stringValue): missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return "\(path(context)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    // MARK: The file's shape

    /// Every key the file's decoder reads, as a dotted path: sections (`limits`), their keys
    /// (`limits.token_lifetime`) and the keys of a list's entries (`token_keys[].team_id`). Built
    /// from the coding keys below, so it cannot drift from what is read; the configuration
    /// reference (docs/configuration.md) is checked against it. Other keys are not read.
    public static let acceptedKeyPaths: [String] = Raw.CodingKeys.allCases.flatMap { section -> [String] in
        let name = section.stringValue
        switch section {
        case .listen: return [name] + keyPaths(Listen.CodingKeys.self, under: name)
        case .tls: return [name] + keyPaths(TLS.CodingKeys.self, under: name)
        case .tokenKeys: return [name] + keyPaths(TokenKey.CodingKeys.self, under: name + "[]")
        case .limits: return [name] + keyPaths(Limits.CodingKeys.self, under: name)
        case .devices: return [name] + keyPaths(Device.CodingKeys.self, under: name + "[]")
        case .record: return [name] + keyPaths(Record.CodingKeys.self, under: name)
        case .broadcasts: return [name] + keyPaths(Broadcasts.CodingKeys.self, under: name)
        case .environment, .stateDirectory: return [name]
        case .faults:
            return [name]
                + Faults.CodingKeys.allCases.flatMap { key -> [String] in
                    let path = name + "." + key.stringValue
                    switch key {
                    case .outages: return [path] + keyPaths(Outage.CodingKeys.self, under: path + "[]")
                    case .seed, .fraction500, .fraction503, .addedLatencyMs, .goawayAfter, .goawayReason, .dropAfter, .scope:
                        return [path]
                    }
                }
        }
    }

    private static func keyPaths<Key: CodingKey & CaseIterable>(_: Key.Type, under prefix: String) -> [String] {
        Key.allCases.map { prefix + "." + $0.stringValue }
    }

    private struct Raw: Decodable {
        var listen: Listen?
        var tls: TLS?
        var tokenKeys: [TokenKey]?
        var limits: Limits?
        var devices: [Device]?
        var faults: Faults?
        var record: Record?
        var environment: String?
        var broadcasts: Broadcasts?
        var stateDirectory: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case listen, tls, limits, devices, faults, record, environment, broadcasts
            case tokenKeys = "token_keys"
            case stateDirectory = "state_directory"
        }
    }

    private struct Listen: Decodable {
        var host: String?
        var port: Int?
        var channelsPort: Int?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case host, port
            case channelsPort = "channels_port"
        }
    }

    private struct Broadcasts: Decodable {
        var channelsPerApp: Int?
        var disabledTopics: [String]?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case channelsPerApp = "channels_per_app"
            case disabledTopics = "disabled_topics"
        }
    }

    private struct TLS: Decodable {
        var caCertificate: String?
        var caPrivateKey: String?
        var writeCATo: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case caCertificate = "ca_certificate"
            case caPrivateKey = "ca_private_key"
            case writeCATo = "write_ca_to"
        }
    }

    private struct TokenKey: Decodable {
        var teamID: String
        var keyID: String
        var publicKey: String?
        var privateKey: String?
        var topics: [String]
        var environment: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case teamID = "team_id"
            case keyID = "key_id"
            case publicKey = "public_key"
            case privateKey = "private_key"
            case topics, environment
        }
    }

    private struct Limits: Decodable {
        var maxConcurrentStreams: Int?
        var tokenUpdateMinInterval: Double?
        var tokenUpdateScope: String?
        var tokenLifetime: Double?
        var dropStreamLimitAfterRejection: Bool?
        var deviceRequestsPerSecond: Int?
        var maxHeaderListSize: Int?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case maxConcurrentStreams = "max_concurrent_streams"
            case tokenUpdateMinInterval = "token_update_min_interval"
            case tokenUpdateScope = "token_update_scope"
            case tokenLifetime = "token_lifetime"
            case dropStreamLimitAfterRejection = "drop_stream_limit_after_rejection"
            case deviceRequestsPerSecond = "device_requests_per_second"
            case maxHeaderListSize = "max_header_list_size"
        }
    }

    private struct Device: Decodable {
        var token: String
        var unregisteredSince: String?
        var expiredSince: String?
        var topic: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case token
            case unregisteredSince = "unregistered_since"
            case expiredSince = "expired_since"
            case topic
        }
    }

    private struct Faults: Decodable {
        var seed: UInt64?
        var fraction500: Double?
        var fraction503: Double?
        var addedLatencyMs: Double?
        var goawayAfter: Int?
        var goawayReason: String?
        var dropAfter: Int?
        var scope: String?
        var outages: [Outage]?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case seed
            case fraction500 = "fraction_500"
            case fraction503 = "fraction_503"
            case addedLatencyMs = "added_latency_ms"
            case goawayAfter = "goaway_after"
            case goawayReason = "goaway_reason"
            case dropAfter = "drop_after"
            case scope
            case outages
        }
    }

    private struct Outage: Decodable {
        var start: String?
        var after: Double?
        var duration: Double

        enum CodingKeys: String, CodingKey, CaseIterable {
            case start, after, duration
        }
    }

    private struct Record: Decodable {
        var inMemory: Bool?
        var file: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case inMemory = "in_memory"
            case file
        }
    }
}
