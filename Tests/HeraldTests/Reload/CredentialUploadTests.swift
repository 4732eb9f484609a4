import Crypto
import Foundation
import Herald
import HeraldCore
import Testing

/// `uploadCredentials`: the new key or certificate is written beside the tenant file (0600,
/// atomically), the tenant reloads; a credential that does not validate is rolled back.
@Suite("Credential uploads")
struct CredentialUploadTests {
    static func permissions(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test("a new .p8 with a new key ID: written 0600 beside the old key, key_id and key_file updated, sent with")
    func tokenKeyWithNewID() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme", extra: "# a comment the upload keeps\n")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1)).status == 200)
            let before = try rig.read("acme.yaml")

            let pem = Array(("# uploaded\n" + rig.keys["KEYB000001"]!.pemRepresentation + "\n").utf8)
            let report = try await rig.coordinator.uploadCredentials(
                tenant: id, .tokenKey(pem: pem, keyID: "KEYB000001"))
            #expect(report.reloaded == [id])
            #expect(report.trigger == .upload)

            let newKey = rig.path("keys/AuthKey_KEYB000001.p8")
            #expect(FileManager.default.contents(atPath: newKey).map(Array.init) == pem)
            #expect(try Self.permissions(newKey) == 0o600)
            let after = try rig.read("acme.yaml")
            #expect(after.contains("key_id: KEYB000001"))
            #expect(after.contains("key_file: keys/AuthKey_KEYB000001.p8"))
            #expect(after.contains("# a comment the upload keeps"))
            // Only those two values changed.
            let changed = zip(before.split(separator: "\n"), after.split(separator: "\n")).filter { $0 != $1 }
            #expect(changed.count == 2)
            // No temporary files left behind.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: rig.path("keys")).filter {
                $0.hasPrefix(".")
            }
            #expect(leftovers.isEmpty)

