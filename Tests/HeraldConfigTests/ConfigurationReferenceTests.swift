import APNsSandbox
import Foundation
import Herald
import HeraldConfig
import HeraldCore
import Testing

/// docs/configuration.md lists every key the configuration parsers accept, and no other.
///
/// The accepted keys are never copied into this test: they are read from the parsers.
///
/// - `config/herald.yaml` and tenant files: the real parsers are given a key they do not know
///   (`x_reference_probe`) in each section; their error lists the section's valid keys
///   ("unknown key; valid keys: …"). Each valid key is then probed the same way, as a mapping
///   and as a list of mappings, to find the sections inside it, down to the last level.
/// - Plugin options (`plugins[NAME].options.…`): every plugin of `PluginRegistry.standard()`,
///   and the built-in `retry`, is built from options with an unknown name; its error lists the
///   options it knows ("unknown option (known: …)"), and each option is probed for nested ones.
/// - `config/sandbox.yaml` is read by a `Decodable` decoder, which ignores keys it does not know,
///   so there is nothing to probe: `SandboxConfigFile.acceptedKeyPaths` is built from the very
///   coding keys the decoder reads.
///
/// On the page, a key is the first cell of a row of a table whose first header cell is `Key`,
/// written in backticks as a full path (`storage.postgres.url`, `api_keys[].sha256`,
/// `plugins[rate-limit].options.per_topic.burst`), under the `##` section of its file. Every
/// leaf key must be there; a section's own path (`storage.postgres`) may be, but nothing else.
@Suite("docs/configuration.md documents exactly the keys the parsers accept")
struct ConfigurationReferenceTests {
    // MARK: The checks

    @Test("config/herald.yaml: every key the server parser accepts, and no other")
    func serverKeys() throws {
        let accepted = Self.discoverYAMLKeys { yaml in
            do throws(ConfigFailure) {
                _ = try ServerConfiguration.parse(yaml: yaml, file: "config/herald.yaml", environment: [:])
                return []
            } catch {
                return error.errors
            }
        }
        // The probe itself works: it reached a section two levels down.
        #expect(accepted.contains("storage.postgres.url"))
        try Self.check(section: Self.serverSection, accepted: accepted)
    }

    @Test("tenants/*.yaml: every key the tenant parser accepts and every plugin option, and no other")
    func tenantKeys() throws {
        var accepted = Self.discoverYAMLKeys { yaml in
            do throws(TenantLoadFailure) {
                _ = try TenantLoader(environment: [:]).parseTenant(yaml: yaml, file: "probe.yaml")
                return []
            } catch {
                return error.errors
            }
        }
        #expect(accepted.contains("auth.token.key_id"))
        #expect(accepted.contains("api_keys[].sha256"))
        // `plugins[].options` is any mapping to the tenant parser; each plugin checks its own.
        #expect(accepted.contains("plugins[].options"))

        let registry = PluginRegistry.standard()
        let page = try Self.page()
        for name in registry.names {
            let probe: OptionsProbe
            if name == PluginRegistry.retryName {
                probe = { options in
                    do throws(PluginOptionError) {
                        _ = try RetryPolicy(options: options)
                        return nil
                    } catch {
                        return error
                    }
                }
            } else {
                let factory = try #require(registry.factory(named: name))
                let environment = try Self.pluginEnvironment()
                probe = { options in
                    do throws(PluginOptionError) {
                        _ = try factory.make(options: options, environment: environment)
                        return nil
                    } catch {
                        return error
                    }
                }
            }
            let options = try Self.discoverOptionKeys(probe, plugin: name)
            accepted.formUnion(options.map { "plugins[\(name)].options.\($0)" })
            #expect(page.contains("`\(name)`"), "docs/configuration.md does not name the plugin `\(name)`")
        }
        #expect(accepted.contains("plugins[rate-limit].options.per_topic.burst"))
        try Self.check(section: Self.tenantSection, accepted: accepted)
    }

