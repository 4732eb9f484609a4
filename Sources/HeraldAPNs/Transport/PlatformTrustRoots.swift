import Foundation
import NIOSSL

/// The platform's trust store, read and parsed once per process.
///
/// NIOSSL's default trust (`.default`) has every new client context read and parse the system's
/// CA bundle (about 140 certificates) and look up its hashed directory. Herald builds a context
/// for each certificate tenant, for each token tenant with its own `ca_file`, and one more to
/// validate each tenant file; parsing the bundle again for each of them cost milliseconds a
/// tenant. The roots here are the same NIOSSL would load: the first bundle file of the same
/// search paths as parsed certificates, and the same directory, looked up on demand. A changed
/// system store is read by the next start.
enum PlatformTrustRoots {
    /// The bundle files NIOSSL looks for, in its order (Debian, Ubuntu, Arch, Alpine; Fedora).
    static let bundleSearchPaths = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
    /// The hashed certificate directory NIOSSL adds.
    static let directorySearchPaths = ["/etc/ssl/certs"]

    /// The system's roots, parsed; nil when there is no bundle or it cannot be parsed, and
    /// contexts are left to NIOSSL's own default (which reports what is wrong).
    static let loaded: (bundle: [NIOSSLCertificate], directory: String?)? = {
        #if os(Linux)
        guard let path = bundleSearchPaths.first(where: { exists($0, directory: false) }),
            let certificates = try? NIOSSLCertificate.fromPEMFile(path), !certificates.isEmpty
        else { return nil }
        return (certificates, directorySearchPaths.first(where: { exists($0, directory: true) }))
        #else
        return nil
        #endif
    }()

    /// Sets `tls` to trust the platform's roots and `additional` ones: the parsed bundle and the
    /// directory in place of NIOSSL's `.default`, when they could be read.
    static func configure(_ tls: inout TLSConfiguration, additional: [NIOSSLCertificate]) {
        guard let loaded else {
            tls.trustRoots = .default
            tls.additionalTrustRoots = additional.isEmpty ? [] : [.certificates(additional)]
            return
        }
        tls.trustRoots = loaded.directory.map { .file($0) } ?? .certificates([])
        tls.additionalTrustRoots = [.certificates(loaded.bundle + additional)]
    }

    private static func exists(_ path: String, directory: Bool) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue == directory
    }
}
