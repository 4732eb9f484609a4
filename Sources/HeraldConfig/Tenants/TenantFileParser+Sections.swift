import HeraldCore
import Yams

extension TenantFileParser {
    // MARK: endpoints

    func defaultEndpoints() -> EndpointsConfiguration? { EndpointsConfiguration() }

    /// `endpoints:` — `production` and `development` URLs (Apple's by default; `null` switches one
    /// off), `channels_production` and `channels_development` (the channel management service
    /// for broadcasts; Apple's by default, `null` switches one off), `default` (the environment used when a send names none) and `ca_file` (extra trust
    /// roots for a non-Apple endpoint such as APNsSandbox).
    func parseEndpoints(_ node: Node) -> EndpointsConfiguration? {
        let path = FieldPath(text: "endpoints")
        guard let endpoints = CheckedMapping(node, path: path, allowedKeys: Keys.endpoints, diagnostics: diagnostics)
        else { return nil }
        var ok = true

        func endpoint(_ environment: APNsEnvironment, fallback: APNsEndpoint) -> APNsEndpoint? {
            endpoint(key: environment.rawValue, fallback: fallback)
        }
        func endpoint(key: String, fallback: APNsEndpoint) -> APNsEndpoint? {
            guard let value = endpoints[key] else { return fallback }
            let field = path.appending(key)
            if value.isNull {
                diagnostics.record(field.text, value)
                return nil
            }
            guard let text = diagnostics.string(value, field) else {
                ok = false
                return nil
            }
            guard let parsed = APNsEndpoint(url: text) else {
                diagnostics.error(
                    at: value, field.text,
                    "'\(text)' is not an APNs endpoint URL; expected https://host[:port], e.g. \(fallback.url)")
                ok = false
                return nil
            }
            return parsed
        }
        let production = endpoint(.production, fallback: .production)
        let development = endpoint(.development, fallback: .development)
        let channelsProduction = endpoint(key: "channels_production", fallback: .channelsProduction)
        let channelsDevelopment = endpoint(key: "channels_development", fallback: .channelsDevelopment)

        var defaultEnvironment: APNsEnvironment = production != nil ? .production : .development
        if let value = endpoints["default"], let text = diagnostics.string(value, path.appending("default")) {
            if let environment = APNsEnvironment(rawValue: text) {
                defaultEnvironment = environment
                let configured = environment == .production ? production : development
                if configured == nil, ok {
                    diagnostics.error(
                        at: value, path.appending("default").text,
                        "names \(text), but endpoints.\(text) is switched off (null)")
                    ok = false
                }
            } else {
                diagnostics.error(
                    at: value, path.appending("default").text, "must be production or development, not '\(text)'")
                ok = false
            }
        } else if endpoints.has("default") {
            ok = false
        }
        if ok, production == nil, development == nil {
            diagnostics.error(at: node, path.text, "switches off both production and development; keep at least one")
            ok = false
        }

        var trustRoots: [UInt8]? = nil
        var trustRootsOrigin: String? = nil
        if let value = endpoints["ca_file"] {
            let field = path.appending("ca_file")
            if let text = diagnostics.string(value, field) {
                let resolved = SourceReader.resolve(text, against: baseDirectory)
                switch SourceReader.readFile(resolved) {
                case .failure(let problem):
                    diagnostics.error(at: value, field.text, problem.message)
                    ok = false
                case .success(let bytes):
                    if PEMCheck.hasCertificate(bytes) {
                        trustRoots = bytes
                        trustRootsOrigin = resolved
                    } else {
                        diagnostics.error(
                            at: value, field.text,
                            "\(resolved) does not hold a PEM certificate (-----BEGIN CERTIFICATE-----)")
                        ok = false
                    }
                }
            } else {
                ok = false
            }
        }
        guard ok else { return nil }
        return EndpointsConfiguration(
            production: production, development: development, defaultEnvironment: defaultEnvironment,
            trustRootsPEM: trustRoots, trustRootsOrigin: trustRootsOrigin,
            channelsProduction: channelsProduction, channelsDevelopment: channelsDevelopment)
    }

    // MARK: pool

    /// `pool:` — per-endpoint connection-pool settings; every key optional.
    func parsePool(_ node: Node) -> PoolConfiguration? {
        let path = FieldPath(text: "pool")
        guard let pool = CheckedMapping(node, path: path, allowedKeys: Keys.pool, diagnostics: diagnostics) else {
            return nil
        }
        var configuration = PoolConfiguration()
        var ok = true
        func read<T>(
            _ key: String, _ parse: (Node, FieldPath) -> T?, into keyPath: WritableKeyPath<PoolConfiguration, T>
        ) {
            guard let value = pool[key] else { return }
            if let parsed = parse(value, path.appending(key)) {
                configuration[keyPath: keyPath] = parsed
            } else {
                ok = false
            }
        }
        read("connections", { diagnostics.integer($0, $1, in: 1...64) }, into: \.connections)
        read("max_queued", { diagnostics.integer($0, $1, in: 0...10_000_000) }, into: \.maxQueued)
        read(
            "request_timeout", { diagnostics.duration($0, $1, minimum: 0.001, allowZero: false) },
            into: \.requestTimeout)
        read("idle_timeout", { diagnostics.duration($0, $1, minimum: 1, allowZero: true) }, into: \.idleTimeout)
        read("ping_interval", { diagnostics.duration($0, $1, minimum: 1, allowZero: false) }, into: \.pingInterval)
        read("open_next_at", { diagnostics.integer($0, $1, in: 0...10_000) }, into: \.openNextAt)
        read("max_streams", { diagnostics.integer($0, $1, in: 1...1000) }, into: \.maxStreams)
        return ok ? configuration : nil
    }

