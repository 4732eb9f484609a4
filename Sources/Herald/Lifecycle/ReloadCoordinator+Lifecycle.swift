import Foundation
import HeraldConfig
import HeraldCore
import Yams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// The tenant lifecycle: create, change, delete a tenant and its API keys through its files,
// checked exactly as a reload checks them, one change at a time under the reload lock. The admin
// API and `herald tenants` go through these functions only.
extension ReloadCoordinator {
    // MARK: Create

    /// Creates a tenant: its file and credential files are written to a staging directory,
    /// checked in full (the file parses, the credential loads, a token signs, the certificate
    /// covers every topic, the TLS context and the plugins build), then moved into the tenants
    /// directory (credential files first, the tenant file last, each by a rename) and the tenant
    /// is loaded. Anything refused leaves the tenants directory as it was.
    ///
    /// Files: `<id>.yaml` and, under `<id>/`, `AuthKey_<key ID>.p8`, or `certificate.pem` and
    /// `certificate.key`, or `bundle.p12` and `passphrase`, and `webhook.secret` when the draft
    /// uploads the webhook's secret; all mode 0600.
    ///
    /// - Throws: ``TenantLifecycleError``: `conflict` (the ID is taken), `invalid` (with the
    ///   field), `writeFailed`.
    @discardableResult
    public func createTenant(_ draft: TenantDraft) async throws(TenantLifecycleError) -> ReloadReport {
        try TenantLifecycleRules.checkKeyName(draft.apiKeyName)
        try TenantLifecycleRules.checkTopics(in: draft.sections.lazy.map { ($0.0, Optional($0.1)) })
        guard draft.credential.byteCount > 0 else { throw .invalid("the credential is empty", field: "auth") }
        guard draft.credential.byteCount <= configuration.maximumUploadBytes else {
            throw .invalid("the credential is larger than \(configuration.maximumUploadBytes) bytes", field: "auth")
        }
        var prepared = draft
        var secretFiles: [CredentialFile] = []
        if let secret = draft.webhookSecret {
            try Self.checkWebhookSecret(secret)
            let path = Self.webhookSecretPath(draft.id)
            guard let index = prepared.sections.firstIndex(where: { $0.0 == "webhook" }) else {
                throw .invalid("is required with the webhook's secret (the URL the events go to)", field: "webhook.url")
            }
            prepared.sections[index].1 = try Self.webhook(prepared.sections[index].1, secretReference: "file:" + path)
            secretFiles.append(CredentialFile(relativePath: path, bytes: secret))
        }
        let draft = prepared
        return try await lock.withLock { () async throws(TenantLifecycleError) -> ReloadReport in
            let directory = configuration.tenantsDirectory
            try refuseTakenID(draft.id)
            let staging = try makeStagingDirectory()
            defer { try? FileManager.default.removeItem(atPath: staging) }

            // 1. Write everything to the staging directory, laid out as it will be in place.
            let (auth, credentialFiles) = Self.credentialLayout(draft)
            for file in credentialFiles + secretFiles {
                do {
                    try SecretFileWriter.write(file.bytes, to: staging + "/" + file.relativePath, permissions: 0o600)
                } catch {
                    throw .writeFailed("the credential could not be written: \(error)")
                }
            }
            let text: String
            do {
                text = try TenantFileYAML.text(Self.tenantDocument(draft, auth: auth), header: Self.createdHeader(at: router.configuration.clock.date))
            } catch {
                throw .invalid("the settings cannot be written as YAML: \(error)", field: nil)
            }
            let stagedFile = staging + "/\(draft.id).yaml"

            // 2. Check it in full, from the staging directory.
            _ = try await check(yaml: text, file: stagedFile, expecting: draft.id)

            // 3. Move it in place: credential files first (a directory of their own), the tenant file last.
            let finalDirectory = directory + "/\(draft.id)"
            let finalFile = directory + "/\(draft.id).yaml"
            do {
                try SecretFileWriter.write(Array(text.utf8), to: stagedFile, permissions: 0o600)
                if rename(staging + "/\(draft.id)", finalDirectory) != 0 {
                    throw SecretFileWriter.WriteError(path: finalDirectory, operation: "move the credential files to", code: errno)
                }
                if rename(stagedFile, finalFile) != 0 {
                    let failure = SecretFileWriter.WriteError(path: finalFile, operation: "move the tenant file to", code: errno)
                    try? FileManager.default.removeItem(atPath: finalDirectory)
                    throw failure
                }
            } catch {
                throw .writeFailed("\(error)")
            }
            logger.notice(
                "tenant created through the lifecycle API; loading",
                metadata: ["herald.tenant": "\(draft.id)", "herald.file": "\(finalFile)"])

            // 4. Load it (as a reload of that tenant does).
            do throws(ReloadError) {
                return try await reloadHoldingLock(tenant: draft.id, revoke: false, trigger: .api)
            } catch {
                try? FileManager.default.removeItem(atPath: finalFile)
                try? FileManager.default.removeItem(atPath: finalDirectory)
                throw Self.lifecycleError(error, file: finalFile)
            }
        }
    }

