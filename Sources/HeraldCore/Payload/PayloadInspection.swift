import Foundation

/// Looks inside a JSON payload for the few facts validation needs.
public enum PayloadInspection {
    /// True when the payload is a JSON object whose `aps` dictionary holds `content-available`
    /// and nothing else (a background push, which must not use priority 10).
    public static func apsHoldsOnlyContentAvailable(_ payload: [UInt8]) -> Bool {
        // Cheap pre-check: no such key, no need to parse.
        guard payload.count < 16_384,
            String(decoding: payload, as: UTF8.self).contains("content-available"),
            let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
            let aps = object["aps"] as? [String: Any]
        else { return false }
        return aps.count == 1 && aps["content-available"] != nil
    }

    /// True when the payload parses as a JSON object.
    public static func isJSONObject(_ payload: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(payload))) is [String: Any]
    }

    /// Checks that a broadcast payload is a Live Activity update or end: a JSON object whose
    /// `aps` holds `event` (`update` or `end`: a channel cannot start an activity), a numeric
    /// `timestamp`, and with `update` a `content-state` object.
    ///
    /// - Throws: `BadRequestPayload` when it is not a JSON object; `BadRequestParams` naming the
    ///   field otherwise.
    public static func checkLiveActivityUpdate(_ payload: [UInt8]) throws(NotificationValidationError) {
        // The strict parser (no Foundation decoding): a broadcast is checked on every send.
        guard let root = try? StrictJSONParser.parse(payload), case .object(let members) = root.value else {
            throw NotificationValidationError(.badRequestPayload, field: "payload", message: "the payload must be a JSON object")
        }
        guard let aps = members.first(where: { $0.key == "aps" })?.value, case .object(let fields) = aps.value else {
            throw NotificationValidationError(
                .badRequestParams, field: "payload.aps", message: "a Live Activity update needs an aps dictionary")
        }
        func field(_ name: String) -> JSONNode.Value? { fields.first { $0.key == name }?.value.value }
        guard case .string(let event) = field("event") else {
            throw NotificationValidationError(
                .badRequestParams, field: "payload.aps.event", message: "a Live Activity update needs an event (update or end)")
        }
        guard event == "update" || event == "end" else {
            throw NotificationValidationError(
                .badRequestParams, field: "payload.aps.event",
                message: "a broadcast's event is update or end, not \(event.prefix(32))")
        }
        guard case .number = field("timestamp") else {
            throw NotificationValidationError(
                .badRequestParams, field: "payload.aps.timestamp",
                message: "a Live Activity update needs a numeric timestamp (UNIX seconds)")
        }
        if event == "update" {
            guard case .object = field("content-state") else {
                throw NotificationValidationError(
                    .badRequestParams, field: "payload.aps.content-state", message: "an update needs a content-state object")
            }
        }
    }
}
