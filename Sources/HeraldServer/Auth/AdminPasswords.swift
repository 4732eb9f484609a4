import HummingbirdBcrypt
import NIOPosix
import Synchronization

/// Admin accounts' console passwords: their rules, and bcrypt (hummingbird-auth) off the
/// cooperative threads, since a hash at cost 12 takes a CPU for a noticeable moment.
///
/// Repeated failures lock an account's password logins for a while (its tokens keep working, so
/// nobody can lock an account out of the API by guessing); the console slows each source address
/// on its own (``ConsoleSessions``).
public struct AdminPasswords: Sendable {
    /// At least this many characters.
    static let minimumCharacters = 12
    /// At most this many UTF-8 bytes: bcrypt reads no further.
    static let maximumBytes = 72
    /// Failed password logins in a row that lock an account.
    static let lockThreshold = 5
    /// How long a lock lasts (an owner setting a new password ends it at once).
    static let lockDuration: Duration = .seconds(15 * 60)

    /// The bcrypt cost of new hashes (`api.password_cost`); a stored hash is checked at its own.
    public let cost: UInt8

    /// - Parameter cost: clamped to bcrypt's 4…31 (the configuration allows 10…16).
    public init(cost: Int) {
        self.cost = UInt8(clamping: min(max(cost, 4), 31))
    }

    /// Why `password` is refused, or nil.
    public static func refusal(_ password: String) -> String? {
        if password.count < minimumCharacters { return "must be at least \(minimumCharacters) characters" }
        if password.utf8.count > maximumBytes { return "must be at most \(maximumBytes) bytes of UTF-8" }
        if password.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            return "must not contain control characters"
        }
        return nil
    }

    public func hash(_ password: String) async throws -> String {
        let cost = cost
        return try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
    }

    /// Whether `password` matches `hash`. Without a hash (no such account, or no password), a
    /// comparison against a hash nobody knows, at this cost, still runs, so the answer takes as
    /// long either way.
    func verify(_ password: String, hash: String?) async throws -> Bool {
        let cost = cost
        let matched = try await NIOThreadPool.singleton.runIfActive {
            let against = hash ?? Self.placeholderHash(cost: cost)
            return password.utf8.count <= Self.maximumBytes && Bcrypt.verify(password, hash: against)
        }
        return matched && hash != nil
    }

    /// Hashes of random passwords nobody knows, one per cost, made when first needed.
    private static let placeholders = Mutex<[UInt8: String]>([:])

    private static func placeholderHash(cost: UInt8) -> String {
        if let known = placeholders.withLock({ $0[cost] }) { return known }
        var generator = SystemRandomNumberGenerator()
        let random = (0..<24).map { _ in String(UInt8.random(in: 33...126, using: &generator), radix: 16) }.joined()
        let made = Bcrypt.hash(random, cost: cost)
        return placeholders.withLock { placeholders in
            if let known = placeholders[cost] { return known }
            placeholders[cost] = made
            return made
        }
    }
}
