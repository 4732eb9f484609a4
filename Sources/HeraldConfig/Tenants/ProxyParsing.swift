import Foundation
import HeraldCore
import Yams

/// `proxy:` in `config/herald.yaml` (every tenant) and in a tenant file (that tenant): a proxy
/// URL, a mapping with credentials and exceptions, `environment` (`HTTPS_PROXY` and `NO_PROXY`
/// of the process), or, in a tenant file, `none`.
enum ProxyParsing {
    static let keys = ["url", "username", "password", "no_proxy"]

    /// Reads the setting; nil after an error (reported). `allowNone`: a tenant file may say
    /// `none` to go direct whatever the server's file says.
    static func parse(
        _ node: Node, path: FieldPath, allowNone: Bool, reader: SourceReader, baseDirectory: String,
        diagnostics: YAMLDiagnostics
    ) -> ProxySetting? {
        let field = path.text
        if case .scalar = node {
            guard let text = diagnostics.string(node, path) else { return nil }
            switch text {
            case "none":
                guard allowNone else {
                    diagnostics.error(at: node, field, "'none' is for a tenant file; leave proxy out to connect directly")
                    return nil
                }
                return .direct
            case "environment":
                return fromEnvironment(reader.environment, at: node, field: field, diagnostics: diagnostics)
            default:
                return url(text, at: node, field: field, diagnostics: diagnostics).map { .proxy($0) }
            }
        }
        guard let mapping = CheckedMapping(node, path: path, allowedKeys: keys, diagnostics: diagnostics) else {
            return nil
        }
        guard let urlNode = mapping.require("url", hint: " (http://HOST:PORT or socks5://HOST:PORT)"),
            let text = diagnostics.string(urlNode, path.appending("url")),
            var proxy = url(text, at: urlNode, field: path.appending("url").text, diagnostics: diagnostics)
        else { return nil }
        var ok = true
        switch (mapping["username"], mapping["password"]) {
        case (nil, nil):
            break
        case (let userNode?, let passwordNode?):
            guard proxy.scheme == .http else {
                diagnostics.error(
                    at: userNode, path.appending("username").text,
                    "a SOCKS5 proxy is reached without credentials (NIO's SOCKS client offers no username and password); use an http:// proxy for those")
                return nil
            }
            let userField = path.appending("username")
            if let user = diagnostics.string(userNode, userField) {
                if user.utf8.count > 255 || user.contains(":") || user.contains(where: { $0.isNewline }) {
                    diagnostics.error(at: userNode, userField.text, "must be at most 255 bytes, without ':' or line breaks")
                    ok = false
                } else {
                    proxy.username = user
                }
            } else {
                ok = false
            }
            if let password = secret(passwordNode, field: path.appending("password"), reader: reader, baseDirectory: baseDirectory, diagnostics: diagnostics) {
                proxy.password = password
            } else {
                ok = false
            }
        case (let only?, nil), (nil, let only?):
            let missing = mapping["username"] == nil ? "username" : "password"
            diagnostics.error(at: only, path.appending(missing).text, "is required with \(missing == "username" ? "password" : "username")")
            ok = false
        }
        if let bypassNode = mapping["no_proxy"] {
            if let bypass = hosts(bypassNode, path: path.appending("no_proxy"), diagnostics: diagnostics) {
                proxy.bypass = bypass
            } else {
                ok = false
            }
        }
        return ok ? .proxy(proxy) : nil
    }

    /// `http://HOST[:PORT]` or `socks5://HOST[:PORT]`, host a name, an IPv4 address or a
    /// bracketed IPv6 address; nothing else in the URL (credentials go in their own keys, so
    /// that none is ever written in the file or repeated in a message).
    static func url(_ text: String, at node: Node?, field: String, diagnostics: YAMLDiagnostics) -> EgressProxy? {
        switch EgressProxy.parse(url: text) {
        case .success(let proxy):
            return proxy
        case .failure(.shape):
            diagnostics.error(at: node, field, "must read http://HOST[:PORT] or socks5://HOST[:PORT]")
        case .failure(.credentials):
            diagnostics.error(
                at: node, field, "must not hold credentials: give username and password (env:NAME or file:PATH) beside url")
        case .failure(.port):
            diagnostics.error(at: node, field, "the port must be 1 to 65535")
        }
        return nil
    }

    /// `proxy: environment`: `HTTPS_PROXY` (or `https_proxy`) and `NO_PROXY` (or `no_proxy`);
    /// directly when `HTTPS_PROXY` is not set.
    static func fromEnvironment(
        _ environment: [String: String], at node: Node, field: String, diagnostics: YAMLDiagnostics
    ) -> ProxySetting? {
        guard let text = environment["HTTPS_PROXY"] ?? environment["https_proxy"], !text.isEmpty else { return .direct }
        guard var proxy = url(text, at: node, field: field + " (HTTPS_PROXY)", diagnostics: diagnostics) else { return nil }
        let bypass = environment["NO_PROXY"] ?? environment["no_proxy"] ?? ""
        proxy.bypass = bypass.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return .proxy(proxy)
    }

    private static func secret(
        _ node: Node, field: FieldPath, reader: SourceReader, baseDirectory: String, diagnostics: YAMLDiagnostics
    ) -> Secret? {
        guard let text = diagnostics.string(node, field) else { return nil }
        switch SecretReference.parse(text, plainIsPath: false) {
        case .success(let reference):
            switch reader.load(reference, baseDirectory: baseDirectory, trimNewline: true) {
            case .success(let secret): return secret
            case .failure(let problem):
                diagnostics.error(at: node, field.text, problem.message)
                return nil
            }
        case .failure(.notAReference):
            diagnostics.error(at: node, field.text, "must be env:NAME or file:PATH; a password is never written in this file")
        case .failure(.badEnvironmentName):
            diagnostics.error(at: node, field.text, "env: must name a variable (A-Z, a-z, 0-9, _)")
        case .failure(.emptyPath):
            diagnostics.error(at: node, field.text, "file: must name a file")
        }
        return nil
    }

    /// A list of hosts, or one string of them separated by commas.
    private static func hosts(_ node: Node, path: FieldPath, diagnostics: YAMLDiagnostics) -> [String]? {
        if case .scalar = node {
            guard let text = diagnostics.string(node, path, allowEmpty: true) else { return nil }
            return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        guard let items = diagnostics.sequence(node, path, of: "host names") else { return nil }
        var hosts: [String] = []
        for (index, item) in items.enumerated() {
            guard let host = diagnostics.string(item, path.index(index)) else { return nil }
            hosts.append(host)
        }
        return hosts
    }
}
