/// An error of the sandbox itself (configuration, certificates, start-up), never of a request:
/// requests get APNs' answers instead.
public struct SandboxError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case configuration
        case certificate
        case startup
    }

    private let code: Code
    /// What went wrong; never holds a secret.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The configuration (file or values) is not usable.
    public static func configuration(_ message: String) -> SandboxError { SandboxError(.configuration, message) }
    /// A certificate or key could not be read, made or verified.
    public static func certificate(_ message: String) -> SandboxError { SandboxError(.certificate, message) }
    /// The server could not start.
    public static func startup(_ message: String) -> SandboxError { SandboxError(.startup, message) }

    public var description: String {
        switch code {
        case .configuration: return "sandbox configuration: \(message)"
        case .certificate: return "sandbox certificate: \(message)"
        case .startup: return "sandbox start: \(message)"
        }
    }
}
