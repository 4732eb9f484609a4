import HeraldCore
import Yams

extension TenantFileParser {
    /// `auth:` holds exactly one of `token:` and `certificate:`.
    func parseAuth(_ node: Node) -> AuthConfiguration? {
        let path = FieldPath(text: "auth")
        guard let auth = CheckedMapping(node, path: path, allowedKeys: Keys.auth, diagnostics: diagnostics) else {
            return nil
        }
        switch (auth["token"], auth["certificate"]) {
        case (let token?, nil):
            return parseToken(token, path.appending("token")).map(AuthConfiguration.token)
        case (nil, let certificate?):
            return parseCertificate(certificate, path.appending("certificate")).map(AuthConfiguration.certificate)
        case (.some, .some):
            diagnostics.error(
                at: auth.keyNode("certificate"), "auth.certificate",
                "auth takes exactly one of token: and certificate:, not both")
            return nil
        case (nil, nil):
            if auth.node.mapping?.isEmpty ?? true {
                diagnostics.error(
                    at: node, path.text, "must hold token: (a .p8 signing key) or certificate: (a client certificate)")
            }
            // Otherwise only unknown keys were given; those are already reported with the valid keys.
            return nil
        }
    }

    // MARK: token

    /// `auth.token`: one key (a mapping), or several (a list of mappings), each with `key_id`,
    /// `key_file` or `key`, and optionally `environment` and `topics` (what Apple restricted the
    /// key to). A send is signed with the first key that fits it.
    private func parseToken(_ node: Node, _ path: FieldPath) -> TokenAuthConfiguration? {
        guard case .sequence(let items) = node else {
            return parseTokenKey(node, path).map { TokenAuthConfiguration(keys: [$0]) }
        }
        diagnostics.record(path.text, node)
        guard !items.isEmpty else {
            diagnostics.error(at: node, path.text, "must list at least one key ({key_id, key_file})")
            return nil
        }
        var keys: [TokenKeyConfiguration] = []
        var firstIndex: [String: Int] = [:]
        var ok = true
        for (i, item) in items.enumerated() {
            guard let key = parseTokenKey(item, path.index(i)) else {
                ok = false
                continue
            }
            if let earlier = firstIndex[key.keyID] {
                diagnostics.error(at: item, path.index(i).appending("key_id").text, "duplicate key ID '\(key.keyID)' (already \(path.text)[\(earlier)])")
                ok = false
                continue
            }
            firstIndex[key.keyID] = i
            keys.append(key)
        }
        return ok ? TokenAuthConfiguration(keys: keys) : nil
    }

    private func parseTokenKey(_ node: Node, _ path: FieldPath) -> TokenKeyConfiguration? {
        guard let token = CheckedMapping(node, path: path, allowedKeys: Keys.token, diagnostics: diagnostics) else {
            return nil
        }
        let keyID = token.require("key_id").flatMap { appleIdentifier($0, path.appending("key_id"), what: "key ID") }
        let key = privateKey(in: token, path, what: "the .p8 signing key from Apple")
        var ok = true
        var environment: APNsEnvironment? = nil
        if let value = token["environment"], let text = diagnostics.string(value, path.appending("environment")) {
            if let parsed = APNsEnvironment(rawValue: text) {
                environment = parsed
            } else {
                diagnostics.error(
                    at: value, path.appending("environment").text,
                    "must be production or development (the environment Apple restricted the key to), not '\(text)'")
                ok = false
            }
        } else if token.has("environment") {
            ok = false
        }
        var topics: [String]? = nil
        if let value = token["topics"] {
            let field = path.appending("topics")
            if let items = diagnostics.sequence(value, field, of: "topics (bundle IDs)") {
                var list: [String] = []
                for (i, item) in items.enumerated() {
                    guard let topic = diagnostics.string(item, field.index(i)) else {
                        ok = false
                        continue
                    }
                    do {
                        try HeraldCore.Notification.validateTopic(topic)
                        list.append(topic)
                    } catch {
                        diagnostics.error(at: item, field.index(i).text, "'\(topic)' is not a valid topic: \(error.message)")
                        ok = false
                    }
                }
                if items.isEmpty {
                    diagnostics.error(at: value, field.text, "must list at least one topic, or be left out (every topic)")
                    ok = false
                }
                topics = list
            } else {
                ok = false
            }
        }
        guard ok, let keyID, let key else { return nil }
        return TokenKeyConfiguration(keyID: keyID, privateKey: key, environment: environment, topics: topics)
    }