    // MARK: Change

    /// Changes a tenant's file (settings or API keys): the new file is checked in full first,
    /// then written (atomically, same permissions) and the tenant is swapped like a reload swaps
    /// it. When the swap fails, the old file is put back. The file is rewritten from its YAML
    /// structure: comments in it are not kept.
    @discardableResult
    public func updateTenant(_ id: TenantID, _ change: TenantFileChange) async throws(TenantLifecycleError) -> ReloadReport {
        switch change {
        case .sections(let sections, let webhookSecret):
            try TenantLifecycleRules.checkTopics(in: sections)
            if let webhookSecret { try Self.checkWebhookSecret(webhookSecret) }
        case .addAPIKey(let name, _): try TenantLifecycleRules.checkKeyName(name)
        case .removeAPIKey: break
        }
        return try await lock.withLock { () async throws(TenantLifecycleError) -> ReloadReport in
            guard let file = router.runtime(for: id)?.configuration.sourceFile else {
                throw .notFound("tenant '\(id)' is not loaded")
            }
            guard let data = FileManager.default.contents(atPath: file), let original = String(data: data, encoding: .utf8),
                let root = try? Yams.compose(yaml: original), var mapping = root.mapping
            else {
                throw .writeFailed("\(file) cannot be read as YAML")
            }
            try Self.apply(change, to: &mapping, tenant: id)
            let text: String
            do {
                text = try TenantFileYAML.text(.mapping(mapping))
            } catch {
                throw .invalid("the settings cannot be written as YAML: \(error)", field: nil)
            }
            // An uploaded webhook secret goes in place first: the check reads it. Refused, it is
            // put back as it was (and a directory made for it goes).
            var secretBackup: SecretFileWriter.Backup? = nil
            var madeDirectory: String? = nil
            if case .sections(_, let secret?) = change {
                let path = (Router.directory(of: file) as NSString).appendingPathComponent(Self.webhookSecretPath(id))
                let directory = (path as NSString).deletingLastPathComponent
                if !FileManager.default.fileExists(atPath: directory) { madeDirectory = directory }
                secretBackup = SecretFileWriter.backup(path)
                do {
                    try SecretFileWriter.write(secret, to: path, permissions: 0o600)
                } catch {
                    throw .writeFailed("the webhook's secret could not be written: \(error)")
                }
            }
            func putSecretBack() {
                guard let secretBackup else { return }
                try? SecretFileWriter.restore(secretBackup)
                if let madeDirectory, (try? FileManager.default.contentsOfDirectory(atPath: madeDirectory))?.isEmpty == true {
                    try? FileManager.default.removeItem(atPath: madeDirectory)
                }
            }
            do throws(TenantLifecycleError) {
                _ = try await check(yaml: text, file: file, expecting: id)
            } catch {
                putSecretBack()
                throw error
            }

            let backup = SecretFileWriter.backup(file)
            do {
                try SecretFileWriter.write(Array(text.utf8), to: file, permissions: backup.permissions)
            } catch {
                putSecretBack()
                throw .writeFailed("\(error)")
            }
            do throws(ReloadError) {
                let report = try await reloadHoldingLock(tenant: id, revoke: false, trigger: .api)
                logger.notice("tenant changed through the lifecycle API", metadata: ["herald.tenant": "\(id)"])
                return report
            } catch {
                try? SecretFileWriter.restore(backup)
                putSecretBack()
                throw Self.lifecycleError(error, file: file)
            }
        }
    }

