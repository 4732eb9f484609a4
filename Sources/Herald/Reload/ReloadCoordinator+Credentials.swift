import Foundation
import HeraldConfig
import HeraldCore
import Yams

/// A new key or certificate for a tenant, as uploaded through the admin API.
public enum CredentialUpload: Sendable {
    /// A `.p8` token signing key (PKCS#8 PEM). `keyID`: the new key's ID when it differs from
    /// the tenant's current `key_id` (a new key from Apple always has a new ID): the key is then
    /// written as `AuthKey_<keyID>.p8` beside the current key file, and the tenant file's
    /// `key_id:` and `key_file:` are updated in place. `replacing`: for a tenant with several
    /// keys (`auth.token` a list), the key ID of the entry the upload replaces (default: the entry
    /// with `keyID`); the other entries stay as they are.
    case tokenKey(pem: [UInt8], keyID: String?, replacing: String? = nil)
    /// A PEM client certificate (leaf first, then intermediates), followed by its PEM private
    /// key when the key changed too. Written over the tenant's `cert_file:` (and `key_file:`).
    case certificatePEM([UInt8])
    /// A PKCS#12 bundle. Written over the tenant's `pkcs12_file:`; its passphrase stays where
    /// the tenant file says (`passphrase: env:…` or `file:…`).
    case pkcs12([UInt8])

    public var kind: AuthKind {
        switch self {
        case .tokenKey: return .token
        case .certificatePEM, .pkcs12: return .certificate
        }
    }

    var byteCount: Int {
        switch self {
        case .tokenKey(let pem, _, _): return pem.count
        case .certificatePEM(let pem): return pem.count
        case .pkcs12(let bytes): return bytes.count
        }
    }
}

extension ReloadCoordinator {
    /// Puts a new key or certificate in place for a tenant and reloads it.
    ///
    /// The credential is written next to the tenant file (where the tenant file points, mode
    /// 0600, atomically: a temporary file renamed over the old one). Then the tenant is reloaded
    /// as ``reload(tenant:revoke:trigger:)`` does. When the new configuration does not validate,
    /// every file written is put back as it was, the tenant keeps running on its old credential,
    /// and the error is thrown (and recorded in ``status(of:)``).
    ///
    /// - Parameter revoke: close the old credential's connections at once (Apple asks for this
    ///   when a key or certificate was revoked); unanswered notifications are resent once.
    /// - Throws: ``ReloadError``: `uploadRejected` (wrong kind, not a key, too large, the tenant
    ///   file cannot be edited), `validationFailed`, `unknownTenant`, `credentialUnchanged`.
    @discardableResult
    public func uploadCredentials(tenant: TenantID, _ upload: CredentialUpload, revoke: Bool = false)
        async throws(ReloadError)
        -> ReloadReport
    {
        guard upload.byteCount > 0 else { throw .uploadRejected("the uploaded credential is empty") }
        guard upload.byteCount <= configuration.maximumUploadBytes else {
            throw .uploadRejected("the uploaded credential is larger than \(configuration.maximumUploadBytes) bytes")
        }
        return try await lock.withLock { () async throws(ReloadError) -> ReloadReport in
            let file = try tenantFile(of: tenant)
            let plan = try planUpload(upload, tenant: tenant, file: file)
            let backups = plan.writes.map { SecretFileWriter.backup($0.path) }
            do {
                for write in plan.writes {
                    try SecretFileWriter.write(write.bytes, to: write.path, permissions: write.permissions)
                }
            } catch {
                restore(backups, tenant: tenant)
                throw .uploadRejected("the credential could not be written: \(error)")
            }
            logger.notice(
                "tenant credential uploaded; reloading",
                metadata: [
                    "herald.tenant": "\(tenant)", "herald.files": "\(plan.writes.map(\.path).joined(separator: ", "))",
                    "herald.revoke": "\(revoke)",
                ])
            do throws(ReloadError) {
                return try await reloadHoldingLock(tenant: tenant, revoke: revoke, trigger: .upload)
            } catch {
                restore(backups, tenant: tenant)
                throw error
            }
        }
    }

    private func restore(_ backups: [SecretFileWriter.Backup], tenant: TenantID) {
        for backup in backups.reversed() {
            do {
                try SecretFileWriter.restore(backup)
            } catch {
                logger.critical(
                    "an uploaded credential could not be rolled back; check the tenant's files",
                    metadata: ["herald.tenant": "\(tenant)", "herald.error": "\(error)"])
            }
        }
    }

