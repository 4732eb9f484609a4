import HummingbirdBcrypt
import NIOPosix

/// Admin accounts' console passwords: their rules, and bcrypt (hummingbird-auth) off the
/// cooperative threads, since a hash at cost 12 takes a CPU for a noticeable moment.
///
/// Repeated failures lock an account's password logins for a while (its tokens keep working, so
/// nobody can lock an account out of the API by guessing); the console slows each source address
/// on its own (``ConsoleSessions``).
public enum AdminPasswords {
    /// At least this many characters.
    static let minimumCharacters = 12
    /// At most this many UTF-8 bytes: bcrypt reads no further.
    static let maximumBytes = 72
    static let cost: UInt8 = 12
    /// Failed password logins in a row that lock an account.
    static let lockThreshold = 5
    /// How long a lock lasts (an owner setting a new password ends it at once).
    static let lockDuration: Duration = .seconds(15 * 60)

    /// Why `password` is refused, or nil.
    public static func refusal(_ password: String) -> String? {
        if password.count < minimumCharacters { return "must be at least \(minimumCharacters) characters" }
        if password.utf8.count > maximumBytes { return "must be at most \(maximumBytes) bytes of UTF-8" }
        if password.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            return "must not contain control characters"
        }
        return nil
    }

    public static func hash(_ password: String) async throws -> String {
        try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
    }

    /// Whether `password` matches `hash`. Without a hash (no such account, or no password), a
    /// comparison against a fixed hash still runs, so the answer takes as long either way.
    static func verify(_ password: String, hash: String?) async throws -> Bool {
        let against = hash ?? placeholderHash
        let matched = try await NIOThreadPool.singleton.runIfActive {
            password.utf8.count <= maximumBytes && Bcrypt.verify(password, hash: against)
        }
        return matched && hash != nil
    }

    /// A hash of a random password nobody knows, at the same cost.
    private static let placeholderHash: String = {
        var generator = SystemRandomNumberGenerator()
        let random = (0..<24).map { _ in String(UInt8.random(in: 33...126, using: &generator), radix: 16) }.joined()
        return Bcrypt.hash(random, cost: cost)
    }()
}