    @Test("config/sandbox.yaml: every key the sandbox decoder reads, and no other")
    func sandboxKeys() throws {
        let accepted = Set(SandboxConfigFile.acceptedKeyPaths)
        #expect(accepted.contains("faults.outages[].duration"))
        try Self.check(section: Self.sandboxSection, accepted: accepted)
    }

    @Test("the page's example herald.yaml loads, and its example tenant file uses no unknown key")
    func examplesUseRealKeys() throws {
        let server = try #require(try Self.example(in: Self.serverSection), "no ```yaml example under ### Example")
        do throws(ConfigFailure) {
            _ = try ServerConfiguration.parse(yaml: server, file: "config/herald.yaml", environment: [:])
        } catch {
            Issue.record("the example herald.yaml does not load:\n\(error)")
        }
        let tenant = try #require(try Self.example(in: Self.tenantSection), "no ```yaml example under ### Example")
        do throws(TenantLoadFailure) {
            _ = try TenantLoader(environment: [:]).parseTenant(yaml: tenant, file: "tenants/acme.yaml")
        } catch {
            // Its key and certificate files do not exist here; only its keys are checked.
            let unknown = error.errors.filter { $0.message.hasPrefix("unknown key") }
            #expect(unknown.isEmpty, "the example tenant file uses unknown keys:\n\(unknown.map(\.description).joined(separator: "\n"))")
        }
    }

    // MARK: The page

    static let serverSection = "## Server configuration"
    static let tenantSection = "## Tenant files"
    static let sandboxSection = "## Sandbox configuration"

