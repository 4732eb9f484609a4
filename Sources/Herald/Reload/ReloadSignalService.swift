import ServiceLifecycle
import UnixSignals

/// Reloads every tenant on SIGHUP (the Unix way of saying "read your configuration again").
/// Ends at graceful shutdown.
///
/// ```shell
/// kill -HUP $(pidof herald)
/// ```
public struct ReloadSignalService: Service {
    public let coordinator: ReloadCoordinator
    public var signal: UnixSignal

    public init(coordinator: ReloadCoordinator, signal: UnixSignal = .sighup) {
        self.coordinator = coordinator
        self.signal = signal
    }

    public func run() async throws {
        let signals = await UnixSignalsSequence(trapping: signal)
        for await _ in signals.cancelOnGracefulShutdown() {
            coordinator.logger.notice("signal received: reloading tenants", metadata: ["herald.signal": "\(signal)"])
            do {
                try await coordinator.reloadAll(trigger: .signal)
            } catch {
                coordinator.logger.error("reload on signal failed", metadata: ["herald.error": "\(error)"])
            }
        }
    }
}
