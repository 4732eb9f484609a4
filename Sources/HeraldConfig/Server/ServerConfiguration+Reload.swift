import Foundation
import HeraldCore
import Yams

// The `reload:` section of `config/herald.yaml`: how `herald serve` notices changed tenant files.
extension ServerConfiguration {
    /// What makes `herald serve` reload its tenants besides the admin API (`reload:`).
    ///
    /// ```yaml
    /// reload:
    ///   watch: true          # poll the tenants directory and reload what changed
    ///   watch_interval: 2s   # how often (100ms to 1h)
    ///   sighup: true         # reload every tenant on SIGHUP
    /// ```
    public struct ReloadSettings: Sendable, Hashable {
        /// Poll the tenants directory (and the key, certificate and CA files the tenants use)
        /// and reload when something changed.
        public var watch: Bool = true
        /// How often the watcher looks, in seconds.
        public var watchInterval: Double = 2
        /// Reload every tenant when the process gets SIGHUP.
        public var sighup: Bool = true

        public init() {}
    }

    static let reloadKeys = ["watch", "watch_interval", "sighup"]
    static let watchIntervalRange = 0.1...3600.0

    /// Reads the `reload:` section of the top-level mapping.
    static func parseReloadSection(
        _ mapping: CheckedMapping, into configuration: inout ServerConfiguration, diagnostics: YAMLDiagnostics
    ) {
        guard let node = mapping["reload"],
            let reload = CheckedMapping(
                node, path: FieldPath(text: "reload"), allowedKeys: reloadKeys, diagnostics: diagnostics)
        else { return }
        if let node = reload["watch"], let value = boolean(node, "reload.watch", diagnostics: diagnostics) {
            configuration.reload.watch = value
        }
        if let node = reload["sighup"], let value = boolean(node, "reload.sighup", diagnostics: diagnostics) {
            configuration.reload.sighup = value
        }
        if let node = reload["watch_interval"],
            let value = diagnostics.duration(
                node, FieldPath(text: "reload.watch_interval"), minimum: watchIntervalRange.lowerBound, allowZero: false
            )
        {
            if value > watchIntervalRange.upperBound {
                diagnostics.error(
                    at: node, "reload.watch_interval",
                    "must be from 100ms to 1h; to stop watching, set reload.watch: false")
            } else {
                configuration.reload.watchInterval = value
            }
        }
    }

    static func boolean(_ node: Node, _ field: String, diagnostics: YAMLDiagnostics) -> Bool? {
        if case .scalar = node, node.tagName == .bool, let value = node.bool {
            diagnostics.record(field, node)
            return value
        }
        diagnostics.error(at: node, field, "must be true or false, not \(node.kindForMessages)")
        return nil
    }
}
