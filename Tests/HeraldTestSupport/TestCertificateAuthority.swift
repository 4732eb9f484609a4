import APNsSandbox

/// One sandbox CA for the whole test process. Every harness's sandbox issues its server
/// certificate from it, so that the tenants of every test trust the same `ca_file`: their TLS
/// client context (the system's roots and this CA) is built once for the process, as it is for
/// tenants that share a `ca_file` in a running Herald, instead of once a test. A test about a
/// CA of its own (a stranger's, a reloaded one) generates that CA itself.
public enum TestCertificateAuthority {
    private static let made = Result { try SandboxCertificateAuthority.generate(commonName: "Herald tests' sandbox CA") }

    public static func shared() throws -> SandboxCertificateAuthority {
        try made.get()
    }
}
