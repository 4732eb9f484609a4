import Foundation
import NIOSSL
import Testing

@testable import HeraldAPNs

@Suite("The platform's trust roots")
struct PlatformTrustRootsTests {
    @Test("the system's bundle is parsed once and trusted with its directory, beside a tenant's ca_file roots")
    func systemRootsStayBesideTheTenantsRoots() throws {
        let bundlePath = try #require(
            PlatformTrustRoots.bundleSearchPaths.first { FileManager.default.fileExists(atPath: $0) },
            "this machine has a CA bundle")
        let loaded = try #require(PlatformTrustRoots.loaded)
        // The same certificates NIOSSL's default would read, in the same order.
        let parsed = try NIOSSLCertificate.fromPEMFile(bundlePath)
        #expect(!parsed.isEmpty && loaded.bundle == parsed)

        let ca = try NIOSSLCertificate(bytes: Array(try CredentialTestPKI.makeCA().certificatePEM.utf8), format: .pem)
        var tls = TLSConfiguration.makeClientConfiguration()
        PlatformTrustRoots.configure(&tls, additional: [ca])
        #expect(tls.trustRoots == loaded.directory.map { .file($0) } ?? .certificates([]))
        #expect(tls.additionalTrustRoots == [.certificates(parsed + [ca])])
        // Contexts build from it, with and without a tenant's roots.
        _ = try NIOSSLContext(configuration: tls)
        var plain = TLSConfiguration.makeClientConfiguration()
        PlatformTrustRoots.configure(&plain, additional: [])
        #expect(plain.additionalTrustRoots == [.certificates(parsed)])
        _ = try NIOSSLContext(configuration: plain)
    }
}
