import Crypto
import Foundation
import HeraldCore

/// One signed webhook about an invalid device token, with its retries.
struct WebhookDelivery: Sendable {
    let request: WebhookRequest
    let attempts: Int
    let initialBackoff: Duration

    /// The header holding `sha256=<hex>` of HMAC-SHA256(secret, "<timestamp>.<body>").
    static let signatureHeader = "X-Herald-Signature"
    static let timestampHeader = "X-Herald-Timestamp"

    static func make(
        record: InvalidTokenRecord, tenant: TenantID, apnsID: NotificationID, webhook: TenantWebhook,
        sentAt: Date
    ) -> WebhookDelivery {
        var members: [(String, JSONValue)] = [
            ("event", .string("device_token.invalid")),
            ("tenant", .string(tenant.rawValue)),
            ("device_token", .string(record.token.hex)),
            ("topic", .string(record.topic)),
            ("environment", .string(record.environment.rawValue)),
            ("reason", .string(record.reason.wireValue)),
        ]
        members.append(("apns_timestamp", record.apnsTimestamp.map { .int(millis($0)) } ?? .null))
        members.append(("recorded_at", .int(millis(record.recordedAt))))
        members.append(("apns_id", .string(apnsID.rawValue)))
        return WebhookDelivery(
            request: webhook.signedRequest(
                event: "device_token.invalid", body: JSONValue.object(members).jsonBytes, delivery: apnsID.rawValue, sentAt: sentAt),
            attempts: webhook.attempts, initialBackoff: webhook.initialBackoff)
    }

    /// The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`.
    static func signature(secret: [UInt8], timestamp: String, body: [UInt8]) -> String {
        var message = Array(timestamp.utf8)
        message.append(UInt8(ascii: "."))
        message.append(contentsOf: body)
        let code = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: secret))
        return code.map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]], as: UTF8.self)
        }.joined()
    }

    /// Milliseconds since 1970, clamped (the APNs timestamp is untrusted input: never a trap).
    static func millis(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard !value.isNaN else { return 0 }
        return Int64(exactly: min(max(value, -1e17), 1e17)) ?? 0
    }

    /// Posts until a 2xx, a 4xx other than 429, or the attempts run out.
    func deliver(using sender: any WebhookSender, clock: any PushClock, logger: PushLogger) async {
        var backoff = initialBackoff
        for attempt in 1...attempts {
            if Task.isCancelled { return }
            let outcome: String
            do {
                let status = try await sender.post(request)
                if (200..<300).contains(status) {
                    logger.debug(
                        "webhook delivered", metadata: ["herald.status": "\(status)", "herald.attempt": "\(attempt)"])
                    return
                }
                if status != 429, status < 500 {
                    logger.warning("webhook refused; not retrying", metadata: ["herald.status": "\(status)"])
                    return
                }
                outcome = "status \(status)"
            } catch {
                outcome = "\(error)"
            }
            guard attempt < attempts else {
                logger.error(
                    "webhook delivery failed", metadata: ["herald.attempts": "\(attempts)", "herald.error": outcome])
                return
            }
            do {
                try await clock.sleep(until: clock.now.advanced(by: backoff))
            } catch {
                return
            }
            backoff = min(backoff * 2, .seconds(60))
        }
    }
}

extension TenantWebhook {
    /// A POST of `body` to this webhook, signed: `X-Herald-Signature: sha256=<hex>` of
    /// HMAC-SHA256(secret, "<X-Herald-Timestamp>.<body>"), with `X-Herald-Event: <event>` and
    /// `X-Herald-Delivery: <delivery>` (the same for every attempt of one delivery).
    func signedRequest(event: String, body: [UInt8], delivery: String, sentAt: Date) -> WebhookRequest {
        let timestamp = String(WebhookDelivery.millis(sentAt) / 1000)
        let headers = [
            "Content-Type": "application/json",
            "User-Agent": "Herald",
            WebhookDelivery.timestampHeader: timestamp,
            WebhookDelivery.signatureHeader: "sha256="
                + WebhookDelivery.signature(secret: secret.bytes, timestamp: timestamp, body: body),
            "X-Herald-Event": event,
            "X-Herald-Delivery": delivery,
        ]
        return WebhookRequest(url: url, headers: headers, body: body, timeout: timeout, allowPrivateAddresses: allowPrivateAddresses)
    }