    // MARK: plugins

    /// `plugins:` — a list of `{name, options}`; a bare string is a plugin without options. Plugin
    /// names are checked by the plugin registry, not here.
    func parsePlugins(_ node: Node) -> [PluginConfiguration]? {
        let path = FieldPath(text: "plugins")
        if node.isNull { return [] }
        guard let items = diagnostics.sequence(node, path, of: "plugins ({name, options})") else { return nil }
        var plugins: [PluginConfiguration] = []
        var ok = true
        for (i, item) in items.enumerated() {
            let itemPath = path.index(i)
            if case .scalar = item, !item.isNull {
                guard let name = diagnostics.string(item, itemPath) else {
                    ok = false
                    continue
                }
                plugins.append(
                    PluginConfiguration(name: name, options: .object([]), location: diagnostics.location(item)))
                continue
            }
            guard let entry = CheckedMapping(item, path: itemPath, allowedKeys: Keys.plugin, diagnostics: diagnostics)
            else {
                ok = false
                continue
            }
            diagnostics.record(itemPath.text, item)
            let name = entry.require("name").flatMap { diagnostics.string($0, itemPath.appending("name")) }
            var options: JSONValue? = .object([])
            if let value = entry["options"], !value.isNull {
                if case .mapping = value {
                    options = diagnostics.json(value, itemPath.appending("options"))
                } else {
                    diagnostics.error(
                        at: value, itemPath.appending("options").text, "must be a mapping, not \(value.kindForMessages)"
                    )
                    options = nil
                }
            }
            guard let name, let options else {
                ok = false
                continue
            }
            plugins.append(PluginConfiguration(name: name, options: options, location: diagnostics.location(item)))
        }
        return ok ? plugins : nil
    }

    // MARK: api_keys

    /// `api_keys:` — a list of `{name, sha256}`: the tenant's API keys, stored only as the SHA-256
    /// of the key in lowercase hex.
    func parseAPIKeys(_ node: Node) -> [APIKeyEntry]? {
        let path = FieldPath(text: "api_keys")
        if node.isNull { return [] }
        guard let items = diagnostics.sequence(node, path, of: "API keys ({name, sha256})") else { return nil }
        var keys: [APIKeyEntry] = []
        var names: [String: Int] = [:]
        var hashes: [String: Int] = [:]
        var ok = true
        for (i, item) in items.enumerated() {
            let itemPath = path.index(i)
            guard let entry = CheckedMapping(item, path: itemPath, allowedKeys: Keys.apiKey, diagnostics: diagnostics)
            else {
                ok = false
                continue
            }
            diagnostics.record(itemPath.text, item)
            let nameNode = entry.require("name")
            let name = nameNode.flatMap { diagnostics.string($0, itemPath.appending("name")) }
            let hashNode = entry.require("sha256")
            var hash = hashNode.flatMap { diagnostics.string($0, itemPath.appending("sha256")) }
            if let text = hash, let hashNode {
                let isHex =
                    text.utf8.count == 64
                    && text.utf8.allSatisfy {
                        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                            || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
                    }
                if !isHex {
                    // A wrong value here may be the API key itself, pasted by mistake: never repeat it.
                    diagnostics.error(
                        at: hashNode, itemPath.appending("sha256").text,
                        "must be the SHA-256 of the API key as 64 lowercase hex digits (e.g. from `printf %s KEY | sha256sum`)"
                    )
                    hash = nil
                } else if let earlier = hashes[text] {
                    diagnostics.error(
                        at: hashNode, itemPath.appending("sha256").text, "the same key hash as api_keys[\(earlier)]")
                    hash = nil
                } else {
                    hashes[text] = i
                }
            }
            if let name, let nameNode {
                if let earlier = names[name] {
                    diagnostics.error(
                        at: nameNode, itemPath.appending("name").text,
                        "duplicate API key name '\(name)' (already api_keys[\(earlier)])")
                    ok = false
                } else {
                    names[name] = i
                }
            }
            guard let name, let hash else {
                ok = false
                continue
            }
            keys.append(APIKeyEntry(name: name, sha256Hex: hash))
        }
        return ok ? keys : nil
    }
}
