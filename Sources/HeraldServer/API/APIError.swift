import Foundation
import Herald
import HeraldCore
import HeraldStore
import Hummingbird

/// An error answer of the API: an HTTP status and the body
/// `{"error": {"code": …, "message": …, "field": …}}`.
///
/// `code` is short and stable (clients branch on it); `message` says what was wrong in words;
/// `field` names the offending request field as a path (`payload`, `notifications[3].topic`,
/// `device_tokens[17]`) or is null. Some errors add `apns_reason` (the reason APNs itself would
/// have given) or `details` (more bad items of a batch). Never a secret in any of them.
public struct APIError: Error, Sendable, HTTPResponseError, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var code: String
    public var message: String
    public var field: String?
    /// The APNs reason the refusal stands for, when there is one (`BadDeviceToken`, …).
    public var apnsReason: String?
    /// For a batch: the first bad items (the error itself is the first of them).
    public var details: [APIError] = []
    /// For a batch whose store call ended without an answer: the job's id, under which it may
    /// have been stored (`GET /v1/jobs/{id}` tells; a repeat with this `job_id` stores it once).
    public var jobID: String?
    public var headers: HTTPFields = [:]
    /// What the log gets and the answer does not: socket and TLS errors, paths, the internal
    /// message behind a 5xx. Logged with the request ID by ``APIMiddleware``.
    var logDetail: String?

    public init(status: HTTPResponse.Status, code: String, message: String, field: String? = nil, apnsReason: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.apnsReason = apnsReason
    }

    public var description: String {
        "\(status.code) \(code)" + (field.map { " [\($0)]" } ?? "") + ": \(message)"
    }

    /// The error object of the answer (inside the `{"error": …}` envelope).
    struct Body: Encodable, Sendable {
        var code: String
        var message: String
        @Nullable var field: String?
        var apnsReason: String?
        var details: [Body]?
        var jobID: String?
    }

    var body: Body {
        Body(
            code: code, message: message, field: field, apnsReason: apnsReason,
            details: details.isEmpty ? nil : details.map(\.body), jobID: jobID)
    }

    private struct Envelope: Encodable, Sendable {
        var error: Body
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        response()
    }

    func response() -> Response {
        var response: Response
        do {
            response = try APIResponseEncoder.response(Envelope(error: body), status: status)
        } catch {
            // Strings and numbers always encode; this answer is never expected.
            response = Response(status: .internalServerError)
        }
        for field in headers { response.headers.append(field) }
        return response
    }

    // MARK: Request errors

    static func malformedJSON(_ error: JSONSyntaxError) -> APIError {
        APIError(status: .badRequest, code: "malformed_json", message: "the body is not valid JSON: \(error)")
    }

    static func unknownField(_ path: String, allowed: [String]) -> APIError {
        APIError(
            status: .badRequest, code: "unknown_field",
            message: "unknown field; allowed here: \(allowed.joined(separator: ", "))", field: path)
    }

    static func missingField(_ path: String, _ message: String? = nil) -> APIError {
        APIError(status: .badRequest, code: "missing_field", message: message ?? "is required", field: path)
    }

    static func invalidField(_ path: String, _ message: String, apnsReason: String? = nil) -> APIError {
        APIError(status: .badRequest, code: "invalid_field", message: message, field: path, apnsReason: apnsReason)
    }

    static func invalidQuery(_ name: String, _ message: String) -> APIError {
        APIError(status: .badRequest, code: "invalid_query", message: message, field: name)
    }

    /// 422: a query range that is well formed but not one the route answers (empty, too long).
    static func invalidRange(_ name: String, _ message: String) -> APIError {
        var error = invalidQuery(name, message)
        error.status = .unprocessableContent
        return error
    }

    /// A per-tenant job limit refused a batch (429, `Retry-After` like every 429 here: jobs take
    /// a while to finish); the message names the limit.
    static func quotaExceeded(_ message: String) -> APIError {
        var error = APIError(status: .tooManyRequests, code: "quota_exceeded", message: message + " (nothing was accepted)")
        error.headers[.retryAfter] = "30"
        return error
    }

    static func bodyTooLarge(limit: Int) -> APIError {
        APIError(status: .contentTooLarge, code: "body_too_large", message: "the request body is larger than \(limit) bytes")
    }

    static func unsupportedMediaType(_ got: String?) -> APIError {
        APIError(
            status: .unsupportedMediaType, code: "unsupported_media_type",
            message: "the body must be JSON with Content-Type: application/json" + (got.map { " (got '\($0)')" } ?? " (none given)"))
    }

    static func unauthorized(_ message: String) -> APIError {
        var error = APIError(status: .unauthorized, code: "unauthorized", message: message)
        error.headers[.wwwAuthenticate] = "Bearer realm=\"herald\""
        return error
    }

    /// 429: too many wrong admin credentials from this address; none is compared until `Retry-After`.
    static func adminGuessing(retryAfter wait: Duration) -> APIError {
        var error = APIError(
            status: .tooManyRequests, code: "too_many_failures",
            message: "too many wrong admin credentials from this address; try again later")
        error.headers[.retryAfter] = String(APIKeyRateLimiter.retryAfterSeconds(wait))
        return error
    }

    /// 403: the caller is authenticated but its role lacks the permission the message names.
    static func forbidden(_ message: String) -> APIError {
        APIError(status: .forbidden, code: "forbidden", message: message)
    }

    /// 409: the change would break a rule of the current state (the message names it).
    static func conflict(_ message: String) -> APIError {
        APIError(status: .conflict, code: "conflict", message: message)
    }

    static func notFound(_ what: String) -> APIError {
        APIError(status: .notFound, code: "not_found", message: "\(what) not found")
    }

    static let routeNotFound = APIError(status: .notFound, code: "route_not_found", message: "no such route")

    static func methodNotAllowed(_ allowed: [HTTPRequest.Method]) -> APIError {
        var error = APIError(
            status: .methodNotAllowed, code: "method_not_allowed",
            message: "this route allows \(allowed.map(\.rawValue).joined(separator: ", "))")
        error.headers[.allow] = allowed.map(\.rawValue).joined(separator: ", ")
        return error
    }

    static func unavailable(_ code: String, _ message: String) -> APIError {
        APIError(status: .serviceUnavailable, code: code, message: message)
    }

    /// The store did not answer in time or could not be reached (``StoreError/leftOutcomeUnknown``):
    /// 503 with `Retry-After`, the detail in the log only.
    static func storeUnavailable(_ message: String, detail: StoreError) -> APIError {
        var error = APIError(status: .serviceUnavailable, code: "store_unavailable", message: message)
        error.headers[.retryAfter] = "5"
        error.logDetail = detail.message
        return error
    }

    static func `internal`(_ message: String = "internal error") -> APIError {
        APIError(status: .internalServerError, code: "internal_error", message: message)
    }

    /// A reload's or a credential upload's refusal.
    static func reload(_ error: ReloadError) -> APIError {
        if error.isUnknownTenant { return APIError.notFound("tenant") }
        if error.isCredentialUnchanged {
            return APIError(status: .conflict, code: "credential_unchanged", message: error.message)
        }
        if error.isUploadRejected {
            return APIError(status: .unprocessableContent, code: "upload_rejected", message: error.message)
        }
        if error.isDirectoryUnreadable {
            return APIError(status: .internalServerError, code: "reload_failed", message: error.message)
        }
        return APIError(status: .unprocessableContent, code: "reload_failed", message: error.message)
    }

    /// A notification validation error, with its field under `prefix`.
    static func invalid(_ error: NotificationValidationError, prefix: String = "") -> APIError {
        invalidField(FieldPaths.join(prefix, error.field), error.message, apnsReason: error.reason.wireValue)
    }

    /// Herald's refusal or failure of a send, as an API error.
    static func push(_ error: PushError, prefix: String = "") -> APIError {
        let field = error.field.map { FieldPaths.join(prefix, $0) }
        let reason = error.reason?.wireValue
        switch error.code {
        case .invalidNotification where error.reason == .missingTopic:
            // Whether a topic is needed depends on the tenant (a single-topic certificate
            // tenant has a default), so like the other tenant-policy refusals this is a 422.
            return APIError(
                status: .unprocessableContent, code: "topic_required", message: error.message,
                field: field ?? FieldPaths.join(prefix, "topic"), apnsReason: reason)
        case .invalidNotification:
            return APIError(status: .badRequest, code: "invalid_field", message: error.message, field: field, apnsReason: reason)
        case .topicDisallowed:
            return APIError(
                status: .unprocessableContent, code: "topic_disallowed", message: error.message,
                field: field ?? FieldPaths.join(prefix, "topic"), apnsReason: reason)
        case .pushTypeMismatch:
            return APIError(
                status: .unprocessableContent, code: "push_type_mismatch", message: error.message,
                field: field ?? FieldPaths.join(prefix, "push_type"), apnsReason: reason)
        case .environmentUnavailable:
            return APIError(
                status: .unprocessableContent, code: "environment_unavailable", message: error.message,
                field: field ?? FieldPaths.join(prefix, "environment"))
        case .noSigningKey:
            return APIError(
                status: .unprocessableContent, code: "no_signing_key", message: error.message,
                field: field ?? FieldPaths.join(prefix, "topic"))
        case .tokenRefused:
            return APIError(
                status: .unprocessableContent, code: "token_refused", message: error.message,
                field: field ?? FieldPaths.join(prefix, "device_token"), apnsReason: reason)
        case .rateLimited:
            var api = APIError(status: .tooManyRequests, code: "rate_limited", message: error.message)
            api.headers[.retryAfter] = "1"
            return api
        case .deadlineExceeded:
            return APIError.upstream(
                .gatewayTimeout, "deadline_exceeded", "the deadline passed before APNs answered", error: error)
        case .transport:
            return APIError.upstream(.badGateway, "transport_failed", "the notification could not be sent to APNs", error: error)
        case .shuttingDown:
            return APIError(status: .serviceUnavailable, code: "shutting_down", message: "Herald is shutting down; try again")
        case .queueFull:
            var api = APIError(
                status: .serviceUnavailable, code: "queue_full", message: "the tenant's connection pool queue is full; try again")
            api.headers[.retryAfter] = "1"
            return api
        case .circuitOpen:
            var api = APIError(status: .serviceUnavailable, code: "circuit_open", message: error.message)
            let seconds = error.retryAfter.map { max(1, Int(clamping: $0.components.seconds)) } ?? 1
            api.headers[.retryAfter] = String(seconds)
            return api
        case .credentialRevoked:
            return APIError.upstream(
                .badGateway, "credential_revoked", "the tenant's APNs credential was replaced before APNs answered", error: error)
        case .unknownTenant:
            return APIError(status: .serviceUnavailable, code: "tenant_unavailable", message: "the tenant is not loaded right now")
        default:
            var api = APIError(status: .internalServerError, code: "send_failed", message: "the send failed inside Herald", field: field)
            api.logDetail = error.description
            return api
        }
    }

    /// A failure between Herald and APNs: the answer says what happened and whether APNs may
    /// have the notification; the socket/TLS detail goes to the log only.
    private static func upstream(_ status: HTTPResponse.Status, _ code: String, _ message: String, error: PushError) -> APIError {
        var api = APIError(
            status: status, code: code,
            message: message + (error.mayHaveReachedAPNs ? " (the notification may have reached APNs)" : "")
                + "; the log has the detail under this answer's x-request-id")
        api.logDetail = error.description
        return api
    }
}