    /// The tenant's file: the running runtime's, or the one a failed load attributed to it.
    private func tenantFile(of tenant: TenantID) throws(ReloadError) -> String {
        if let file = router.runtime(for: tenant)?.configuration.sourceFile { return file }
        let load: TenantDirectoryLoad
        do {
            load = try TenantLoader(environment: router.configuration.environment).loadDirectory(
                configuration.tenantsDirectory)
        } catch {
            throw .directoryUnreadable(error.description)
        }
        if let file = load.tenants.first(where: { $0.id == tenant })?.sourceFile
            ?? load.failures.first(where: { $0.tenantID == tenant })?.file
        {
            return file
        }
        throw .unknownTenant(tenant)
    }

    struct UploadPlan {
        struct Write {
            var path: String
            var bytes: [UInt8]
            var permissions: UInt16
        }
        /// In order: credential files first, the tenant file (when edited) last.
        var writes: [Write] = []
    }

    /// Works out which files the upload replaces, from the tenant file's own references.
    func planUpload(_ upload: CredentialUpload, tenant: TenantID, file: String) throws(ReloadError) -> UploadPlan {
        guard let data = FileManager.default.contents(atPath: file), let text = String(data: data, encoding: .utf8)
        else {
            throw .uploadRejected("\(file) cannot be read")
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw .uploadRejected("\(file) is not valid YAML; fix it before uploading a credential")
        }
        guard let auth = root?.mapping?["auth"]?.mapping else {
            throw .uploadRejected("\(file) has no auth: section")
        }
        let base = Router.directory(of: file)
        var plan = UploadPlan()
        let secretMode: UInt16 = 0o600

        switch upload {
        case .tokenKey(let pem, let newKeyID, let replacing):
            let token: Node.Mapping
            let tokenField: String
            if case .sequence(let entries) = auth["token"] {
                // Several keys: the upload replaces one entry, named by the key ID it replaces.
                guard let target = replacing ?? newKeyID else {
                    throw .uploadRejected(
                        "tenant '\(tenant)' has several token keys: name the one the upload replaces (replaces: its key ID)")
                }
                guard
                    let (index, entry) = entries.enumerated().first(where: { $0.element.mapping?["key_id"]?.scalar?.string == target }),
                    let mapping = entry.mapping
                else {
                    let known = entries.compactMap { $0.mapping?["key_id"]?.scalar?.string }.joined(separator: ", ")
                    throw .uploadRejected("\(file): auth.token has no key \(target) to replace (its keys: \(known))")
                }
                token = mapping
                tokenField = "auth.token[\(index)]"
            } else if let mapping = auth["token"]?.mapping {
                if let replacing, replacing != mapping["key_id"]?.scalar?.string {
                    throw .uploadRejected("\(file): auth.token's key is not \(replacing)")
                }
                token = mapping
                tokenField = "auth.token"
            } else {
                throw .uploadRejected(
                    "tenant '\(tenant)' uses certificate auth; upload a certificate, or edit \(file) to switch")
            }
            guard
                PEMText.blocks(in: pem).contains(where: {
                    $0.label.hasSuffix("PRIVATE KEY") && !$0.label.contains("ENCRYPTED")
                })
            else {
                throw .uploadRejected("the upload is not a .p8 key (expected -----BEGIN PRIVATE KEY-----)")
            }
            let reference = try keyReference(in: token, field: tokenField, file: file)
            let currentKeyID = token["key_id"]?.scalar?.string
            if let newKeyID, !Self.isAppleIdentifier(newKeyID) {
                throw .uploadRejected("key_id must be 10 characters, A-Z and 0-9")
            }
            guard let newKeyID, newKeyID != currentKeyID else {
                plan.writes.append(
                    .init(path: resolve(reference.path, against: base), bytes: pem, permissions: secretMode))
                return plan
            }
            // A new key ID: a new file beside the old key, and the tenant file points at it.
            let relative = Self.replacingLastComponent(of: reference.path, with: "AuthKey_\(newKeyID).p8")
            plan.writes.append(.init(path: resolve(relative, against: base), bytes: pem, permissions: secretMode))
            guard let keyIDNode = token["key_id"],
                let keyIDEdit = TenantFileScalarEdit(node: keyIDNode, replacement: newKeyID),
                let pathEdit = TenantFileScalarEdit(node: reference.node, replacement: reference.prefix + relative)
            else {
                throw .uploadRejected(
                    "\(file): \(tokenField).key_id cannot be updated automatically; edit the file by hand")
            }
            let edited: String
            do {
                edited = try TenantFileScalarEdit.apply([keyIDEdit, pathEdit], to: text)
            } catch {
                throw .uploadRejected("\(file): \(error)")
            }
            let mode = SecretFileWriter.backup(file).permissions
            plan.writes.append(.init(path: file, bytes: Array(edited.utf8), permissions: mode))
            return plan

        case .certificatePEM(let pem):
            guard let certificate = auth["certificate"]?.mapping else {
                throw .uploadRejected("tenant '\(tenant)' uses token auth; upload a .p8 key, or edit \(file) to switch")
            }
            guard let certNode = certificate["cert_file"], let certPath = certNode.scalar?.string else {
                throw .uploadRejected(
                    "\(file): auth.certificate has no cert_file: (a PKCS#12 tenant takes a .p12 upload)")
            }
            let blocks = PEMText.blocks(in: pem)
            let certificates = blocks.filter { $0.label == "CERTIFICATE" }
            let keys = blocks.filter { $0.label.hasSuffix("PRIVATE KEY") }
            guard !certificates.isEmpty else {
                throw .uploadRejected("the upload holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
            }
            guard keys.count <= 1, blocks.count == certificates.count + keys.count else {
                throw .uploadRejected(
                    "the upload must hold the certificate chain and at most one private key, nothing else")
            }
            plan.writes.append(
                .init(
                    path: resolve(certPath, against: base), bytes: Array(certificates.map(\.text).joined().utf8),
                    permissions: secretMode))
            if let key = keys.first {
                let reference = try keyReference(in: certificate, field: "auth.certificate", file: file)
                plan.writes.append(
                    .init(
                        path: resolve(reference.path, against: base), bytes: Array(key.text.utf8),
                        permissions: secretMode))
            }
            return plan

        case .pkcs12(let bundle):
            guard let certificate = auth["certificate"]?.mapping else {
                throw .uploadRejected("tenant '\(tenant)' uses token auth; upload a .p8 key, or edit \(file) to switch")
            }
            guard let bundleNode = certificate["pkcs12_file"], var path = bundleNode.scalar?.string else {
                throw .uploadRejected("\(file): auth.certificate has no pkcs12_file: (a PEM tenant takes a PEM upload)")
            }
            if path.hasPrefix("env:") {
                throw .uploadRejected(
                    "\(file): auth.certificate.pkcs12_file reads an environment variable; change it there")
            }
            if path.hasPrefix("file:") { path = String(path.dropFirst(5)) }
            guard PEMText.blocks(in: bundle).isEmpty else {
                throw .uploadRejected("the upload is PEM text, not a PKCS#12 bundle")
            }
            plan.writes.append(.init(path: resolve(path, against: base), bytes: bundle, permissions: secretMode))
            return plan
        }
    }

    private struct KeyReference {
        var node: Node
        /// `file:` when the tenant file writes `key: file:PATH`, "" for `key_file: PATH`.
        var prefix: String
        var path: String
    }

    /// Where a tenant file says its private key is: `key_file: PATH` or `key: file:PATH`.
    private func keyReference(in mapping: Node.Mapping, field: String, file: String) throws(ReloadError) -> KeyReference
    {
        if let node = mapping["key_file"], let path = node.scalar?.string, !path.isEmpty {
            return KeyReference(
                node: node, prefix: "", path: path.hasPrefix("file:") ? String(path.dropFirst(5)) : path)
        }
        if let node = mapping["key"], let value = node.scalar?.string {
            if value.hasPrefix("file:") {
                return KeyReference(node: node, prefix: "file:", path: String(value.dropFirst(5)))
            }
            throw .uploadRejected(
                "\(file): \(field).key reads the key from an environment variable; an upload needs key_file: (a path)")
        }
        throw .uploadRejected("\(file): \(field) has no key_file:")
    }

    private func resolve(_ path: String, against base: String) -> String {
        if path.hasPrefix("/") || base.isEmpty || base == "." { return path }
        return base.hasSuffix("/") ? base + path : base + "/" + path
    }

    static func replacingLastComponent(of path: String, with name: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return name }
        return String(path[...slash]) + name
    }

    static func isAppleIdentifier(_ value: String) -> Bool {
        value.utf8.count == 10
            && value.utf8.allSatisfy {
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
            }
    }
}

/// PEM blocks of an upload (text before, between and after blocks is ignored).
enum PEMText {
    struct Block {
        var label: String
        /// The block from its BEGIN line to its END line, with a final newline.
        var text: String
    }

    static func blocks(in bytes: [UInt8]) -> [Block] {
        guard let text = String(validating: bytes, as: UTF8.self) else { return [] }
        var blocks: [Block] = []
        var current: (label: String, lines: [Substring])?
        for line in text.split(
            omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
        {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current == nil, trimmed.hasPrefix("-----BEGIN "), trimmed.hasSuffix("-----") {
                let label = String(trimmed.dropFirst("-----BEGIN ".count).dropLast(5))
                current = (label, [Substring(trimmed)])
            } else if var block = current {
                block.lines.append(Substring(trimmed))
                if trimmed == "-----END \(block.label)-----" {
                    blocks.append(Block(label: block.label, text: block.lines.joined(separator: "\n") + "\n"))
                    current = nil
                } else {
                    current = block
                }
            }
        }
        return blocks
    }
}
