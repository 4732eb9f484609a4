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
}