/// Field paths as errors name them: `notification.topic`, `notifications[3].payload`.
enum FieldPaths {
    static func join(_ prefix: String, _ field: String) -> String {
        if prefix.isEmpty { return field }
        if field.isEmpty { return prefix }
        return field.hasPrefix("[") ? prefix + field : prefix + "." + field
    }
}

/// Dates on the wire: RFC 3339 / ISO 8601 in UTC with milliseconds.
enum Timestamps {
    /// RFC 3339 in UTC with milliseconds (`2026-11-25T17:39:47.360Z`), the date rounded to the
    /// nearest millisecond as the stores keep it. (Foundation's fractional-seconds style cuts the
    /// fraction off instead: a stored …47.360, read back as 1764092387.3599999 s, would show as
    /// .359, half of all millisecond values one early.)
    static func iso8601(_ date: Date) -> String {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard value.isFinite, let millis = Int64(exactly: value) else {
            return Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
        }
        var (seconds, fraction) = millis.quotientAndRemainder(dividingBy: 1000)
        if fraction < 0 {
            seconds -= 1
            fraction += 1000
        }
        let whole = Date.ISO8601FormatStyle().format(Date(timeIntervalSince1970: TimeInterval(seconds)))
        guard whole.hasSuffix("Z") else { return Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date) }
        let digits = String(fraction)
        return whole.dropLast() + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// The latest date any caller's date may name (9999-12-31T23:59:59Z): past it, 400.
    static let latestDate = Date(timeIntervalSince1970: 253_402_300_799)

