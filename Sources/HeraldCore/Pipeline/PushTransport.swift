import Foundation

/// The wire, as a tenant runtime sees it: sends one notification to APNs and returns its answer.
///
/// A transport belongs to one tenant (its credentials, its connections). It must open nothing
/// (no connection, no task) until its first `send`, so that idle tenants cost little. It takes
/// only notifications the tenant admitted (``AdmittedNotification``): their apns-id, topic and
/// environment are as the admission fixed them, and the transport checks none of it again.
///
/// Failures without an APNs answer are thrown as ``PushError`` (code `.transport`,
/// `.deadlineExceeded`, `.queueFull` or `.shuttingDown`), with `mayHaveReachedAPNs` false only
/// when APNs surely did not process the request; the built-in retry relies on that. A send whose
/// task is cancelled frees its place in the queue (and throws `CancellationError`) or its stream
/// (and throws a `.transport` error that may have reached APNs).
public protocol PushTransport: Sendable {
    func send(_ notification: AdmittedNotification, deadline: PushInstant) async throws -> APNsResponse
    /// Stops taking sends, lets in-flight ones finish, then closes every connection.
    func shutdown() async
    /// Stops taking sends and closes every connection at once: in-flight sends fail without an
    /// answer (used when the credential was revoked). Defaults to ``shutdown()``.
    func close() async
    /// Identifies the credential the transport authenticates with (never secret), or nil when
    /// it has none; a reload compares it to tell a rotation from another change.
    var credentialIdentity: String? { get }
    /// The transport's connections and counters as they are now (for the admin API).
    var status: TransportStatus { get }
    /// True when ``startSend(_:deadline:completion:)`` sends without a task of its
    /// own; false when the transport has only the `async` form (then `startSend` makes a task
    /// that awaits it). Defaults to false.
    var sendsByCallback: Bool { get }
    /// Starts one send and calls `completion` exactly once with APNs' answer or the failure (the
    /// same ``PushError``s as the `async` form; never cancelled), possibly on another thread:
    /// it must not block. The default awaits ``send(_:deadline:)`` in a task.
    func startSend(
        _ notification: AdmittedNotification, deadline: PushInstant,
        completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void)
    /// Where a task that starts many sends by callback should run: the executor of the thread
    /// the transport's connections answer on, so that the task's own steps and the sends' ends
    /// share that thread instead of waking each other across two. Nil (the default) when the
    /// transport has no such place; the task then runs on the global executor.
    var sendingExecutor: (any TaskExecutor)? { get }
    /// Where callers that keep many sends in flight from several tasks should run them: one
    /// executor a connection's thread, ``sendingExecutor``'s first. Defaults to
    /// ``sendingExecutor`` alone (none when it is nil).
    var sendingExecutors: [any TaskExecutor] { get }
    /// One call to the channel management service of `environment` with `requestID` as its
    /// `apns-request-id`, and its answer (any status), on a connection of the transport's own to that service. Throws as ``send(_:deadline:)``.
    /// The default throws `PushError` `.transport` (surely not processed): a transport without
    /// channel management.
    func manageChannels(
        _ call: ChannelCall, requestID: NotificationID, environment: APNsEnvironment, deadline: PushInstant
    ) async throws
        -> APNsResponse
}

extension PushTransport {
    public var sendsByCallback: Bool { false }
    public var sendingExecutor: (any TaskExecutor)? { nil }
    public var sendingExecutors: [any TaskExecutor] { sendingExecutor.map { [$0] } ?? [] }
    public func startSend(
        _ notification: AdmittedNotification, deadline: PushInstant,
        completion: @escaping @Sendable (consuming Result<APNsResponse, PushError>) -> Void
    ) {
        Task {
            do {
                completion(.success(try await send(notification, deadline: deadline)))
            } catch let error as PushError {
                completion(.failure(error))
            } catch {
                // Not cancellable from here: anything else is a failure that may have reached APNs.
                completion(.failure(PushError.transport("\(error)", surelyNotProcessed: false)))
            }
        }
    }
    public func close() async { await shutdown() }
    public func manageChannels(
        _ call: ChannelCall, requestID: NotificationID, environment: APNsEnvironment, deadline: PushInstant
    ) async throws
        -> APNsResponse
    {
        throw PushError.transport("this transport has no channel management", surelyNotProcessed: true)
    }
    public var credentialIdentity: String? { nil }
    public var status: TransportStatus { TransportStatus() }
}

/// A tenant transport's state, read from its connection pools and its own counters.
public struct TransportStatus: Sendable, Hashable {
    public enum State: String, Sendable, Hashable {
        /// Nothing sent yet: no connection, no pool.
        case idle
        /// It has sent (its pools exist; connections open on demand).
        case active
        /// Shut down or closed: it takes no more sends.
        case closed
    }

    public var state: State = .idle
    /// Connections open or opening, over every endpoint.
    public var connections = 0
    /// Connections that completed their handshake and take streams.
    public var readyConnections = 0
    /// Streams written and not answered yet.
    public var inFlight = 0
    /// Sends waiting in the pools' queues for a stream.
    public var queued = 0
    /// Sends APNs answered (any status) since the transport was made.
    public var answered = 0
    /// Sends that failed without an APNs answer, or that APNs answered with an error that
    /// concerns the tenant rather than one device (403, 5xx, TooManyProviderTokenUpdates).
    public var errors = 0
    public var lastError: String?
    public var lastErrorAt: Date?
    public var lastAnswerAt: Date?
    /// Sends that failed because the tenant's outbound proxy did, by kind (`unreachable`,
    /// `authenticationRequired`, `refused`, `targetUnreachable`, `timedOut`, `protocolError`).
    public var proxyFailures: [String: Int] = [:]

    public init() {}

    /// True for answers about the tenant's connection or credential rather than one device:
    /// 403 (credentials), 5xx, and 429 TooManyProviderTokenUpdates.
    public static func concernsTheTenant(_ response: APNsResponse) -> Bool {
        response.status == 403 || response.status >= 500 || response.reason == .tooManyProviderTokenUpdates
    }
}
