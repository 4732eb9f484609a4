import Foundation
import HeraldCore
import Synchronization

/// The console's logged-in sessions: who presented the admin token, and the CSRF token of their
/// forms.
///
/// A session ID is 32 random bytes (base64url) in an HttpOnly, SameSite=Strict cookie; the server
/// keeps only what it needs to check it. Sessions end after ``idleTimeout`` without a request,
/// after ``lifetime`` whatever happens, at logout, and the oldest is dropped when ``capacity``
/// sessions are open (so a caller who logs in again and again grows nothing). Time comes from
/// the injected clock, so tests expire sessions without sleeping.
///
/// ```swift
/// let sessions = ConsoleSessions(now: { clock.now })
/// let session = sessions.open(actor: actor, credential: .breakGlass)  // after a credential matched
/// sessions.session(for: cookieValue)?.csrf      // on each request
/// ```
final class ConsoleSessions: Sendable {
    struct Session: Sendable, Equatable {
        /// The cookie's value.
        var id: String
        /// The token every form of this session carries (`csrf`).
        var csrf: String
        var openedAt: PushInstant
        var lastSeen: PushInstant
        /// Who logged in: the session acts as this account.
        var actor: AdminActor
        /// What it logged in with, checked again on every request.
        var credential: Credential
    }

    /// What a session was opened with.
    enum Credential: Sendable, Equatable {
        /// The break-glass admin token (read once at start: nothing to check again).
        case breakGlass
        /// An account token, by its SHA-256: the session ends when the token stops working.
        case token(sha256: String)
        /// An account's password: the session ends when the account is deleted.
        case password(account: String)
    }

    let capacity: Int
    let idleTimeout: Duration
    let lifetime: Duration
    private let now: @Sendable () -> PushInstant
    private let sessions = Mutex<[String: Session]>([:])
    /// Failed logins per source address (``FailedAttempts``): while an address's bucket is empty
    /// no credential it sends is compared (429), and one address's failures never hold back
    /// another's logins.
    let failedLogins: FailedAttempts
    var failedLoginBurst: Int { failedLogins.burst }

    init(
        capacity: Int = 64, idleTimeout: Duration = .seconds(30 * 60), lifetime: Duration = .seconds(12 * 3600),
        failedLoginBurst: Int = 10, failedLoginsPerMinute: Int = 10, maxSources: Int = 4096,
        now: @escaping @Sendable () -> PushInstant
    ) {
        self.capacity = max(1, capacity)
        self.idleTimeout = idleTimeout
        self.lifetime = lifetime
        self.now = now
        failedLogins = FailedAttempts(burst: failedLoginBurst, perMinute: failedLoginsPerMinute, maxSources: maxSources, now: now)
    }

    /// Whether `source` may try a login now: nil when it may, else how long until it may.
    func loginWait(source: String?) -> Duration? { failedLogins.wait(source: source) }

    /// Counts a failed login from `source` (a wrong credential).
    func loginFailed(source: String?) { failedLogins.failed(source: source) }

    /// A new session for `actor`, who presented `credential`.
    func open(actor: AdminActor, credential: Credential) -> Session {
        let instant = now()
        let session = Session(
            id: Self.randomToken(), csrf: Self.randomToken(), openedAt: instant, lastSeen: instant, actor: actor,
            credential: credential)
        sessions.withLock { sessions in
            sessions = sessions.filter { isLive($0.value, at: instant) }
            while sessions.count >= capacity, let oldest = sessions.values.min(by: { $0.lastSeen < $1.lastSeen }) {
                sessions[oldest.id] = nil
            }
            sessions[session.id] = session
        }
        return session
    }

    /// The live session the cookie names, touched (its idle time starts again); nil when the
    /// cookie is absent, unknown or expired.
    func session(for cookie: String?) -> Session? {
        guard let cookie, !cookie.isEmpty, cookie.utf8.count <= 64 else { return nil }
        let instant = now()
        return sessions.withLock { sessions in
            guard var session = sessions[cookie] else { return nil }
            guard isLive(session, at: instant) else {
                sessions[cookie] = nil
                return nil
            }
            session.lastSeen = instant
            sessions[cookie] = session
            return session
        }
    }

    /// Ends the session (logout).
    func close(_ id: String) {
        _ = sessions.withLock { $0.removeValue(forKey: id) }
    }

    var count: Int { sessions.withLock { $0.count } }

    private func isLive(_ session: Session, at instant: PushInstant) -> Bool {
        instant - session.lastSeen < idleTimeout && instant - session.openedAt < lifetime
    }

    /// 32 random bytes, base64url without padding (43 characters).
    static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return APIKeys.base64URL((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// Compares a presented CSRF token with the session's in time that depends only on lengths.
    static func tokensMatch(_ presented: String?, _ expected: String) -> Bool {
        guard let presented else { return false }
        return APIKeys.constantTimeEquals(Array(presented.utf8), Array(expected.utf8))
    }
}
