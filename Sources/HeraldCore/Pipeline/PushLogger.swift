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

    /// Messages below this level are dropped without being built.
    public var minimumLevel: Level
    /// Metadata attached to every message.
    public var metadata: Metadata
    private let sink: Sink

    public init(minimumLevel: Level = .info, metadata: Metadata = [:], sink: @escaping Sink) {
        self.minimumLevel = minimumLevel
        self.metadata = metadata
        self.sink = sink
    }

    /// A logger that drops everything.
    public static let disabled = PushLogger(minimumLevel: .critical, sink: { _, _, _ in })

    public subscript(metadataKey key: String) -> String? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(
        _ level: Level, _ message: @autoclosure () -> String, metadata extra: @autoclosure () -> Metadata = [:]
    ) {
        guard level >= minimumLevel else { return }
        let more = extra()
        sink(level, message(), more.isEmpty ? metadata : metadata.merging(more) { _, new in new })
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
