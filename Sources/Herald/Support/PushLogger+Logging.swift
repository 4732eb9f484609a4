import HeraldCore
import Logging

extension PushLogger {
    /// A ``PushLogger`` writing to a swift-log `Logger`, keeping its level and metadata.
    public init(_ logger: Logger) {
        self.init(minimumLevel: PushLogger.Level(logger.logLevel), metadata: [:]) { level, message, metadata in
            var logger = logger
            for (key, value) in metadata { logger[metadataKey: key] = .string(value) }
            logger.log(level: Logger.Level(level), Logger.Message(stringLiteral: message))
        }
    }
}

extension PushLogger.Level {
    init(_ level: Logger.Level) {
        switch level {
        case .trace: self = .trace
        case .debug: self = .debug
        case .info: self = .info
        case .notice: self = .notice
        case .warning: self = .warning
        case .error: self = .error
        case .critical: self = .critical
        }
    }
}

extension Logger.Level {
    init(_ level: PushLogger.Level) {
        switch level {
        case .trace: self = .trace
        case .debug: self = .debug
        case .info: self = .info
        case .notice: self = .notice
        case .warning: self = .warning
        case .error: self = .error
        case .critical: self = .critical
        }
    }
}
