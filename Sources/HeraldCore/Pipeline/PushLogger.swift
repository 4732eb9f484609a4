/// A structured logger for middlewares and plugins, in HeraldCore's Foundation-only world.
///
/// Herald builds one from its swift-log `Logger` (with `herald.tenant` and `herald.apns-id`
/// already in the metadata). Messages are constant strings; details go in metadata with
/// `herald.`-prefixed keys. Never log a secret.
///
/// ```swift
/// context.logger.warning("webhook delivery failed", metadata: ["herald.status": "\(status)"])
/// ```
public struct PushLogger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public typealias Metadata = [String: String]
    public typealias Sink = @Sendable (_ level: Level, _ message: String, _ metadata: Metadata) -> Void

    /// The metadata key of the notification's apns-id (``withNotificationID(_:)``).
    public static let notificationIDKey = "herald.apns-id"

    /// What a logger and the copies made of it for each send share, held once: the metadata set
    /// on it (without the apns-id) and where messages go. A send's logger is then a reference,
    /// its apns-id and its level, which keeps the context a send carries small.
    private final class Core: Sendable {
        let fixed: Metadata
        let sink: Sink

        init(fixed: Metadata, sink: @escaping Sink) {
            self.fixed = fixed
            self.sink = sink
        }
    }

    private var core: Core
    /// The apns-id of the send, kept apart from the shared metadata so that naming it costs no
    /// dictionary copy on every send: it is merged into the metadata only when a message is
    /// logged (or the metadata is read), and its text made only then.
    private var notificationID: NotificationID?
    /// Messages below this level are dropped without being built.
    public var minimumLevel: Level

    public init(minimumLevel: Level = .info, metadata: Metadata = [:], sink: @escaping Sink) {
        self.core = Core(fixed: metadata, sink: sink)
        self.notificationID = nil
        self.minimumLevel = minimumLevel
    }

    /// Metadata attached to every message.
    public var metadata: Metadata {
        get {
            guard let notificationID else { return core.fixed }
            var all = core.fixed
            all[Self.notificationIDKey] = notificationID.rawValue
            return all
        }
        set {
            core = Core(fixed: newValue, sink: core.sink)
            notificationID = nil
        }
    }

    /// This logger with `herald.apns-id` set to `id`: what the router gives each send's
    /// middlewares. It copies no dictionary (the id is merged when a message is logged).
    public func withNotificationID(_ id: NotificationID) -> PushLogger {
        var logger = self
        logger.notificationID = id
        return logger
    }

    /// A logger that drops everything.
    public static let disabled = PushLogger(minimumLevel: .critical, sink: { _, _, _ in })

    public subscript(metadataKey key: String) -> String? {
        get {
            if key == Self.notificationIDKey, let notificationID { return notificationID.rawValue }
            return core.fixed[key]
        }
        set {
            if key == Self.notificationIDKey {
                notificationID = nil
            }
            var fixed = core.fixed
            fixed[key] = newValue
            core = Core(fixed: fixed, sink: core.sink)
        }
    }

    public func log(
        _ level: Level, _ message: @autoclosure () -> String, metadata extra: @autoclosure () -> Metadata = [:]
    ) {
        guard level >= minimumLevel else { return }
        let more = extra()
        let metadata = self.metadata
        core.sink(level, message(), more.isEmpty ? metadata : metadata.merging(more) { _, new in new })
    }

    public func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(.trace, message(), metadata: metadata())
    }
    public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(.debug, message(), metadata: metadata())
    }
    public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(.info, message(), metadata: metadata())
    }
    public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(.notice, message(), metadata: metadata())
    }
    public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(.warning, message(), metadata: metadata())
    }
    public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(.error, message(), metadata: metadata())
    }
}