    /// `key_file: PATH` or `key: env:VAR|file:PATH`, exactly one, holding a PEM private key.
    private func privateKey(in mapping: CheckedMapping, _ path: FieldPath, what: String) -> Secret? {
        switch (mapping["key_file"], mapping["key"]) {
        case (let fileNode?, nil):
            let field = path.appending("key_file")
            guard let text = diagnostics.string(fileNode, field) else { return nil }
            if text.hasPrefix("env:") {
                diagnostics.error(
                    at: fileNode, field.text,
                    "takes a file path; for a key held in an environment variable write key: \(text)")
                return nil
            }
            guard let reference = reference(text, plainIsPath: true, at: fileNode, field) else { return nil }
            return loadPrivateKey(reference, at: fileNode, field, what: what)
        case (nil, let keyNode?):
            let field = path.appending("key")
            guard let text = diagnostics.string(keyNode, field) else { return nil }
            guard let reference = reference(text, plainIsPath: false, at: keyNode, field) else { return nil }
            return loadPrivateKey(reference, at: keyNode, field, what: what)
        case (.some, .some):
            diagnostics.error(
                at: mapping.keyNode("key"), path.appending("key").text,
                "give either key_file: (a path) or key: (env:VAR or file:PATH), not both")
            return nil
        case (nil, nil):
            diagnostics.error(
                at: mapping.node, path.appending("key_file").text,
                "is required (or key: env:VAR with the PEM in an environment variable)")
            return nil
        }
    }

    private func loadPrivateKey(_ reference: SecretReference, at node: Node, _ field: FieldPath, what: String)
        -> Secret?
    {
        guard let secret = loadSecret(reference, at: node, field, trimNewline: false) else { return nil }
        guard PEMCheck.hasPrivateKey(secret.bytes) else {
            diagnostics.error(
                at: node, field.text,
                "\(secret.origin) does not hold a PEM private key (expected \(what), starting with -----BEGIN PRIVATE KEY-----)"
            )
            return nil
        }
        return secret
    }

    // MARK: certificate