    /// The earliest date a caller may give (2000-01-01T00:00:00Z).
    static let earliestCallerDate = Date(timeIntervalSince1970: 946_684_800)
    /// How far past the server's clock a caller's date may be (clock skew), in seconds.
    static let futureAllowance: TimeInterval = 300

    /// The dates a caller may give at `now`: from ``earliestCallerDate`` to `now` plus ``futureAllowance``.
    static func callerDates(now: Date) -> ClosedRange<Date> {
        earliestCallerDate...max(earliestCallerDate, now.addingTimeInterval(futureAllowance))
    }

    /// A query parameter's date: decimal UNIX seconds (1 to 11 digits, up to 9 decimals; as the
    /// OpenAPI document's pattern says) or an RFC 3339 date-time.
    static func parseQuery(_ text: String) -> Date? {
        if let seconds = decimalSeconds(text) { return Date(timeIntervalSince1970: seconds) }
        return parseRFC3339(text)
    }

    /// A JSON number of seconds since 1970, from 0 to ``latestDate``.
    static func parseSeconds(jsonNumber text: String) -> Date? {
        guard let seconds = Double(text), seconds.isFinite, (0...latestDate.timeIntervalSince1970).contains(seconds) else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    /// `[0-9]{1,11}(\.[0-9]{1,9})?` as seconds (`Double` alone would also take "0x1p70", "nan" and "inf").
    static func decimalSeconds(_ text: String) -> Double? {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        let digits = { (part: Substring.UTF8View) in part.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } }
        guard let whole = parts.first, (1...11).contains(whole.count), digits(whole) else { return nil }
        if parts.count == 2 {
            guard (1...9).contains(parts[1].count), digits(parts[1]) else { return nil }
        }
        return Double(text)
    }

    /// An RFC 3339 date-time (with or without fractional seconds), up to ``latestDate``.
    static func parseRFC3339(_ text: String) -> Date? {
        let date: Date?
        if let whole = try? Date(text, strategy: .iso8601) {
            date = whole
        } else {
            date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)
        }
        guard let date, date <= latestDate, date.timeIntervalSince1970 >= -62_135_596_800 else { return nil }
        return date
    }
}
