import HeraldStore
import PostgresNIO

// LISTEN/NOTIFY between instances: a stored job reaches idle instances at once, and a change of
// the tenants through one instance's admin API reaches the others.
extension PostgresPushStore: StoreNotifier {
    public func notify(_ channel: StoreChannel, payload: String) async throws {
        guard payload.utf8.count < 8_000 else {
            throw StoreError.invalidArgument("a notification's payload must be under 8000 bytes")
        }
        try await client.query("SELECT pg_notify(\(channel.rawValue), \(payload))", logger: logger)
    }

    /// On a connection of its own (not one of the pool's: a listening connection stays busy).
    public func listen(
        _ channels: [StoreChannel], onListening: @escaping @Sendable () -> Void,
        handler: @escaping @Sendable (StoreChannel, String) async -> Void
    ) async throws {
        let logger = self.logger
        let connection = try await PostgresConnection.connect(
            on: PostgresClient.defaultEventLoopGroup.any(),
            configuration: try Self.connectionConfiguration(configuration), id: 1, logger: logger
        ).get()
        do {
            try await Self.listen(connection, channels[...], onListening: onListening, handler: handler)
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    /// Listens on the first channel, and within it on the rest; then consumes them all at once.
    private static func listen(
        _ connection: PostgresConnection, _ channels: ArraySlice<StoreChannel>,
        listening: [(StoreChannel, PostgresNotificationSequence)] = [], onListening: @escaping @Sendable () -> Void,
        handler: @escaping @Sendable (StoreChannel, String) async -> Void
    ) async throws {
        guard let channel = channels.first else {
            onListening()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (channel, sequence) in listening {
                    group.addTask {
                        for try await notification in sequence {
                            await handler(channel, notification.payload)
                        }
                        // The sequence ends when the connection closes.
                        throw StoreError.cannotOpen("the listening connection closed")
                    }
                }
                _ = try await group.next()
                group.cancelAll()
            }
            return
        }
        try await connection.listen(on: channel.rawValue) { sequence in
            try await listen(
                connection, channels.dropFirst(), listening: listening + [(channel, sequence)], onListening: onListening,
                handler: handler)
        }
    }
}