    private func parseCertificate(_ node: Node, _ path: FieldPath) -> CertificateAuthConfiguration? {
        guard let cert = CheckedMapping(node, path: path, allowedKeys: Keys.certificate, diagnostics: diagnostics)
        else {
            return nil
        }
        let passphrase = cert["passphrase"].flatMap { passphraseNode -> Secret? in
            let field = path.appending("passphrase")
            guard let text = diagnostics.string(passphraseNode, field) else { return nil }
            guard let reference = reference(text, plainIsPath: false, at: passphraseNode, field) else { return nil }
            return loadSecret(reference, at: passphraseNode, field, trimNewline: true)
        }
        let passphraseFailed = cert.has("passphrase") && passphrase == nil

        switch (cert["cert_file"], cert["pkcs12_file"]) {
        case (let certNode?, nil):
            let field = path.appending("cert_file")
            let chain = diagnostics.string(certNode, field).flatMap { text -> (bytes: [UInt8], origin: String)? in
                let resolved = SourceReader.resolve(text, against: baseDirectory)
                switch SourceReader.readFile(resolved) {
                case .failure(let problem):
                    diagnostics.error(at: certNode, field.text, problem.message)
                    return nil
                case .success(let bytes):
                    guard PEMCheck.hasCertificate(bytes) else {
                        let hint =
                            PEMCheck.isPEM(bytes)
                            ? "" : "; for a PKCS#12 (.p12) bundle use pkcs12_file: instead"
                        diagnostics.error(
                            at: certNode, field.text,
                            "\(resolved) does not hold a PEM certificate (-----BEGIN CERTIFICATE-----)\(hint)")
                        return nil
                    }
                    return (bytes, resolved)
                }
            }
            let key = privateKey(in: cert, path, what: "the certificate's private key")
            guard let chain, let key, !passphraseFailed else { return nil }
            return CertificateAuthConfiguration(
                identity: .pem(certificateChain: chain.bytes, privateKey: key), passphrase: passphrase,
                origin: chain.origin)
        case (nil, let bundleNode?):
            let field = path.appending("pkcs12_file")
            for extra in ["key_file", "key"] where cert.has(extra) {
                diagnostics.error(
                    at: cert.keyNode(extra), path.appending(extra).text,
                    "not used with pkcs12_file: (the PKCS#12 bundle holds the key); remove it")
            }
            guard let text = diagnostics.string(bundleNode, field) else { return nil }
            guard let reference = reference(text, plainIsPath: true, at: bundleNode, field),
                let bundle = loadSecret(reference, at: bundleNode, field, trimNewline: false)
            else { return nil }
            if PEMCheck.isPEM(bundle.bytes) {
                diagnostics.error(
                    at: bundleNode, field.text,
                    "\(bundle.origin) is PEM text, not a PKCS#12 (.p12) bundle; use cert_file: and key_file: instead")
                return nil
            }
            guard !passphraseFailed, !cert.has("key_file"), !cert.has("key") else { return nil }
            return CertificateAuthConfiguration(
                identity: .pkcs12(bundle), passphrase: passphrase,
                origin: bundle.origin.hasPrefix("file ") ? String(bundle.origin.dropFirst(5)) : bundle.origin)
        case (.some, .some):
            diagnostics.error(
                at: cert.keyNode("pkcs12_file"), path.appending("pkcs12_file").text,
                "give either cert_file: (PEM, with key_file:) or pkcs12_file:, not both")
            return nil
        case (nil, nil):
            diagnostics.error(
                at: cert.node, path.appending("cert_file").text,
                "is required (a PEM certificate, with key_file:), or give pkcs12_file: instead")
            return nil
        }
    }

    // MARK: secrets

    /// Parses a secret reference, reporting malformed ones without repeating a value that might be the secret.
    func reference(_ text: String, plainIsPath: Bool, at node: Node, _ field: FieldPath) -> SecretReference? {
        switch SecretReference.parse(text, plainIsPath: plainIsPath) {
        case .success(let reference):
            return reference
        case .failure(.badEnvironmentName):
            diagnostics.error(
                at: node, field.text, "env: must be followed by an environment variable name (letters, digits, _)")
        case .failure(.emptyPath):
            diagnostics.error(at: node, field.text, "file: must be followed by a path")
        case .failure(.notAReference):
            diagnostics.error(
                at: node, field.text,
                "must be a reference, env:NAME or file:PATH; secrets are never written in the tenant file itself")
        }
        return nil
    }

    func loadSecret(_ reference: SecretReference, at node: Node, _ field: FieldPath, trimNewline: Bool) -> Secret? {
        switch reader.load(reference, baseDirectory: baseDirectory, trimNewline: trimNewline) {
        case .success(let secret):
            if case .file(let path) = reference {
                let resolved = SourceReader.resolve(path, against: baseDirectory)
                if let mode = FilePermissions.groupOrOthersMode(resolved) {
                    diagnostics.warning(
                        at: node, field.text,
                        "\(resolved) can be read by group or others (mode \(mode)); a secret file should be 0600 (chmod 600 \(resolved))"
                    )
                }
            }
            return secret
        case .failure(let problem):
            diagnostics.error(at: node, field.text, problem.message)
            return nil
        }
    }
}
