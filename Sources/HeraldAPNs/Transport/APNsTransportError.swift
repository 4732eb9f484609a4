import HeraldCore

/// Why a notification got no answer from APNs.
///
/// Every APNs answer, success or failure, comes back as an ``APNsResponse``; this error is for
/// the cases where there is none. ``mayHaveBeenProcessed`` tells a retry layer whether a resend
/// could deliver the notification twice:
///
/// - `false`: the request surely never reached APNs (it was refused by a full queue, never
///   written, above a GOAWAY's last-stream-id, or reset with `REFUSED_STREAM`). Resending is safe.
/// - `true`: the request was written and the connection or the clock ran out before the answer.
///   APNs may or may not have accepted it.
///
/// ```swift
/// do { _ = try await transport.send(note) }
/// catch let error as APNsTransportError where !error.mayHaveBeenProcessed { /* safe to resend */ }
/// ```
public struct APNsTransportError: Error, Sendable, CustomStringConvertible {
    enum Code: String, Sendable, Hashable {
        case queueFull
        case timedOut
        case connectionFailed
        case connectionClosed
        case streamReset
        case poolClosed
        case noEndpoint
        case invalidConfiguration
        case invalidRequest
        case protocolError
        case cancelled
    }

    let code: Code
    /// True when the request was written to APNs and got no answer: a resend might duplicate it.
    public let mayHaveBeenProcessed: Bool
    /// A short, secret-free explanation.
    public let detail: String?
    /// The error underneath (a TLS or socket error), when there is one.
    public let underlying: (any Error)?

    init(_ code: Code, mayHaveBeenProcessed: Bool, detail: String? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.mayHaveBeenProcessed = mayHaveBeenProcessed
        self.detail = detail
        self.underlying = underlying
    }

    /// The pool's bounded queue is full: backpressure. Nothing was sent.
    public static let queueFull = APNsTransportError(.queueFull, mayHaveBeenProcessed: false, detail: "the connection pool's queue is full")
    /// The pool is draining or closed. Nothing was sent.
    public static let poolClosed = APNsTransportError(.poolClosed, mayHaveBeenProcessed: false, detail: "the connection pool is closed")

    /// The deadline passed: while queued (`mayHaveBeenProcessed == false`) or while waiting for the answer.
    public static func timedOut(mayHaveBeenProcessed: Bool) -> APNsTransportError {
        APNsTransportError(.timedOut, mayHaveBeenProcessed: mayHaveBeenProcessed,
                           detail: mayHaveBeenProcessed ? "no answer before the deadline" : "no stream became free before the deadline")
    }

    /// No connection to APNs could be established. Nothing was sent.
    public static func connectionFailed(_ underlying: (any Error)?) -> APNsTransportError {
        APNsTransportError(.connectionFailed, mayHaveBeenProcessed: false, detail: "could not connect to APNs", underlying: underlying)
    }

    /// The connection closed while the request was in flight.
    public static func connectionClosed(mayHaveBeenProcessed: Bool, _ underlying: (any Error)? = nil) -> APNsTransportError {
        APNsTransportError(.connectionClosed, mayHaveBeenProcessed: mayHaveBeenProcessed, detail: "the connection closed before the answer", underlying: underlying)
    }

    /// The server reset the stream (RST_STREAM) with a code other than REFUSED_STREAM.
    public static func streamReset(code: String) -> APNsTransportError {
        APNsTransportError(.streamReset, mayHaveBeenProcessed: true, detail: "the stream was reset (\(code))")
    }

    /// The tenant has no endpoint for the environment. Nothing was sent.
    public static func noEndpoint(_ environment: APNsEnvironment) -> APNsTransportError {
        APNsTransportError(.noEndpoint, mayHaveBeenProcessed: false, detail: "the tenant has no \(environment.rawValue) endpoint")
    }

    /// The TLS or credential configuration could not be used. Nothing was sent.
    public static func invalidConfiguration(_ detail: String, underlying: (any Error)? = nil) -> APNsTransportError {
        APNsTransportError(.invalidConfiguration, mayHaveBeenProcessed: false, detail: detail, underlying: underlying)
    }

    /// A header cannot go into an HTTP/2 request (bytes HTTP/2 forbids). Nothing was sent.
    public static func invalidRequest(field: String, _ detail: String) -> APNsTransportError {
        APNsTransportError(.invalidRequest, mayHaveBeenProcessed: false, detail: "\(field): \(detail)")
    }

    /// The server broke the HTTP/2 or APNs protocol for this request.
    public static func protocolError(_ detail: String, mayHaveBeenProcessed: Bool) -> APNsTransportError {
        APNsTransportError(.protocolError, mayHaveBeenProcessed: mayHaveBeenProcessed, detail: detail)
    }

    /// The caller cancelled the send: it left the queue (`mayHaveBeenProcessed == false`) or its
    /// stream was reset after it was written.
    public static func cancelled(mayHaveBeenProcessed: Bool) -> APNsTransportError {
        APNsTransportError(.cancelled, mayHaveBeenProcessed: mayHaveBeenProcessed, detail: "the send was cancelled")
    }

    /// A short, constant label for metrics and logs, e.g. `queueFull`.
    public var metricLabel: String { code.rawValue }

    public var description: String {
        var text = "APNsTransportError.\(code.rawValue)"
        if let detail { text += ": \(detail)" }
        text += mayHaveBeenProcessed ? " (may have been processed)" : " (not processed)"
        if let underlying { text += " [\(String(describing: underlying))]" }
        return text
    }

    /// True when this is the given kind of error, whatever its details.
    public func isSameKind(as other: APNsTransportError) -> Bool { code == other.code }

    public var isQueueFull: Bool { code == .queueFull }
    public var isTimedOut: Bool { code == .timedOut }
    public var isPoolClosed: Bool { code == .poolClosed }
    public var isConnectionFailed: Bool { code == .connectionFailed }
    public var isConnectionClosed: Bool { code == .connectionClosed }
    public var isInvalidRequest: Bool { code == .invalidRequest }
    public var isCancelled: Bool { code == .cancelled }

    /// The same failure as a ``PushError``, as the rest of Herald sees it: the one place where a
    /// transport failure is translated.
    public func pushError(tenant: TenantID) -> PushError {
        let message = detail ?? code.rawValue
        switch code {
        case .timedOut:
            return .deadlineExceeded(message, mayHaveReachedAPNs: mayHaveBeenProcessed)
        case .queueFull:
            return .queueFull()
        case .poolClosed:
            return PushError(code: .shuttingDown, message: "the connections of tenant '\(tenant)' are closing", mayHaveReachedAPNs: false)
        case .noEndpoint:
            return PushError(code: .environmentUnavailable, message: message, field: "environment")
        case .invalidRequest:
            return PushError(code: .invalidNotification, message: message)
        case .connectionFailed, .connectionClosed, .streamReset, .invalidConfiguration, .protocolError, .cancelled:
            return .transport(description, surelyNotProcessed: !mayHaveBeenProcessed)
        }
    }
}
