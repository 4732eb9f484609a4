import APNsSandbox
import Crypto
import Foundation
import HeraldCore
import JWTKit

/// A started sandbox with one token key and helpers to make tokens and connections.
struct SandboxHarness {
    static let teamID = "TEAM000001"
    static let keyID = "KEY0000001"
    static let topics = ["com.example.app", "com.example.app.voip"]
    static let device = "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0"

    let ca: SandboxCertificateAuthority
    let key: P256.Signing.PrivateKey
    let sandbox: APNsSandbox
    let clock: ManualWallClock

    static func start(
        clock: ManualWallClock = ManualWallClock(Date()),
        _ configure: (inout SandboxConfiguration) -> Void = { _ in }
    ) async throws -> SandboxHarness {
        let ca = try SandboxCertificateAuthority.generate()
        let key = P256.Signing.PrivateKey()
        var configuration = SandboxConfiguration(certificateAuthority: ca)
        configuration.tokenKeys = [
            SandboxTokenKey(teamID: teamID, keyID: keyID, publicKey: key.publicKey, topics: topics)
        ]
        configuration.clock = clock
        configuration.recordPayloads = true
        configure(&configuration)
        let sandbox = try await APNsSandbox.start(configuration)
        return SandboxHarness(ca: ca, key: key, sandbox: sandbox, clock: clock)
    }

    /// A provider token signed with JWTKit (not the sandbox's own code).
    func token(
        issuedAt: Date? = nil, teamID: String = SandboxHarness.teamID, keyID: String = SandboxHarness.keyID,
        key: P256.Signing.PrivateKey? = nil
    ) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PrivateKey(backing: key ?? self.key), kid: JWKIdentifier(string: keyID))
        let claims = APNsClaims(iss: IssuerClaim(value: teamID), iat: IssuedAtClaim(value: issuedAt ?? clock.now))
        return try await keys.sign(claims, kid: JWKIdentifier(string: keyID))
    }

    func bearer(issuedAt: Date? = nil) async throws -> String {
        "bearer " + (try await token(issuedAt: issuedAt))
    }

    func connect(
        clientCertificate: (certificatePEM: String, privateKeyPEM: String)? = nil, alpn: [String] = ["h2"]
    ) async throws -> RawH2Client {
        try await RawH2Client.connect(
            port: sandbox.port, trustRootsPEM: sandbox.trustRootsPEM, clientCertificate: clientCertificate, alpn: alpn)
    }

    /// A connection to the channel management port.
    func connectChannels() async throws -> RawH2Client {
        try await RawH2Client.connect(port: sandbox.channelsPort, trustRootsPEM: sandbox.trustRootsPEM)
    }

    /// A channel management call on `path` (`/1/apps/…`), token-authenticated.
    func channelCall(_ method: String, _ path: String, channel: String? = nil, body: [UInt8] = []) async throws -> RawRequest {
        var request = RawRequest(device: "")
        request.method = method
        request.path = path
        request.authorization = try await bearer()
        request.pushType = nil
        request.body = body
        if let channel { request.extraHeaders.append(("apns-channel-id", channel, .indexable)) }
        return request
    }

    /// A valid broadcast on `channel` to the token key's first topic's app.
    func broadcast(channel: String?, expiration: String? = "0") async throws -> RawRequest {
        var request = RawRequest(device: "")
        request.path = "/4/broadcasts/apps/" + Self.topics[0]
        request.authorization = try await bearer()
        request.pushType = "liveactivity"
        request.priority = "10"
        request.expiration = expiration
        if let channel { request.extraHeaders.append(("apns-channel-id", channel, .indexable)) }
        request.body = Array(#"{"aps":{"event":"update","timestamp":1764460800,"content-state":{"score":"1-0"}}}"#.utf8)
        return request
    }

    /// A valid request for the token key's first topic.
    func validRequest(device: String = SandboxHarness.device) async throws -> RawRequest {
        var request = RawRequest(device: device)
        request.authorization = try await bearer()
        request.topic = Self.topics[0]
        return request
    }

    func stop() async {
        try? await sandbox.shutdown()
    }
}

struct APNsClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    func verify(using algorithm: some JWTAlgorithm) throws {}
}
