import HeraldCore
import Yams

extension TenantFileParser {
    // MARK: delivery

    /// `delivery:` — the guarantee for unknown outcomes, the retry schedule of batch items and the
    /// circuit per endpoint (``DeliveryPolicy``); every key optional.
    func parseDelivery(_ node: Node) -> DeliveryPolicy? {
        let path = FieldPath(text: "delivery")
        if node.isNull { return DeliveryPolicy() }
        guard let section = CheckedMapping(node, path: path, allowedKeys: Keys.delivery, diagnostics: diagnostics) else {
            return nil
        }
        var policy = DeliveryPolicy()
        var ok = true

        if let value = section["guarantee"] {
            let field = path.appending("guarantee")
            if let text = diagnostics.string(value, field) {
                if let guarantee = DeliveryGuarantee(rawValue: text) {
                    policy.guarantee = guarantee
                } else {
                    diagnostics.error(at: value, field.text, "must be at-least-once or at-most-once, not '\(text)'")
                    ok = false
                }
            } else {
                ok = false
            }
        }

        func duration(_ key: String, minimum: Double, maximum: Double, into keyPath: WritableKeyPath<DeliveryPolicy, Duration>) {
            guard let value = section[key] else { return }
            let field = path.appending(key)
            guard let seconds = diagnostics.duration(value, field, minimum: minimum, allowZero: false) else {
                ok = false
                return
            }
            guard seconds <= maximum else {
                diagnostics.error(at: value, field.text, "must be at most \(Self.describeSeconds(maximum)), not \(Self.describeSeconds(seconds))")
                ok = false
                return
            }
            policy[keyPath: keyPath] = .milliseconds(Int64((seconds * 1000).rounded()))
        }
        duration("max_retry_duration", minimum: 1, maximum: 7 * 86_400, into: \.maxRetryDuration)
        duration("initial_backoff", minimum: 0.01, maximum: 3600, into: \.initialBackoff)
        duration("max_backoff", minimum: 0.01, maximum: 86_400, into: \.maxBackoff)
        duration("circuit_probe_interval", minimum: 0.01, maximum: 3600, into: \.circuit.probeInterval)
        duration("circuit_max_probe_interval", minimum: 0.01, maximum: 86_400, into: \.circuit.maxProbeInterval)

        if let value = section["jitter"] {
            let field = path.appending("jitter")
            if let jitter = fraction(value, field) {
                policy.jitter = jitter
            } else {
                ok = false
            }
        }
        if let value = section["circuit_failure_threshold"] {
            if let threshold = diagnostics.integer(value, path.appending("circuit_failure_threshold"), in: 1...1_000_000) {
                policy.circuit.failureThreshold = threshold
            } else {
                ok = false
            }
        }

        guard ok else { return nil }
        if policy.maxBackoff < policy.initialBackoff {
            let node = section["max_backoff"] ?? section["initial_backoff"] ?? node
            diagnostics.error(
                at: node, path.appending(section.has("max_backoff") ? "max_backoff" : "initial_backoff").text,
                "max_backoff (\(Self.describe(policy.maxBackoff))) must be at least initial_backoff (\(Self.describe(policy.initialBackoff)))")
            return nil
        }
        if policy.circuit.maxProbeInterval < policy.circuit.probeInterval {
            let node = section["circuit_max_probe_interval"] ?? section["circuit_probe_interval"] ?? node
            diagnostics.error(
                at: node,
                path.appending(section.has("circuit_max_probe_interval") ? "circuit_max_probe_interval" : "circuit_probe_interval").text,
                "circuit_max_probe_interval (\(Self.describe(policy.circuit.maxProbeInterval))) must be at least circuit_probe_interval (\(Self.describe(policy.circuit.probeInterval)))"
            )
            return nil
        }
        return policy
    }

    /// A number from 0 to 1.
    private func fraction(_ node: Node, _ path: FieldPath) -> Double? {
        guard case .scalar(let scalar) = node, node.tagName == .int || node.tagName == .float, let value = node.float
        else {
            diagnostics.error(at: node, path.text, "must be a number from 0 to 1 (e.g. 0.5), not \(node.kindForMessages)")
            return nil
        }
        guard value.isFinite, (0...1).contains(value) else {
            diagnostics.error(at: node, path.text, "must be from 0 to 1, not \(scalar.string)")
            return nil
        }
        diagnostics.record(path.text, node)
        return value
    }

    static func describe(_ duration: Duration) -> String { describeSeconds(duration.secondsValue) }

    static func describeSeconds(_ seconds: Double) -> String {
        if seconds >= 3600, seconds.truncatingRemainder(dividingBy: 3600) == 0 { return "\(Int(seconds / 3600))h" }
        if seconds >= 60, seconds.truncatingRemainder(dividingBy: 60) == 0 { return "\(Int(seconds / 60))m" }
        if seconds >= 1, seconds.rounded() == seconds { return "\(Int(seconds))s" }
        return "\(Int((seconds * 1000).rounded()))ms"
    }
}
