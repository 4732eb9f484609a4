import Crypto
import Foundation

/// The demo PKI the repository ships for `herald sandbox` and the demo tenants: a CA, the demo
/// token key pair and the demo client certificate. Every file starts with ``SandboxPEM/demoHeader``.
public enum SandboxDemoCredentials {
    public static let tokenTeamID = "DEMOTEAM01"
    public static let tokenKeyID = "DEMOKEY001"
    public static let tokenTopics = ["com.example.herald.demo", "com.example.herald.demo.voip"]
    public static let certificateTeamID = "DEMOTEAM02"
    public static let certificateTopics = ["com.example.herald.certdemo", "com.example.herald.certdemo.voip"]

    /// The files, relative to the config directory (`config/sandbox`) and the tenants directory.
    public static let caCertificateFile = "demo-ca.pem"
    public static let caPrivateKeyFile = "demo-ca.key"
    public static let tokenPublicKeyFile = "AuthKey_DEMOKEY001.pub.pem"
    public static let tokenPrivateKeyFile = "keys/AuthKey_DEMOKEY001.p8"
    public static let clientCertificateFile = "certs/demo-cert.pem"
    public static let clientPrivateKeyFile = "certs/demo-cert.key"

    /// Writes a fresh demo PKI; returns the paths written. Refuses to overwrite unless `force`.
    @discardableResult
    public static func generate(
        configDirectory: String, tenantsDirectory: String, force: Bool, validFor: TimeInterval = 10 * 365 * 86_400
    ) throws -> [String] {
        let config = URL(fileURLWithPath: configDirectory)
        let tenants = URL(fileURLWithPath: tenantsDirectory)
        let targets = [
            config.appendingPathComponent(caCertificateFile), config.appendingPathComponent(caPrivateKeyFile),
            config.appendingPathComponent(tokenPublicKeyFile), tenants.appendingPathComponent(tokenPrivateKeyFile),
            tenants.appendingPathComponent(clientCertificateFile), tenants.appendingPathComponent(clientPrivateKeyFile),
        ]
        if !force {
            for url in targets where FileManager.default.fileExists(atPath: url.path) {
                throw SandboxError.configuration("\(url.path) exists; pass --force to replace the demo credentials")
            }
        }

        let ca = try SandboxCertificateAuthority.generate()
        let tokenKey = P256.Signing.PrivateKey()
        let now = Date()
        let client = try ca.issueClientCertificate(
            commonName: "Apple Push Services: \(certificateTopics[0]) (Herald demo)", topics: certificateTopics,
            notBefore: now.addingTimeInterval(-3600), notAfter: now.addingTimeInterval(validFor))
        let contents = [
            ca.certificatePEM, ca.privateKeyPEM, tokenKey.publicKey.pemRepresentation, tokenKey.pemRepresentation,
            client.certificatePEM, client.privateKeyPEM,
        ]
        var written: [String] = []
        for (url, pem) in zip(targets, contents) {
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            let isPrivate = url.pathExtension == "key" || url.pathExtension == "p8"
            try Data(SandboxPEM.withDemoHeader(pem).utf8).write(to: url, options: .atomic)
            if isPrivate {
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
            }
            written.append(url.path)
        }
        return written
    }

    /// A provider token for the demo key, read from the tenants directory.
    public static func demoToken(
        privateKeyPath: String, teamID: String = tokenTeamID, keyID: String = tokenKeyID, issuedAt: Date = Date()
    ) throws -> String {
        let text: String
        do {
            text = try String(contentsOfFile: privateKeyPath, encoding: .utf8)
        } catch {
            throw SandboxError.configuration("cannot read \(privateKeyPath)")
        }
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: SandboxPEM.firstBlock(in: text))
        } catch {
            throw SandboxError.configuration("\(privateKeyPath) is not a P-256 private key in PEM")
        }
        return try SandboxJWT.make(teamID: teamID, keyID: keyID, privateKey: key, issuedAt: issuedAt)
    }
}