    /// A signed `credential.expiring` event for this webhook (Herald's credential health monitor
    /// sends it once a day from 14 days before the tenant's client certificate expires), signed
    /// like every other event.
    ///
    /// Body: `{"event": "credential.expiring", "tenant", "kind": "certificate", "not_after"
    /// (milliseconds since 1970), "days_left", "sent_at"}`.
    public func credentialExpiringRequest(tenant: TenantID, notAfter: Date, sentAt: Date) -> WebhookRequest {
        let daysLeft = (notAfter.timeIntervalSince(sentAt) / 86_400).rounded(.down)
        let body = JSONValue.object([
            ("event", .string("credential.expiring")),
            ("tenant", .string(tenant.rawValue)),
            ("kind", .string("certificate")),
            ("not_after", .int(WebhookDelivery.millis(notAfter))),
            ("days_left", .int(daysLeft.isFinite ? Int64(max(-1e9, min(1e9, daysLeft))) : 0)),
            ("sent_at", .int(WebhookDelivery.millis(sentAt))),
        ]).jsonBytes
        let timestamp = String(WebhookDelivery.millis(sentAt) / 1000)
        return signedRequest(
            event: "credential.expiring", body: body, delivery: "\(tenant.rawValue)-credential-expiring-\(timestamp)", sentAt: sentAt)
    }

    /// A batch job's end, as its counts stood then.
    public struct JobEnd: Sendable, Hashable {
        /// `finished` (every item has its outcome) or `cancelled`.
        public var state: String
        public var jobID: String
        public var items: Int
        public var sent: Int
        public var failed: Int
        public var unknown: Int
        /// A cancelled job's items without an outcome (0 for a finished job).
        public var cancelled: Int
        public var endedAt: Date

        public init(state: String, jobID: String, items: Int, sent: Int, failed: Int, unknown: Int, cancelled: Int, endedAt: Date) {
            self.state = state
            self.jobID = jobID
            self.items = items
            self.sent = sent
            self.failed = failed
            self.unknown = unknown
            self.cancelled = cancelled
            self.endedAt = endedAt
        }
    }

    /// A signed `job.finished` or `job.cancelled` event: a batch job of the tenant ended.
    ///
    /// Body: `{"event": "job.finished" | "job.cancelled", "tenant", "job_id", "items", "counts":
    /// {"sent", "failed", "unknown", "cancelled"}, "ended_at", "sent_at"}` (times in milliseconds
    /// since 1970). `X-Herald-Delivery` is `<tenant>-job-<job id>-<state>`: one per job and end.
    public func jobEndedRequest(tenant: TenantID, end: JobEnd, sentAt: Date) -> WebhookRequest {
        let event = "job." + end.state
        let body = JSONValue.object([
            ("event", .string(event)),
            ("tenant", .string(tenant.rawValue)),
            ("job_id", .string(end.jobID)),
            ("items", .int(Int64(end.items))),
            (
                "counts",
                .object([
                    ("sent", .int(Int64(end.sent))), ("failed", .int(Int64(end.failed))),
                    ("unknown", .int(Int64(end.unknown))), ("cancelled", .int(Int64(end.cancelled))),
                ])
            ),
            ("ended_at", .int(WebhookDelivery.millis(end.endedAt))),
            ("sent_at", .int(WebhookDelivery.millis(sentAt))),
        ]).jsonBytes
        return signedRequest(event: event, body: body, delivery: "\(tenant.rawValue)-job-\(end.jobID)-\(end.state)", sentAt: sentAt)
    }
}
