/// Samples read from the Prometheus text `/metrics` answers with, for the tests' checks.
enum PrometheusText {
    /// Every sample whose name (with its labels, as rendered) starts with `prefix`, by that name.
    static func samples(_ text: String, prefix: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix(prefix) {
            // A sample line is `name{labels} value`; comments (`# HELP`, `# TYPE`) never match a prefix of ours.
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    /// The value of the sample `name` (with its labels, as rendered), or nil when it is absent.
    static func value(_ text: String, _ name: String) -> Double? {
        samples(text, prefix: name + " ")[name]
    }
}
