import HeraldCore
import NIOCore

/// How a tenant's transport connects and queues. Built from the tenant's `pool:` settings;
/// the rest has defaults that suit APNs.
///
/// ```swift
/// var configuration = TransportConfiguration(pool: tenant.pool)
/// configuration.connectionsPerEndpoint = 4
/// ```
public struct TransportConfiguration: Sendable {
    /// HTTP/2 connections per endpoint (opened lazily).
    public var connectionsPerEndpoint: Int = 2
    /// Another connection of an endpoint opens (up to ``connectionsPerEndpoint``) once every
    /// open one carries this many requests: sustained sends spread over the connections, and so
    /// over event loops (Apple: "When sending many remote notifications, you can establish
    /// multiple connections to these servers to improve performance"), while light traffic
    /// keeps one. nil (the default, the tenant's `pool.open_next_at: 0`): another opens only
    /// when every connection's streams are full. Against a remote APNs a tenant's rate is bound
    /// by its sends in flight over the round trip, not by one connection's event loop, so
    /// spreading would double its connections and take a second loop from the other tenants
    /// for nothing; it pays where one loop's CPU is the bound.
    public var openNextConnectionAt: Int? = nil
    /// Requests that may wait for a free stream; beyond this, sends fail at once with `queueFull`.
    public var maxQueued: Int = 10_000
    /// The default deadline of a send: queue time plus answer time.
    public var requestTimeout: TimeAmount = .seconds(30)
    /// Close a connection after this long without streams. `nil`: never.
    public var idleTimeout: TimeAmount? = .seconds(600)
    /// PING a connection after this long without frames. `nil`: never.
    public var pingInterval: TimeAmount? = .seconds(60)
    /// Close a connection whose PING is not answered within this time.
    public var pingTimeout: TimeAmount = .seconds(10)
    /// TCP connect, and separately TLS + HTTP/2 preface, must finish within this time.
    public var connectTimeout: TimeAmount = .seconds(10)
    /// Waits between reconnect attempts after failures.
    public var backoff = Backoff()
    /// The most streams Herald opens on one connection, whatever the server allows (APNs
    /// often allows 1000). libnghttp2 finds streams by hash, so open streams cost no more per
    /// notification as they grow; requests beyond the ceiling wait in the pool's queue. The
    /// tenant's `pool.max_streams`.
    public var streamCeiling: Int = 1000
    /// How often connections and pools check deadlines, PINGs and idleness.
    public var housekeepingInterval: TimeAmount = .milliseconds(250)
    /// Requests submitted while a connection's answers are being read (a queued request taking
    /// the stream an answer freed, or a completion sending the next notification) are written
    /// after every this many (~32 KB), not all at once when the read burst ends: the server
    /// starts on them meanwhile instead of waiting for the whole burst, so the two sides do not
    /// take turns. 0: at the end of the burst. 96 sends more a second than 0 at the same CPU a
    /// notification (`scripts/bench-client-ab.sh` compares the two).
    public var writeAfterRequests: Int = 96
    /// The outbound proxy the connections go through (nil: directly).
    public var proxy: EgressProxy? = nil

    public init() {}

    /// The tenant's `pool:` settings.
    public init(pool: PoolConfiguration) {
        self.connectionsPerEndpoint = max(1, pool.connections)
        self.maxQueued = max(0, pool.maxQueued)
        self.requestTimeout = Self.amount(seconds: pool.requestTimeout) ?? .seconds(30)
        self.idleTimeout = Self.amount(seconds: pool.idleTimeout)
        self.pingInterval = Self.amount(seconds: pool.pingInterval)
        self.openNextConnectionAt = pool.openNextAt > 0 ? pool.openNextAt : nil
        self.streamCeiling = min(max(1, pool.maxStreams), 1000)
    }

    /// `nil` for zero or less ("never").
    static func amount(seconds: Double) -> TimeAmount? {
        guard seconds > 0, seconds.isFinite else { return nil }
        return .nanoseconds(Int64(min(seconds, 10_000_000) * 1_000_000_000))
    }

    var poolConfiguration: ConnectionPool.Configuration {
        var connection = APNsConnection.Configuration()
        connection.connectTimeout = connectTimeout
        connection.proxy = proxy
        connection.housekeepingInterval = housekeepingInterval
        connection.stateMachine.streamCeiling = max(1, streamCeiling)
        connection.stateMachine.pingInterval = pingInterval
        connection.stateMachine.pingTimeout = pingTimeout
        connection.stateMachine.idleTimeout = idleTimeout
        connection.stateMachine.startTimeout = connectTimeout
        connection.engine.writeAfterRequests = max(0, writeAfterRequests)
        return ConnectionPool.Configuration(
            maxConnections: max(1, connectionsPerEndpoint), maxQueued: max(0, maxQueued), backoff: backoff,
            openNextAt: openNextConnectionAt, connection: connection)
    }
}
