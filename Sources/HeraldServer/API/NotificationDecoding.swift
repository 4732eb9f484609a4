import HeraldCore

/// The fields of a notification in a request, everything but the device token.
struct NotificationTemplate: Sendable {
    var topic: String?
    var pushType: PushType = .alert
    var priority: Priority?
    var expiration: Expiration?
    var collapseID: String?
    var id: NotificationID?
    var payload: [UInt8]

    func notification(for token: DeviceToken) -> HeraldCore.Notification {
        HeraldCore.Notification(
            deviceToken: token, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
            collapseID: collapseID, id: id, payload: payload)
    }
}

/// Reads notifications from request JSON.
///
/// ```json
/// {"device_token": "…", "topic": "com.example.app", "push_type": "alert", "priority": 10,
///  "expiration": 0, "collapse_id": "news", "apns_id": "…", "environment": "development",
///  "payload": {"aps": {"alert": "Hi"}}}
/// ```
/// or, instead of `payload`, the typed `aps` fields (Apple's spelling) and `custom` top-level keys:
/// `"aps": {"alert": {"title": "Hi", "body": "there"}, "badge": 1}, "custom": {"order": "A-17"}`.
enum NotificationDecoding {
    static let notificationFields = [
        "device_token", "topic", "push_type", "priority", "expiration", "collapse_id", "apns_id", "environment", "payload", "aps",
        "custom",
    ]
    /// A batch's shared notification: no device token, no environment (the batch has one), no apns-id.
    static let templateFields = ["topic", "push_type", "priority", "expiration", "collapse_id", "payload", "aps", "custom"]
    /// One notification of a batch's `notifications` list: no environment (the batch has one).
    static let batchItemFields = notificationFields.filter { $0 != "environment" }

    static func deviceToken(_ reader: JSONObjectReader) throws(APIError) -> DeviceToken {
        guard let hex = try reader.string("device_token", required: true) else { throw APIError.missingField(reader.path("device_token")) }
        return try deviceToken(hex, path: reader.path("device_token"))
    }

    static func deviceToken(_ hex: String, path: String) throws(APIError) -> DeviceToken {
        do {
            return try DeviceToken(hex: hex)
        } catch {
            throw deviceTokenError(error, path: path)
        }
    }

    /// The API's answer to a device token refused by ``DeviceToken/init(hex:)``.
    static func deviceTokenError(_ error: NotificationValidationError, path: String) -> APIError {
        APIError.invalidField(path, error.message, apnsReason: error.reason.wireValue)
    }

    static func environment(_ reader: JSONObjectReader) throws(APIError) -> APNsEnvironment? {
        guard let text = try reader.string("environment") else { return nil }
        guard let environment = APNsEnvironment(rawValue: text) else {
            throw APIError.invalidField(reader.path("environment"), "must be production or development, not '\(text)'")
        }
        return environment
    }

    /// Reads every field but `device_token` and `environment`; `body` holds the bytes the reader's nodes point into.
    static func template(_ reader: JSONObjectReader, body: [UInt8]) throws(APIError) -> NotificationTemplate {
        var template = NotificationTemplate(payload: [])
        template.topic = try reader.string("topic")
        if let text = try reader.string("push_type") {
            guard let pushType = PushType(rawValue: text) else {
                throw APIError.invalidField(
                    reader.path("push_type"), "must be one of \(PushType.allCases.map(\.rawValue).joined(separator: ", ")), not '\(text)'",
                    apnsReason: "InvalidPushType")
            }
            template.pushType = pushType
        }
        if let value = try reader.integer("priority", in: 0...100) {
            do {
                template.priority = try Priority(value: Int(value))
            } catch {
                throw APIError.invalidField(reader.path("priority"), error.message, apnsReason: error.reason.wireValue)
            }
        }
        if let value = try reader.integer("expiration", in: 0...Int64(UInt32.max)) {
            template.expiration = value == 0 ? .immediately : .at(UInt32(value))
        }
        if let collapseID = try reader.string("collapse_id") {
            try checkCollapseID(collapseID, path: reader.path("collapse_id"))
            template.collapseID = collapseID
        }
        if let text = try reader.string("apns_id") {
            do {
                template.id = try NotificationID(text)
            } catch {
                throw APIError.invalidField(reader.path("apns_id"), error.message, apnsReason: error.reason.wireValue)
            }
        }
        template.payload = try payload(reader, body: body)
        return template
    }

    /// The API's rule for `collapse_id`, stricter than APNs' 64 bytes so that the OpenAPI
    /// document can state it exactly: 1 to 64 printable ASCII characters, no space at either
    /// end (the transport's header rule, ``HeraldCore/Notification/headerValueProblem(_:)``,
    /// follows from it).
    static func checkCollapseID(_ value: String, path: String) throws(APIError) {
        let bytes = value.utf8
        guard !bytes.isEmpty, bytes.count <= Notification.maximumCollapseIDLength else {
            throw APIError.invalidField(
                path, "must be 1 to \(Notification.maximumCollapseIDLength) characters, not \(bytes.count) bytes", apnsReason: "BadCollapseId")
        }
        guard bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw APIError.invalidField(path, "must be printable ASCII (no control characters)", apnsReason: "BadCollapseId")
        }
        if let problem = Notification.headerValueProblem(value) {
            throw APIError.invalidField(path, problem, apnsReason: "BadCollapseId")
        }
    }

    /// `payload` (a JSON object, passed on byte for byte) or `aps` + `custom` (typed).
    static func payload(_ reader: JSONObjectReader, body: [UInt8]) throws(APIError) -> [UInt8] {
        switch (reader["payload"], reader.has("aps")) {
        case (let node?, false):
            guard case .object = node.value else {
                throw APIError.invalidField(reader.path("payload"), "must be a JSON object, not \(node.kind)", apnsReason: "BadPayload")
            }
            if reader.has("custom") {
                throw APIError.invalidField(reader.path("custom"), "goes with aps; put custom keys inside payload instead")
            }
            return Array(body[node.range])
        case (nil, true):
            let aps = try APSDecoding.aps(reader)
            var custom: [String: JSONValue] = [:]
            if let node = reader["custom"] {
                guard case .object(let members) = node.value else {
                    throw APIError.invalidField(reader.path("custom"), "must be a JSON object, not \(node.kind)")
                }
                for (key, value) in members {
                    guard key != "aps" else {
                        throw APIError.invalidField(reader.path("custom") + ".aps", "aps is given by the aps field, not in custom")
                    }
                    custom[key] = try JSONObjectReader.jsonValue(value, path: FieldPaths.join(reader.path("custom"), key))
                }
            }
            return Payload(aps: aps, custom: custom).encoded()
        case (nil, false):
            throw APIError.missingField(reader.path("payload"), "give payload (a JSON object) or the typed aps fields")
        case (_?, true):
            throw APIError.invalidField(reader.path("aps"), "give either payload or aps, not both")
        }
    }
}
