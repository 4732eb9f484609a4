import Foundation

extension TokenCredentialProvider {
    /// The provider token cache as a plain value: which token to send, when to sign a new one, and
    /// who waits for it. ``TokenCredentialProvider`` holds it under a lock and runs the actions it
    /// returns (sign, resume waiters) outside the lock.
    struct StateMachine {
        struct Token: Sendable, Equatable {
            /// The `authorization` header value: `bearer <jwt>`.
            var authorization: String
            /// The token's `iat`.
            var issuedAt: Date
        }

        typealias Waiter = CheckedContinuation<String?, any Error>

        enum AuthorizationAction {
            /// Send this header value.
            case use(String)
            /// Sign a token issued at `issuedAt`, then report it with ``signed(_:)`` or ``signingFailed()``.
            case sign(issuedAt: Date)
            /// No token may be sent and another caller is signing one: wait with ``addWaiter(_:)``.
            case wait
        }

        enum AddWaiterAction {
            /// The waiter is queued and will be resumed when signing ends.
            case queued
            /// Signing already ended: resume the waiter with nil so that it asks again.
            case askAgain(Waiter)
        }

        let policy: TokenRefreshPolicy
        private(set) var current: Token?
        /// APNs answered ExpiredProviderToken for `current`.
        private(set) var currentRejected = false
        /// One caller is signing a new token.
        private(set) var signing = false
        private var waiters: [Waiter] = []
        /// Tokens signed so far.
        private(set) var generation = 0

        init(policy: TokenRefreshPolicy) {
            self.policy = policy
        }

        mutating func authorization(now: Date) -> AuthorizationAction {
            if let current, !currentRejected, now.timeIntervalSince(current.issuedAt) < policy.maximumAge {
                let age = now.timeIntervalSince(current.issuedAt)
                // Not due yet, or due while another caller signs: the current token is still good.
                if age < max(policy.refreshAfter, policy.minimumInterval) || signing {
                    return .use(current.authorization)
                }
                signing = true
                return .sign(issuedAt: Self.wholeSeconds(now))
            }
            // No token may be sent: the first caller signs one, the others wait for it.
            if signing { return .wait }
            signing = true
            return .sign(issuedAt: Self.wholeSeconds(now))
        }

        /// The current token when it may be sent now and is not due for replacement; nil when a
        /// caller must go through ``authorization(now:)`` (to sign, or to wait for a signer).
        func usable(now: Date) -> String? {
            guard let current, !currentRejected else { return nil }
            let age = now.timeIntervalSince(current.issuedAt)
            guard age < max(policy.refreshAfter, policy.minimumInterval), age < policy.maximumAge else { return nil }
            return current.authorization
        }

        mutating func addWaiter(_ waiter: Waiter) -> AddWaiterAction {
            guard signing else { return .askAgain(waiter) }
            waiters.append(waiter)
            return .queued
        }

        /// A new token is signed: it replaces the current one. Returns the waiters to resume with it.
        mutating func signed(_ token: Token) -> [Waiter] {
            current = token
            currentRejected = false
            signing = false
            generation += 1
            defer { waiters = [] }
            return waiters
        }

        /// Signing failed: returns the waiters to fail with the same error.
        mutating func signingFailed() -> [Waiter] {
            signing = false
            defer { waiters = [] }
            return waiters
        }

        /// APNs answered ExpiredProviderToken for `authorization`. True when this marks the current
        /// token for replacement; false when it is an older token or already reported.
        mutating func rejectedAsExpired(_ authorization: String) -> Bool {
            guard let current, current.authorization == authorization, !currentRejected else { return false }
            currentRejected = true
            return true
        }

        /// JWT `iat` is whole seconds; the cache ages the token from the same instant.
        static func wholeSeconds(_ date: Date) -> Date {
            Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
        }
    }
}