            #expect(try await rig.router.send(tenant: id, notification: rig.note(2)).status == 200)
            #expect(rig.sandbox.requests.last?.keyID == "KEYB000001")
        }
    }

    @Test("a tenant with several keys: the upload replaces the entry it names, the other keys stay")
    func oneOfSeveralKeys() async throws {
        try await withReloadRig(keyIDs: ["KEYA000001", "KEYB000001", "KEYC000001"]) { rig in
            try rig.writeTokenTenant("acme")
            try rig.write(rig.keys["KEYB000001"]!.pemRepresentation + "\n", to: "keys/AuthKey_KEYB000001.p8")
            let yaml = try rig.read("acme.yaml").replacingOccurrences(
                of: "    key_id: KEYA000001\n    key_file: keys/AuthKey_KEYA000001.p8\n",
                with: """
                    - key_id: KEYA000001
                      key_file: keys/AuthKey_KEYA000001.p8
                      environment: production
                    - {key_id: KEYB000001, key_file: keys/AuthKey_KEYB000001.p8, environment: development}

                """)
            try rig.write(yaml, to: "acme.yaml")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1), environment: .development).status == 200)
            #expect(rig.sandbox.requests.last?.keyID == "KEYB000001")

            // Without naming the entry: refused, nothing written.
            let pem = Array(rig.keys["KEYC000001"]!.pemRepresentation.utf8)
            await #expect(throws: ReloadError.self) {
                try await rig.coordinator.uploadCredentials(tenant: id, .tokenKey(pem: pem, keyID: "KEYC000001"))
            }
            #expect(try rig.read("acme.yaml") == yaml)

            try await rig.coordinator.uploadCredentials(
                tenant: id, .tokenKey(pem: pem, keyID: "KEYC000001", replacing: "KEYB000001"))
            let after = try rig.read("acme.yaml")
            #expect(after.contains("{key_id: KEYC000001, key_file: keys/AuthKey_KEYC000001.p8, environment: development}"), "\(after)")
            #expect(after.contains("  - key_id: KEYA000001\n      key_file: keys/AuthKey_KEYA000001.p8\n      environment: production"))
            #expect(try await rig.router.send(tenant: id, notification: rig.note(2), environment: .development).status == 200)
            #expect(rig.sandbox.requests.last?.keyID == "KEYC000001")
            #expect(try await rig.router.send(tenant: id, notification: rig.note(3), environment: .production).status == 200)
            #expect(rig.sandbox.requests.last?.keyID == "KEYA000001")
        }
    }

    @Test("quoted values and key: file: references are updated in place, keeping their lines")
    func quotedYAML() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            let yaml = try rig.read("acme.yaml")
                .replacingOccurrences(of: "key_id: KEYA000001", with: "key_id: \"KEYA000001\"   # quoted")
                .replacingOccurrences(
                    of: "key_file: keys/AuthKey_KEYA000001.p8", with: "key: 'file:keys/AuthKey_KEYA000001.p8'")
            try rig.write(yaml, to: "acme.yaml")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            #expect(rig.router.runtime(for: id) != nil)
            let pem = Array(rig.keys["KEYB000001"]!.pemRepresentation.utf8)
            try await rig.coordinator.uploadCredentials(tenant: id, .tokenKey(pem: pem, keyID: "KEYB000001"))
            let after = try rig.read("acme.yaml")
            #expect(after.contains("key_id: KEYB000001   # quoted"), "\(after)")
            #expect(after.contains(#"key: "file:keys/AuthKey_KEYB000001.p8""#), "\(after)")
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1)).status == 200)
            #expect(rig.sandbox.requests.last?.keyID == "KEYB000001")
        }
    }

    @Test("a .p8 for the same key ID replaces the key file in place")
    func tokenKeySameID() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            let yaml = try rig.read("acme.yaml")
            // Same ID, same key, other bytes (a comment): unchanged meaning except the key file bytes.
            let pem = Array(("# re-uploaded\n" + rig.keys["KEYA000001"]!.pemRepresentation + "\n").utf8)
            try await rig.coordinator.uploadCredentials(tenant: id, .tokenKey(pem: pem, keyID: nil))
            #expect(try rig.read("acme.yaml") == yaml)
            #expect(FileManager.default.contents(atPath: rig.path("keys/AuthKey_KEYA000001.p8")).map(Array.init) == pem)
            #expect(try Self.permissions(rig.path("keys/AuthKey_KEYA000001.p8")) == 0o600)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1)).status == 200)
        }
    }

    @Test("a key the sandbox does not know still validates locally; a broken one is rolled back")
    func brokenUploadRollsBack() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            let running = try #require(rig.router.runtime(for: id))
            let yaml = try rig.read("acme.yaml")
            let key = try #require(FileManager.default.contents(atPath: rig.path("keys/AuthKey_KEYA000001.p8")))

            // A P-384 key: PEM, but it cannot sign ES256.
            let bad = Array(P384.Signing.PrivateKey().pemRepresentation.utf8)
            let error = await #expect(throws: ReloadError.self) {
                try await rig.coordinator.uploadCredentials(tenant: id, .tokenKey(pem: bad, keyID: "KEYC000001"))
            }
            #expect(error?.isValidationFailure == true)
            #expect(try rig.read("acme.yaml") == yaml)
            #expect(!FileManager.default.fileExists(atPath: rig.path("keys/AuthKey_KEYC000001.p8")))
            #expect(FileManager.default.contents(atPath: rig.path("keys/AuthKey_KEYA000001.p8")) == key)
            #expect(rig.router.runtime(for: id) === running)
            #expect(rig.coordinator.status(of: id)?.lastError != nil)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1)).status == 200)
            // The error never quotes the upload.
            #expect(!(error?.message.contains("BEGIN") ?? true))
        }
    }

    @Test("uploads that cannot apply are refused before anything is written", arguments: [0, 1, 2, 3])
    func refusedUploads(_ variant: Int) async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("acme")
            let upload: CredentialUpload
            switch variant {
            case 0: upload = .certificatePEM(Array(try rig.issueCertificate().certificatePEM.utf8))  // wrong kind
            case 1: upload = .tokenKey(pem: Array("not a key".utf8), keyID: nil)
            case 2: upload = .tokenKey(pem: Array(repeating: 65, count: 1 << 20), keyID: nil)  // too large
            default: upload = .tokenKey(pem: Array(rig.keys["KEYB000001"]!.pemRepresentation.utf8), keyID: "bad id")
            }
            let before = try FileManager.default.contentsOfDirectory(atPath: rig.path("keys"))
            let error = await #expect(throws: ReloadError.self) {
                try await rig.coordinator.uploadCredentials(tenant: id, upload)
            }
            #expect(error?.isUploadRejected == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: rig.path("keys")) == before)
        }
    }

    @Test(
        "a certificate tenant: new certificate and key replace cert_file and key_file (0600), revoke cuts the old one")
    func certificateUpload() async throws {
        try await withReloadRig { rig in
            try rig.writeCertificateTenant("certco", certificate: try rig.issueCertificate())
            try await rig.coordinator.reloadAll(trigger: .startup)
            let id = try TenantID("certco")
            let topic = ReloadRig.certTopics[0]
            #expect(try await rig.router.send(tenant: id, notification: rig.note(1, topic: topic)).status == 200)
            let old = try #require(rig.router.runtime(for: id))

            let next = try rig.issueCertificate()
            let bundle = Array((next.certificatePEM + next.privateKeyPEM + "\n").utf8)
            let report = try await rig.coordinator.uploadCredentials(tenant: id, .certificatePEM(bundle), revoke: true)
            #expect(report.revoked == [id])
            #expect(old.isRevoked)
            #expect(try rig.read("certs/certco.pem").contains("BEGIN CERTIFICATE"))
            #expect(!(try rig.read("certs/certco.pem").contains("PRIVATE KEY")))
            #expect(try rig.read("certs/certco.key").contains("PRIVATE KEY"))
            #expect(try Self.permissions(rig.path("certs/certco.pem")) == 0o600)
            #expect(try Self.permissions(rig.path("certs/certco.key")) == 0o600)
            #expect(try await rig.router.send(tenant: id, notification: rig.note(2, topic: topic)).status == 200)
            #expect(rig.router.runtime(for: id)?.credentialIdentity != old.credentialIdentity)
        }
    }
}
