import HeraldConfig
import HummingbirdCore
import Logging
import NIOCore

/// The API listener's limits from `http:` in Hummingbird's terms (see ``BodyTimeoutHandler``).
enum ListenerLimits {
    /// HTTP/1 with Hummingbird's idle timeout (a connection with no whole request in progress),
    /// `Expect: 100-continue` answered (``ExpectContinueHandler``), ``BodyTimeoutHandler`` on every connection, and idle connections closed to make room near
    /// the connection cap (``IdleConnectionReaper``).
    static func server(_ http: HeraldConfig.ServerConfiguration.HTTPSettings, reaper: IdleConnectionReaper) -> HTTPServerBuilder {
        let bodyTimeout = timeAmount(seconds: http.bodyTimeout)
        return .http1(
            configuration: HTTP1Channel.Configuration(
                additionalChannelHandlers: [
                    ExpectContinueHandler(), BodyTimeoutHandler(timeout: bodyTimeout), IdleConnectionTracker(reaper: reaper),
                ],
                idleTimeout: timeAmount(seconds: http.idleTimeout)))
    }

    /// At most `http.maxConnections` open connections: the server stops accepting at the cap.
    static func connectionCap(_ http: HeraldConfig.ServerConfiguration.HTTPSettings, logger: Logger) -> any AvailableConnectionsDelegate {
        MaximumAvailableConnections(http.maxConnections, logger: logger)
    }

    /// The parser keeps these within 100 ms ... 1 h, so the conversion cannot overflow.
    static func timeAmount(seconds: Double) -> TimeAmount {
        .nanoseconds(Int64((seconds * 1e9).rounded()))
    }
}