    // MARK: Delete

    /// Deletes a tenant: it stops taking sends at once, its sends in flight finish and its
    /// connections close (as when its file is removed), and its file and the credential files
    /// only it uses inside the tenants directory move to `<tenants>/.archive/<id>-<time>/`. Its
    /// batch items stay in the store (paused while no tenant of that ID is loaded).
    public func deleteTenant(_ id: TenantID) async throws(TenantLifecycleError) -> TenantDeletion {
        try await lock.withLock { () async throws(TenantLifecycleError) -> TenantDeletion in
            guard let configuration = router.runtime(for: id)?.configuration else {
                throw .notFound("tenant '\(id)' is not loaded")
            }
            let directory = URL(fileURLWithPath: self.configuration.tenantsDirectory).standardizedFileURL.path
            let others = Set(
                router.tenantIDs.filter { $0 != id }.compactMap { router.runtime(for: $0)?.configuration }
                    .flatMap(DirectoryFingerprint.referencedFiles).map(Self.standardized))
            let own = DirectoryFingerprint.referencedFiles(of: configuration).map(Self.standardized)
                .filter { $0.hasPrefix(directory + "/") && !others.contains($0) }
            let stamp = Self.archiveStamp(router.configuration.clock.date)
            let archive = directory + "/.archive/\(id)-\(stamp)"
            var moved: [String] = []
            do {
                try FileManager.default.createDirectory(
                    atPath: archive, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                // The tenant file first: from here the tenant is gone for any reload.
                for path in [Self.standardized(configuration.sourceFile)] + Array(Set(own)).sorted() {
                    let target = archive + "/" + String(path.dropFirst(directory.count + 1))
                    try FileManager.default.createDirectory(
                        atPath: (target as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                        attributes: [.posixPermissions: 0o700])
                    if rename(path, target) != 0 {
                        throw SecretFileWriter.WriteError(path: path, operation: "move to the archive", code: errno)
                    }
                    moved.append(path)
                }
            } catch {
                // Put back what moved; the tenant keeps running.
                for path in moved.reversed() {
                    _ = rename(archive + "/" + String(path.dropFirst(directory.count + 1)), path)
                }
                throw .writeFailed("the tenant's files could not be archived: \(error)")
            }
            // Empty credential directories left behind (`<id>/`) go too.
            for path in Set(moved.map { ($0 as NSString).deletingLastPathComponent }) where path != directory {
                if (try? FileManager.default.contentsOfDirectory(atPath: path))?.isEmpty == true {
                    try? FileManager.default.removeItem(atPath: path)
                }
            }
            let report: ReloadReport
            do throws(ReloadError) {
                report = try await reloadHoldingLock(tenant: id, revoke: false, trigger: .api)
            } catch {
                throw Self.lifecycleError(error, file: configuration.sourceFile)
            }
            logger.notice(
                "tenant deleted through the lifecycle API; its files are archived",
                metadata: ["herald.tenant": "\(id)", "herald.archive": "\(archive)"])
            return TenantDeletion(report: report, archiveDirectory: archive, archivedFiles: moved)
        }
    }

    // MARK: Checks

    /// The ID must be free: no tenant runs under it, no file declares it (loaded or not), and
    /// neither `<id>.yaml` nor `<id>/` exists in the tenants directory.
    private func refuseTakenID(_ id: TenantID) throws(TenantLifecycleError) {
        let directory = configuration.tenantsDirectory
        if router.runtime(for: id) != nil { throw .conflict("a tenant with ID '\(id)' exists already") }
        for path in ["\(directory)/\(id).yaml", "\(directory)/\(id).yml", "\(directory)/\(id)"]
        where FileManager.default.fileExists(atPath: path) {
            throw .conflict("\(path) exists already; tenant ID '\(id)' is taken")
        }
        let load: TenantDirectoryLoad
        do {
            load = try TenantLoader(environment: router.configuration.environment).loadDirectory(directory)
        } catch {
            throw .writeFailed("the tenants directory cannot be read: \(error)")
        }
        if let taken = load.tenants.first(where: { $0.id == id })?.sourceFile ?? load.failures.first(where: { $0.tenantID == id })?.file {
            throw .conflict("\(taken) declares tenant ID '\(id)' already")
        }
    }

    /// Parses `yaml` as the tenant file `file` and validates the result in full (the runtime it
    /// builds is discarded: it never opened a connection).
    private func check(yaml: String, file: String, expecting id: TenantID) async throws(TenantLifecycleError) -> TenantConfiguration {
        let tenant: TenantConfiguration
        do {
            tenant = try TenantLoader(environment: router.configuration.environment).parseTenant(yaml: yaml, file: file)
        } catch {
            throw .invalid(error)
        }
        guard tenant.id == id else { throw .invalid("the tenant ID cannot change", field: "id") }
        switch await validate(tenant) {
        case .invalid(let message):
            throw .validation(message, file: file)
        case .valid(let runtime):
            await runtime.shutdown()
            return tenant
        }
    }

    private func makeStagingDirectory() throws(TenantLifecycleError) -> String {
        let path = configuration.tenantsDirectory + "/.staging-" + UUID().uuidString.prefix(8).lowercased()
        do {
            try FileManager.default.createDirectory(
                atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        } catch {
            throw .writeFailed("cannot create a staging directory in \(configuration.tenantsDirectory): \(error)")
        }
        return path
    }

    static func lifecycleError(_ error: ReloadError, file: String) -> TenantLifecycleError {
        if error.isUnknownTenant { return .notFound(error.message) }
        if error.isValidationFailure { return .validation(error.message, file: file) }
        return .writeFailed(error.message)
    }

    // MARK: The tenant file

    /// The most API keys one tenant may list (each is checked at every request's authentication).

    struct CredentialFile {
        var relativePath: String
        var bytes: [UInt8]
    }

    /// The `auth:` section of a new tenant and the files it points at (relative to the tenant file).
    static func credentialLayout(_ draft: TenantDraft) -> (auth: JSONValue, files: [CredentialFile]) {
        let folder = draft.id.rawValue
        switch draft.credential {
        case .token(let keyID, let pem):
            // The key ID is checked by the tenant file parser; it is only a file name here when it is sane.
            let name = isAppleIdentifier(keyID) ? "AuthKey_\(keyID).p8" : "AuthKey.p8"
            return (
                .object([("token", .object([("key_id", .string(keyID)), ("key_file", .string("\(folder)/\(name)"))]))]),
                [CredentialFile(relativePath: "\(folder)/\(name)", bytes: pem)]
            )
        case .certificatePEM(let pem):
            let blocks = PEMText.blocks(in: pem)
            let chain = blocks.filter { $0.label == "CERTIFICATE" }.map(\.text).joined()
            let key = blocks.filter { $0.label.hasSuffix("PRIVATE KEY") }.map(\.text).joined()
            return (
                .object([
                    (
                        "certificate",
                        .object([
                            ("cert_file", .string("\(folder)/certificate.pem")), ("key_file", .string("\(folder)/certificate.key")),
                        ])
                    )
                ]),
                [
                    CredentialFile(relativePath: "\(folder)/certificate.pem", bytes: Array(chain.utf8)),
                    CredentialFile(relativePath: "\(folder)/certificate.key", bytes: Array(key.utf8)),
                ]
            )
        case .pkcs12(let bundle, let passphrase):
            return (
                .object([
                    (
                        "certificate",
                        .object([
                            ("pkcs12_file", .string("\(folder)/bundle.p12")), ("passphrase", .string("file:\(folder)/passphrase")),
                        ])
                    )
                ]),
                [
                    CredentialFile(relativePath: "\(folder)/bundle.p12", bytes: bundle),
                    CredentialFile(relativePath: "\(folder)/passphrase", bytes: Array(passphrase.utf8)),
                ]
            )
        }
    }

    static func tenantDocument(_ draft: TenantDraft, auth: JSONValue) -> Node {
        var members: [(String, JSONValue)] = [("id", .string(draft.id.rawValue)), ("team_id", .string(draft.teamID)), ("auth", auth)]
        members += draft.sections
        members.append(
            ("api_keys", .array([.object([("name", .string(draft.apiKeyName)), ("sha256", .string(draft.apiKeySHA256))])])))
        return TenantFileYAML.node(.object(members))
    }

    static func createdHeader(at date: Date) -> String {
        "Tenant created through Herald's admin API on \(Date.ISO8601FormatStyle().format(date)).\n"
            + "Changed through the admin API (PATCH /admin/tenants/{id}, API keys), or by hand followed by a reload."
    }

    /// Applies a change to the tenant file's top-level mapping.
    static func apply(_ change: TenantFileChange, to mapping: inout Node.Mapping, tenant: TenantID) throws(TenantLifecycleError) {
        switch change {
        case .sections(let sections, let webhookSecret):
            if webhookSecret != nil, !sections.contains(where: { $0.0 == "webhook" && $0.1 != nil && $0.1 != .null }) {
                throw .invalid("is required with the webhook's secret (the URL the events go to)", field: "webhook.url")
            }
            for (name, value) in sections {
                var value = value
                if name == "webhook", let given = value, given != .null {
                    if webhookSecret != nil {
                        value = try webhook(given, secretReference: "file:" + webhookSecretPath(tenant))
                    } else if case .object(let members) = given, !members.contains(where: { $0.0 == "secret" }),
                        let current = mapping["webhook"]?.mapping?["secret"]?.string
                    {
                        // The secret stays as it is when only the other settings change.
                        value = .object(members + [("secret", .string(current))])
                    }
                }
                mapping[name] = value.map(TenantFileYAML.node)
            }
        case .addAPIKey(let name, let sha256Hex):
            var keys = mapping["api_keys"]?.sequence ?? Node.Sequence()
            if keys.contains(where: { $0.mapping?["name"]?.string == name }) {
                throw .conflict("tenant '\(tenant)' has an API key named '\(name)' already")
            }
            guard keys.count < TenantLifecycleRules.maximumAPIKeys else {
                throw .invalid("a tenant has at most \(TenantLifecycleRules.maximumAPIKeys) API keys; remove one first", field: "api_keys")
            }
            keys.append(TenantFileYAML.node(.object([("name", .string(name)), ("sha256", .string(sha256Hex))])))
            mapping["api_keys"] = .sequence(keys)
        case .removeAPIKey(let name):
            guard var keys = mapping["api_keys"]?.sequence,
                let index = keys.firstIndex(where: { $0.mapping?["name"]?.string == name })
            else {
                throw .notFound("tenant '\(tenant)' has no API key named '\(name)'")
            }
            keys.remove(at: index)
            mapping["api_keys"] = .sequence(keys)
        }
    }

    // MARK: The webhook's secret

    /// Where an uploaded webhook secret is written, relative to the tenant file.
    static func webhookSecretPath(_ id: TenantID) -> String { "\(id.rawValue)/webhook.secret" }

    /// An uploaded webhook secret: at least ``TenantWebhook/minimumSecretBytes`` bytes, at most 4 KiB.
    static func checkWebhookSecret(_ secret: [UInt8]) throws(TenantLifecycleError) {
        guard secret.count >= TenantWebhook.minimumSecretBytes else {
            throw .invalid("must be at least \(TenantWebhook.minimumSecretBytes) bytes", field: "webhook.secret")
        }
        guard secret.count <= 4096 else { throw .invalid("must be at most 4096 bytes", field: "webhook.secret") }
    }

    /// The `webhook` section `value` with its `secret` set to `reference` (an uploaded secret's
    /// file); refused when it is no mapping or gives a `secret` of its own.
    static func webhook(_ value: JSONValue?, secretReference reference: String) throws(TenantLifecycleError) -> JSONValue {
        guard case .object(let members)? = value else {
            throw .invalid("must be a mapping with url (and the other webhook settings)", field: "webhook")
        }
        guard !members.contains(where: { $0.0 == "secret" }) else {
            throw .invalid("give the webhook's secret either as a reference (env:NAME or file:PATH) or as a value, not both", field: "webhook.secret")
        }
        return .object(members + [("secret", .string(reference))])
    }

    static func standardized(_ path: String) -> String {
        URL(fileURLWithPath: path).standardizedFileURL.path
    }

    static func archiveStamp(_ date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        return "\(seconds)-" + UUID().uuidString.prefix(6).lowercased()
    }
}
