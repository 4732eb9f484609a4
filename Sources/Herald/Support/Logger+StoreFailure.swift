import Logging

extension Logger {
    /// Logs a failed store call at `level`, or at debug when the caller was cancelled: that
    /// happens only when a graceful shutdown outlasted `shutdown_timeout`, which the server says
    /// once (`ShutdownTimeoutNotice`) instead of once per cancelled call.
    func storeFailure(
        _ message: @autoclosure () -> Logger.Message, error: any Error, level: Logger.Level = .error,
        metadata: @autoclosure () -> Logger.Metadata = [:]
    ) {
        var fields = metadata()
        fields["herald.error"] = "\(error)"
        log(level: error is CancellationError ? .debug : level, message(), metadata: fields)
    }
}
