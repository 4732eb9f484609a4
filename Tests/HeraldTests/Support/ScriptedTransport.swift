import Foundation
import Herald
import HeraldCore
import Logging
import Synchronization

/// A transport that answers from a script and records every attempt, for tests without a server.
final class ScriptedTransport: PushTransport {
    enum Step: Sendable {
        case respond(status: Int, reason: APNsReason? = nil, timestamp: Date? = nil, retryAfter: Duration? = nil)
        case fail(PushError)
    }

    struct Attempt: Sendable, Hashable {
        var notification: HeraldCore.Notification
        var environment: APNsEnvironment
    }

    private struct State {
        var script: [Step]
        var attempts: [Attempt] = []
        var shutdown = false
    }

    private let state: Mutex<State>
    /// What to answer once the script has run out.
    let fallback: Step

    init(_ script: [Step] = [], fallback: Step = .respond(status: 200)) {
        self.state = Mutex(State(script: script))
        self.fallback = fallback
    }

    var attempts: [Attempt] { state.withLock { $0.attempts } }
    var isShutDown: Bool { state.withLock { $0.shutdown } }

    func send(_ admitted: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse {
        let notification = admitted.notification
        let step = state.withLock { state -> Step in
            state.attempts.append(Attempt(notification: notification, environment: admitted.environment))
            return state.script.isEmpty ? fallback : state.script.removeFirst()
        }
        switch step {
        case .respond(let status, let reason, let timestamp, let retryAfter):
            return APNsResponse(
                status: status, apnsID: notification.id, reason: reason, timestamp: timestamp, retryAfter: retryAfter)
        case .fail(let error):
            throw error
        }
    }

    func shutdown() async {
        state.withLock { $0.shutdown = true }
    }
}

/// Hands out one transport per tenant and remembers them.
final class ScriptedTransports: TransportProvider {
    private let made = Mutex<[TenantID: ScriptedTransport]>([:])
    private let script: @Sendable (TenantConfiguration) -> ScriptedTransport

    init(_ script: @escaping @Sendable (TenantConfiguration) -> ScriptedTransport = { _ in ScriptedTransport() }) {
        self.script = script
    }

    func makeTransport(for tenant: TenantConfiguration, logger: Logger) throws -> any PushTransport {
        let transport = script(tenant)
        made.withLock { $0[tenant.id] = transport }
        return transport
    }

    subscript(tenant: TenantID) -> ScriptedTransport? { made.withLock { $0[tenant] } }
    var count: Int { made.withLock { $0.count } }
}

/// Collects the webhooks a plugin would post, answering from a script.
final class RecordingWebhooks: WebhookSender {
    private let state = Mutex<(requests: [WebhookRequest], statuses: [Int])>(([], []))

    init(statuses: [Int] = []) {
        state.withLock { $0.statuses = statuses }
    }

    var requests: [WebhookRequest] { state.withLock { $0.requests } }

    func post(_ request: WebhookRequest) async throws -> Int {
        state.withLock { state in
            state.requests.append(request)
            return state.statuses.isEmpty ? 200 : state.statuses.removeFirst()
        }
    }
}
