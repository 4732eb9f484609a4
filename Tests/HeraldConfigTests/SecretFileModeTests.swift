import Foundation
import HeraldConfig
import HeraldCore
import Testing

/// A key file that group or others can read still loads (refusing it would take a running
/// customer down over a chmod), but the load carries a warning naming the file, the field and
/// the fix.
@Suite("Secret file permissions")
struct SecretFileModeTests {
    @Test("a key file readable by others is a warning at its field; 0600 is not")
    func keyFileModes() throws {
        let fixture = try TenantFixture()
        let key = fixture.path("keys/AuthKey_ABC123DEFG.p8")
        try fixture.write("acme.yaml", TenantFixture.tokenTenant)

        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key)
        let open = try TenantLoader(environment: [:]).loadDirectory(fixture.directory)
        #expect(open.failures.isEmpty)
        #expect(open.tenants.map(\.id.rawValue) == ["acme"])
        let warning = try #require(open.warnings.first)
        #expect(open.warnings.count == 1)
        #expect(warning.field == "auth.token.key_file")
        #expect(warning.location.file == fixture.path("acme.yaml"))
        #expect(warning.location.line == 6)
        #expect(warning.message.contains(key))
        #expect(warning.message.contains("0644"))
        #expect(warning.message.contains("chmod 600"))
        // Never the key itself.
        #expect(!warning.description.contains("PRIVATE KEY"))

        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: key)
        #expect(try TenantLoader(environment: [:]).loadDirectory(fixture.directory).warnings.count == 1)

        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key)
        #expect(try TenantLoader(environment: [:]).loadDirectory(fixture.directory).warnings.isEmpty)
    }

    @Test("secrets from the environment carry no file warning")
    func environmentSecrets() throws {
        let fixture = try TenantFixture()
        let pem = try String(contentsOfFile: fixture.path("keys/AuthKey_ABC123DEFG.p8"), encoding: .utf8)
        try fixture.write(
            "acme.yaml",
            TenantFixture.tokenTenant.replacingOccurrences(
                of: "key_file: keys/AuthKey_ABC123DEFG.p8", with: "key: env:ACME_KEY"))
        let load = try TenantLoader(environment: ["ACME_KEY": pem]).loadDirectory(fixture.directory)
        #expect(load.failures.isEmpty)
        #expect(load.warnings.isEmpty)
    }
}