    /// The package root: the nearest directory above this file that holds Package.swift.
    static let packageRoot: URL = {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while directory.path != "/",
            !FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path)
        {
            directory.deleteLastPathComponent()
        }
        return directory
    }()

    static func page() throws -> String {
        try String(contentsOf: packageRoot.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
    }

    /// The lines of the `##` section whose heading is `heading`, up to the next `##` heading.
    static func lines(of heading: String) throws -> [Substring] {
        let lines = try page().split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(
            lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == heading },
            "docs/configuration.md has no heading '\(heading)'")
        let rest = lines[(start + 1)...]
        let end = rest.firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
        return Array(lines[(start + 1)..<end])
    }

    /// The key paths the section documents: the first cells of its tables headed `Key`, in order
    /// (duplicates kept, to be reported).
    static func documentedKeys(in heading: String) throws -> [String] {
        var keys: [String] = []
        var inKeyTable = false
        var previousWasTableRow = false
        for line in try lines(of: heading) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("|") else {
                inKeyTable = false
                previousWasTableRow = false
                continue
            }
            let cells = trimmed.dropFirst().split(separator: "|", omittingEmptySubsequences: false)
            let first = cells.first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            defer { previousWasTableRow = true }
            if !previousWasTableRow {
                // A table's header row.
                inKeyTable = first == "Key"
                continue
            }
            guard inKeyTable, !first.allSatisfy({ $0 == "-" || $0 == ":" }) else { continue }
            guard first.count > 2, first.hasPrefix("`"), first.hasSuffix("`"), first.dropFirst().dropLast().allSatisfy({ $0 != "`" })
            else {
                Issue.record("\(heading): a Key cell must be one key path in backticks, not \(first)")
                continue
            }
            keys.append(String(first.dropFirst().dropLast()))
        }
        return keys
    }

    /// The first ```yaml block after the section's `### Example` heading.
    static func example(in heading: String) throws -> String? {
        let lines = try lines(of: heading)
        guard let example = lines.firstIndex(where: { $0.hasPrefix("### Example") }),
            let open = lines[example...].firstIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "```yaml" }),
            let close = lines[(open + 1)...].firstIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "```" })
        else { return nil }
        return lines[(open + 1)..<close].joined(separator: "\n") + "\n"
    }

    /// Every leaf of `accepted` is documented in the section, and the section documents nothing
    /// that is not in `accepted`.
    static func check(section: String, accepted: Set<String>) throws {
        let documented = try documentedKeys(in: section)
        let leaves = accepted.filter { path in !accepted.contains { $0.hasPrefix(path + ".") || $0.hasPrefix(path + "[].") } }
        let missing = leaves.subtracting(documented).sorted()
        let unknown = Set(documented).subtracting(accepted).sorted()
        let duplicates = Dictionary(grouping: documented, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        #expect(
            missing.isEmpty,
            "docs/configuration.md (\(section)) lacks keys the parser accepts: \(missing.joined(separator: ", "))")
        #expect(
            unknown.isEmpty,
            "docs/configuration.md (\(section)) documents keys the parser does not accept: \(unknown.joined(separator: ", "))")
        #expect(duplicates.isEmpty, "docs/configuration.md (\(section)) documents keys twice: \(duplicates.joined(separator: ", "))")
    }

    // MARK: Probing the YAML parsers

    /// A key no parser knows.
    static let probeKey = "x_reference_probe"

    /// One step of a path: a mapping key, or the entries of a list.
    enum Step: Hashable {
        case key(String)
        case entry
    }

    /// Every key path the parser accepts, sections included, found by probing it with an
    /// unknown key in each section. `parse` returns the errors the parser reports for a text.
    static func discoverYAMLKeys(_ parse: (String) -> [ConfigError]) -> Set<String> {
        discoverKeys { path in parse(probeYAML(at: path)) }
    }

    /// Every key path below `path`'s probes: `parse` returns the errors for the probe at a path.
    static func discoverKeys(_ parse: ([Step]) -> [ConfigError]) -> Set<String> {
        var found: Set<String> = []
        func walk(_ path: [Step], keys: [String]) {
            for key in keys {
                let child = path + [.key(key)]
                found.insert(documentedPath(child))
                if let nested = validKeys(at: child, parse) {
                    walk(child, keys: nested)
                } else if let nested = validKeys(at: child + [.entry], parse) {
                    walk(child + [.entry], keys: nested)
                }
            }
        }
        walk([], keys: validKeys(at: [], parse) ?? [])
        return found
    }

    /// The keys the mapping at `path` allows, from the parser's "unknown key" error; nil when the
    /// value at `path` is no checked mapping (a scalar, a list of scalars, a free mapping).
    static func validKeys(at path: [Step], _ parse: ([Step]) -> [ConfigError]) -> [String]? {
        let field = errorPath(path + [.key(probeKey)])
        guard let error = parse(path).first(where: { $0.field == field && $0.message.hasPrefix("unknown key") }),
            let list = error.message.range(of: "valid keys: ")
        else { return nil }
        return error.message[list.upperBound...].components(separatedBy: ", ")
    }

    /// A YAML document (flow style) with the probe key at `path`: `{auth: {token: {x_reference_probe: 1}}}`.
    static func probeYAML(at path: [Step]) -> String {
        var yaml = "{\(probeKey): 1}"
        for step in path.reversed() {
            switch step {
            case .key(let key): yaml = "{\(key): \(yaml)}"
            case .entry: yaml = "[\(yaml)]"
            }
        }
        return yaml + "\n"
    }

    /// The path as the page writes it: `api_keys[].sha256`.
    static func documentedPath(_ path: [Step]) -> String {
        path.reduce(into: "") { text, step in
            switch step {
            case .key(let key): text += text.isEmpty ? key : "." + key
            case .entry: text += "[]"
            }
        }
    }

    /// The path as the parsers' errors write it: `api_keys[0].sha256`.
    static func errorPath(_ path: [Step]) -> String {
        documentedPath(path).replacingOccurrences(of: "[]", with: "[0]")
    }

    // MARK: Probing the plugins

    /// Builds a plugin from options; returns the error it reports, or nil when they are valid.
    typealias OptionsProbe = (JSONValue) -> PluginOptionError?

    /// Every option path the plugin accepts (`per_topic`, `per_topic.burst`), found by giving each
    /// options object an unknown name. Options the plugin requires before it reads a nested
    /// object are given the first of a few plain values it takes.
    static func discoverOptionKeys(_ probe: OptionsProbe, plugin: String) throws -> Set<String> {
        /// Required options supplied while probing, by the path of the object that holds them.
        var required: [String: [(String, JSONValue)]] = [:]

        func options(with value: JSONValue, at path: [String]) -> JSONValue {
            var inner = value
            for depth in stride(from: path.count - 1, through: 0, by: -1) {
                let holder = path[..<depth].joined(separator: ".")
                let given = required[holder, default: []].filter { $0.0 != path[depth] }
                inner = .object(given + [(path[depth], inner)])
            }
            return inner
        }

        /// The options the object at `path` knows, or nil when it is no options object.
        func knownOptions(at path: [String]) -> [String]? {
            let probePath = path + [probeKey]
            for _ in 0..<8 {
                guard let error = probe(options(with: .int(1), at: probePath)) else { return nil }
                if error.option == probePath.joined(separator: "."), error.message.hasPrefix("unknown option") {
                    if error.message.contains("takes none") { return [] }
                    guard let start = error.message.range(of: "(known: "), let end = error.message.lastIndex(of: ")")
                    else { return nil }
                    return error.message[start.upperBound..<end].components(separatedBy: ", ")
                }
                guard error.message == "is required", let option = error.option else { return nil }
                // A required option stops the probe before it reaches `path`: give it a value.
                let parts = option.split(separator: ".").map(String.init)
                let holder = parts.dropLast().joined(separator: ".")
                var satisfied = false
                for candidate: JSONValue in [.int(1), .string("x"), .bool(true), .array([.string("x")])] {
                    required[holder, default: []].removeAll { $0.0 == parts.last! }
                    required[holder, default: []].append((parts.last!, candidate))
                    if probe(options(with: .int(1), at: probePath))?.option != option {
                        satisfied = true
                        break
                    }
                }
                if !satisfied {
                    Issue.record("plugin '\(plugin)': cannot find a value for its required option '\(option)' to probe '\(path.joined(separator: "."))'")
                    return nil
                }
            }
            return nil
        }

        var found: Set<String> = []
        func walk(_ path: [String], keys: [String]) {
            for key in keys {
                let child = path + [key]
                found.insert(child.joined(separator: "."))
                if let nested = knownOptions(at: child) { walk(child, keys: nested) }
            }
        }
        let top = try #require(knownOptions(at: []), "plugin '\(plugin)' did not report its known options")
        walk([], keys: top)
        return found
    }

    /// What a plugin is built with: one probe tenant, and services that do nothing.
    static func pluginEnvironment() throws -> PluginEnvironment {
        PluginEnvironment(
            tenant: try TenantID("probe"), topics: ["com.example.probe"], tenantFile: "probe.yaml",
            invalidTokens: NoInvalidTokens(), webhooks: NoWebhooks(), tasks: NoTasks(), secrets: NoSecrets())
    }

    struct NoInvalidTokens: InvalidTokenRecorder {
        func record(_ record: InvalidTokenRecord) async throws {}
        func invalidToken(_ token: DeviceToken, topic: String, environment: APNsEnvironment) async throws
            -> InvalidTokenRecord?
        { nil }
    }

    struct NoWebhooks: WebhookSender {
        func post(_ request: WebhookRequest) async throws -> Int { 200 }
    }

    struct NoTasks: PluginTaskRunner {
        func run(_ operation: @escaping @Sendable () async -> Void) {}
    }

    struct NoSecrets: SecretResolver {
        struct Unavailable: Error {}
        func resolve(_ reference: String) throws -> Secret { throw Unavailable() }
    }
}
